//! The durable record format: what a client submits, the inputs the plane replays, and the
//! errors a record is refused with. Records written by earlier versions must keep reading.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;
use weave_core::agentic::EnvNodeId;
use weave_core::{JobId, JobSpec, Micros, NodeId};
use weave_dispatch::Phase;
use weave_trace::{JobFields, JsonlJob, NoUnknownFields};

/// Allowed slowdown of a job that does not give one.
pub const DEFAULT_SLO: f64 = 1.5;

/// A job as a client submits it: the job's fields shared with the trace format
/// ([`JobFields`]), without arrival (the server's clock gives it) and with what only a
/// submission has ([`ServerFields`]). Unknown fields are refused by name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SubmitSpec {
    pub id: String,
    #[serde(flatten)]
    pub job: JobFields,
    #[serde(flatten)]
    pub server: ServerFields,
    #[serde(flatten, skip_serializing)]
    pub strict: NoUnknownFields,
}

/// What a submission has beyond the job's fields.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ServerFields {
    /// Switch costs and sync time the job measured of itself (Weave's runtime reports them
    /// with every phase), seconds: they replace the model's estimate for its model size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_warm_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_cold_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_s: Option<f64>,
    /// What an agentic job measured of its environments: its rollouts are planned with its
    /// declaration rescaled to these (a re-admission carries its drivers' medians here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_environment: Option<weave_core::agentic::EnvMeasured>,
    /// Re-admission from a checkpoint: iterations already done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<u64>,
    /// What an execution backend runs for this job (absent: the job runs itself and only
    /// asks Weave where and when).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Box<LaunchSpec>>,
}

impl ServerFields {
    /// JSON Schema of each field (OpenAPI 3.0 dialect), by its name on the wire.
    pub fn schema() -> serde_json::Map<String, serde_json::Value> {
        let props = serde_json::json!({
            "switch_warm_s": { "type": "number", "minimum": 0, "description": "Measured warm switch, seconds (replaces the model's)." },
            "switch_cold_s": { "type": "number", "minimum": 0, "description": "Measured cold switch, seconds (replaces the model's)." },
            "sync_s": { "type": "number", "minimum": 0, "description": "Measured weight sync, seconds (replaces the model's)." },
            "measured_environment": {
                "description": "An agentic job's measured environments (the medians its drivers reported, as in the job view's environment.measured): its rollouts are planned with its declaration rescaled to them, the declared shapes kept. A re-admission carries them.",
                "type": "object", "additionalProperties": false,
                "required": ["turns_per_trajectory", "env_step_s", "startup_s_per_trajectory"],
                "properties": {
                    "turns_per_trajectory": { "type": "number", "minimum": 1 },
                    "env_step_s": { "type": "number", "minimum": 0 },
                    "startup_s_per_trajectory": { "type": "number", "minimum": 0 }
                }
            },
            "resume_from": { "type": "integer", "minimum": 0, "description": "Iterations already done (a checkpoint to resume from)." },
            "launch": {
                "description": "What an execution backend (weave serve --backend ray) runs for the job. Such a job joins its group's rotation when it first asks to start a phase: its nodes serve the group's other members while its processes start (the job shows `starting`).",
                "type": "object", "required": ["entrypoint"], "additionalProperties": false,
                "properties": {
                    "entrypoint": { "type": "string", "minLength": 1, "maxLength": 4096 },
                    "env": { "type": "object", "additionalProperties": { "type": "string" },
                             "description": "Extra environment; names starting with WEAVE_ are reserved." }
                }
            }
        });
        match props {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("a JSON object literal"),
        }
    }
}

/// How an execution backend (Ray) starts a job.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaunchSpec {
    /// Shell command the job's driver runs, e.g. `python3 train.py --config x.yaml`.
    pub entrypoint: String,
    /// Extra environment variables (names starting with `WEAVE_` are Weave's own).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl LaunchSpec {
    fn validate(&self) -> Result<(), PlaneError> {
        let invalid = |field: &str, reason: &str| PlaneError::Invalid { field: field.into(), reason: reason.into() };
        if self.entrypoint.trim().is_empty() || self.entrypoint.len() > 4096 {
            return Err(invalid("launch.entrypoint", "expected a command of 1-4096 characters"));
        }
        for key in self.env.keys() {
            let ok = !key.is_empty()
                && key.len() <= 128
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(invalid(&format!("launch.env.{key}"), "not a valid environment variable name"));
            }
            if key.starts_with("WEAVE_") {
                return Err(invalid(&format!("launch.env.{key}"), "names starting with WEAVE_ are set by Weave"));
            }
        }
        Ok(())
    }
}

impl SubmitSpec {
    /// Its allowed slowdown: the one it gives, or the server's default.
    pub fn allowed_slowdown(&self) -> f64 {
        self.job.slo.unwrap_or(DEFAULT_SLO)
    }

    /// Validates through the trace reader's rules; errors name the field.
    pub fn to_spec(&self, id: JobId, arrival: Micros) -> Result<JobSpec, PlaneError> {
        let row = JsonlJob {
            id: self.id.clone(),
            arrival_s: 0.0,
            job: JobFields { iterations: Some(self.job.iterations.unwrap_or(u64::MAX)), ..self.job.clone() },
            // The server takes the tenant from the token, not from the submission.
            tenant: None,
            departure_s: None,
            strict: NoUnknownFields,
        };
        let mut spec =
            row.to_spec().map_err(|(field, reason)| PlaneError::Invalid { field: field.to_string(), reason })?;
        // `~` joins a name and its tenant in a job's key (see `Plane::key_for`); clients may
        // not use it (`check_limits`), records may.
        if self.id.len() > 128 + 1 + 64 || !self.id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c)) {
            return Err(PlaneError::Invalid {
                field: "id".into(),
                reason: "use 1-128 characters from A-Z a-z 0-9 - _ .".into(),
            });
        }
        if let (Some(n), Some(r)) = (self.job.iterations, self.server.resume_from) {
            if r >= n {
                return Err(PlaneError::Invalid {
                    field: "resume_from".into(),
                    reason: format!("must be below iterations ({n})"),
                });
            }
        }
        if let Some(l) = &self.server.launch {
            l.validate()?;
        }
        spec.id = id;
        spec.arrival = arrival;
        Ok(spec)
    }
}

/// Limits on what a new submission may ask for. They are checked when a job is submitted
/// (`SubmitSpec::check_limits`), not when records are replayed: a store written before a
/// limit existed still opens.
pub mod limits {
    /// Iterations a job may run, and the checkpoint it may resume from.
    pub const MAX_ITERATIONS: u64 = 1_000_000_000;
    /// A declared phase duration, seconds (a week).
    pub const MAX_PHASE_S: f64 = 7.0 * 24.0 * 3600.0;
    /// The largest allowed slowdown.
    pub const MAX_SLO: f64 = 100.0;
}

impl SubmitSpec {
    /// What a new submission must satisfy beyond being well-formed, each refusal naming its
    /// field: ids start with a letter or digit (so `.` and `..` are not ids), counts and
    /// durations stay within [`limits`].
    pub fn check_limits(&self) -> Result<(), PlaneError> {
        let bad = |field: &str, reason: String| Err(PlaneError::Invalid { field: field.into(), reason });
        if !self.id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()) {
            return bad("id", "must start with a letter or a digit".into());
        }
        if self.id.len() > 128 || !self.id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return bad("id", "use 1-128 characters from A-Z a-z 0-9 - _ .".into());
        }
        for (field, v) in [("iterations", self.job.iterations), ("resume_from", self.server.resume_from)] {
            if v.is_some_and(|n| n > limits::MAX_ITERATIONS) {
                return bad(field, format!("at most {}", limits::MAX_ITERATIONS));
            }
        }
        for (field, v) in [("rollout_s", self.job.rollout_s), ("train_s", self.job.train_s)] {
            if v.is_some_and(|t| !(t.is_finite() && t > 0.0 && t <= limits::MAX_PHASE_S)) {
                return bad(field, format!("seconds in (0, {}]", limits::MAX_PHASE_S));
            }
        }
        for (field, v) in [
            ("switch_warm_s", self.server.switch_warm_s),
            ("switch_cold_s", self.server.switch_cold_s),
            ("sync_s", self.server.sync_s),
        ] {
            if v.is_some_and(|t| !(t.is_finite() && (0.0..=limits::MAX_PHASE_S).contains(&t))) {
                return bad(field, format!("seconds in [0, {}]", limits::MAX_PHASE_S));
            }
        }
        if let Some(m) = &self.server.measured_environment {
            if self.job.agentic.is_none() {
                return bad("measured_environment", "only for an agentic job (one with `agentic`)".into());
            }
            if !(m.turns_per_trajectory.is_finite() && (1.0..=1000.0).contains(&m.turns_per_trajectory)) {
                return bad("measured_environment.turns_per_trajectory", "from 1 to 1000".into());
            }
            for (field, v) in [
                ("measured_environment.env_step_s", m.env_step_s),
                ("measured_environment.startup_s_per_trajectory", m.startup_s_per_trajectory),
            ] {
                if !(v.is_finite() && (0.0..=limits::MAX_PHASE_S).contains(&v)) {
                    return bad(field, format!("seconds in [0, {}]", limits::MAX_PHASE_S));
                }
            }
        }
        if self.job.slo.is_some_and(|v| !(v.is_finite() && (1.0..=limits::MAX_SLO).contains(&v))) {
            return bad("slo", format!("an allowed slowdown in [1, {}]", limits::MAX_SLO));
        }
        Ok(())
    }

    /// Refuses an agentic job this cluster's environment pool cannot host (or that has no
    /// environment pool), naming the field.
    pub fn check_environment(&self, env: Option<&weave_core::agentic::EnvPoolConfig>) -> Result<(), PlaneError> {
        match &self.job.agentic {
            Some(a) => a.check_fits(env).map_err(|(field, reason)| PlaneError::Invalid { field: field.into(), reason }),
            None => Ok(()),
        }
    }

    /// Refuses a staleness above what this server allows (`--max-staleness`); a malformed one
    /// is refused with the trace reader's reason.
    pub fn check_staleness(&self, max: u32) -> Result<(), PlaneError> {
        let k = self.to_spec(JobId(0), Micros::ZERO)?.staleness;
        if k > max {
            let reason = if max == 0 {
                format!("{k}: this server admits on-policy jobs only (staleness 0; see `weave serve --max-staleness`)")
            } else {
                format!("{k} is above this server's largest, {max} (`weave serve --max-staleness`)")
            };
            return Err(PlaneError::Invalid { field: "staleness".into(), reason });
        }
        Ok(())
    }
}

/// One durable input.
// A record is built once per request and then serialized; boxing the submission would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    Submit {
        time_us: u64,
        tenant: String,
        job: SubmitSpec,
    },
    Cancel {
        time_us: u64,
        job: String,
    },
    Finish {
        time_us: u64,
        job: String,
        phase: Phase,
        iteration: u64,
        duration_us: u64,
        meta: Option<serde_json::Value>,
        /// The admission (`JobView::uid`) the phase was granted under, when the client says:
        /// a finish from an admission that has since ended (preempted, failed, moved) is
        /// refused even if the job was re-admitted and granted the same phase again, so the
        /// driver hears that it was re-queued and its stale measurement is not kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admission: Option<u32>,
    },
    Fail {
        time_us: u64,
        job: String,
        reason: String,
    },
    /// The job's driver lost work in flight (a process of the job died): this admission ends
    /// and the job is re-admitted from its last completed iteration, as after a lost node,
    /// so that the phase whose output died with the process is run again.
    Restart {
        time_us: u64,
        job: String,
        reason: String,
    },
    /// An execution backend lost a node: it leaves service, every job on it fails and is
    /// re-admitted from its last completed iteration where capacity allows.
    NodeDown {
        time_us: u64,
        node: NodeId,
        reason: String,
    },
    /// A lost node is back in service (or its preemption notice is withdrawn).
    NodeUp {
        time_us: u64,
        node: NodeId,
    },
    /// A preemption notice: the node closes to new placements now and is taken out of service
    /// (as [`Record::NodeDown`]) once `deadline_us` has passed.
    NodeNotice {
        time_us: u64,
        node: NodeId,
        deadline_us: u64,
        reason: String,
    },
    /// An environment node left service: the pool placement reserves from is smaller by its
    /// cores. The agentic jobs running stay (their drivers run its trajectories again on the
    /// nodes left); new ones wait for room.
    EnvNodeDown {
        time_us: u64,
        node: EnvNodeId,
        reason: String,
    },
    /// An environment node is back in service.
    EnvNodeUp {
        time_us: u64,
        node: EnvNodeId,
    },
    /// An execution backend's inventory: the fixed pools hold at least this many nodes.
    Inventory {
        time_us: u64,
        rollout: u32,
        training: u32,
    },
    /// The periodic consolidation pass over every job that runs alone.
    Consolidate {
        time_us: u64,
    },
    /// A job an execution backend launches asked for its first phase under this admission
    /// (`admission`: `JobView::uid`): it joins its group's rotation now. Until then its nodes
    /// serve the group's other members, not its start-up.
    Ready {
        time_us: u64,
        job: String,
        admission: u32,
    },
    /// An execution backend launched this admission of the job (`admission`: `JobView::uid`)
    /// on its cluster manager.
    Launched {
        time_us: u64,
        job: String,
        admission: u32,
    },
    /// A borrower's driver moved its requests off the rollout nodes lent to it (lending on):
    /// the loan ends.
    ReturnLoan {
        time_us: u64,
        job: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admission: Option<u32>,
    },
}

impl Record {
    pub fn time_us(&self) -> u64 {
        match self {
            Record::Submit { time_us, .. }
            | Record::Cancel { time_us, .. }
            | Record::Finish { time_us, .. }
            | Record::Fail { time_us, .. }
            | Record::Restart { time_us, .. }
            | Record::NodeDown { time_us, .. }
            | Record::NodeUp { time_us, .. }
            | Record::NodeNotice { time_us, .. }
            | Record::EnvNodeDown { time_us, .. }
            | Record::EnvNodeUp { time_us, .. }
            | Record::Inventory { time_us, .. }
            | Record::Consolidate { time_us }
            | Record::Ready { time_us, .. }
            | Record::Launched { time_us, .. }
            | Record::ReturnLoan { time_us, .. } => *time_us,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum PlaneError {
    #[error("`{field}`: {reason}")]
    Invalid { field: String, reason: String },
    #[error("job `{0}` not found")]
    NotFound(String),
    #[error("job `{0}` already exists and is active")]
    Duplicate(String),
    #[error("job `{job}`: {reason}")]
    Conflict { job: String, reason: String },
    #[error("cannot place job: {0}")]
    Placement(String),
}
