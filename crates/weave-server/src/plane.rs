//! The control plane's core: a deterministic state machine over durable records. It holds the
//! same `Placer` and `Dispatcher`s the simulator uses, driven by wall-clock records instead of
//! simulated events. Replaying the records of a store through a fresh `Plane` rebuilds jobs,
//! groups, placements and every group's dispatch position exactly.
//!
//! Run-time gating: a job's switch and weight sync are done by the job itself as part of its
//! phases, so the plane completes them at once; what it hands out are phase grants.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use thiserror::Error;
use weave_core::{ClusterConfig, GroupId, JobId, JobSpec, Micros, NodeId, PhaseTimes};
use weave_dispatch::from_model::member_spec;
use weave_dispatch::{Action, Dispatcher, GroupLimits, Input, Phase};
use weave_model::{ProfileModel, SwitchKind};
use weave_place::consolidate::{Churn, ChurnLimits};
use weave_place::{Decision, DecisionKind, PlaceError, PlaceJob, Placer, PlacerConfig, Target, Variation};
use weave_trace::JsonlJob;

mod consolidation;
mod gate;
mod queue;
mod snapshot;
pub use gate::{Gate, RolloutGrant};
pub use queue::Queued;

/// Allowed slowdown of a job that does not give one.
pub const DEFAULT_SLO: f64 = 1.5;
/// Measured phases kept per job for re-estimation.
const MEASURED_KEPT: usize = 9;

/// A job as a client submits it: the trace format's fields, without arrival (the server's
/// clock gives it) and with an optional checkpoint to resume from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubmitSpec {
    pub id: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<f64>,
    /// Iterations to run; absent = until cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_s: Option<f64>,
    /// Switch costs and sync time the job measured of itself (Weave's runtime reports them
    /// with every phase), seconds: they replace the model's estimate for its model size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_warm_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_cold_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_s: Option<f64>,
    /// Re-admission from a checkpoint: iterations already done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<u64>,
    /// Bounded staleness k, a whole number (absent: 0, on-policy): rollout n may run beside
    /// trainings n-k .. n-1 with the weights they left; each rollout grant names its weights
    /// version. At most the server's `--max-staleness`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<serde_json::Value>,
    /// `low`, `normal` (default) or `high`: the order among a tenant's waiting jobs when the
    /// pools have quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// What an execution backend runs for this job (absent: the job runs itself and only
    /// asks Weave where and when).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Box<LaunchSpec>>,
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
    /// Validates through the trace reader's rules; errors name the field.
    pub fn to_spec(&self, id: JobId, arrival: Micros) -> Result<JobSpec, PlaneError> {
        let row = JsonlJob {
            id: self.id.clone(),
            arrival_s: 0.0,
            job_type: self.job_type.clone(),
            model: self.model.clone(),
            max_tokens: self.max_tokens.clone(),
            batch: self.batch,
            algorithm: self.algorithm.clone(),
            rollout_nodes: self.rollout_nodes,
            train_nodes: self.train_nodes,
            slo: self.slo,
            iterations: Some(self.iterations.unwrap_or(u64::MAX)),
            departure_s: None,
            rollout_s: self.rollout_s,
            train_s: self.train_s,
            // The server takes the tenant from the token, not from the submission.
            tenant: None,
            priority: self.priority.clone(),
            staleness: self.staleness.clone(),
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
        if let (Some(n), Some(r)) = (self.iterations, self.resume_from) {
            if r >= n {
                return Err(PlaneError::Invalid {
                    field: "resume_from".into(),
                    reason: format!("must be below iterations ({n})"),
                });
            }
        }
        if let Some(l) = &self.launch {
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
        for (field, v) in [("iterations", self.iterations), ("resume_from", self.resume_from)] {
            if v.is_some_and(|n| n > limits::MAX_ITERATIONS) {
                return bad(field, format!("at most {}", limits::MAX_ITERATIONS));
            }
        }
        for (field, v) in [("rollout_s", self.rollout_s), ("train_s", self.train_s)] {
            if v.is_some_and(|t| !(t.is_finite() && t > 0.0 && t <= limits::MAX_PHASE_S)) {
                return bad(field, format!("seconds in (0, {}]", limits::MAX_PHASE_S));
            }
        }
        for (field, v) in
            [("switch_warm_s", self.switch_warm_s), ("switch_cold_s", self.switch_cold_s), ("sync_s", self.sync_s)]
        {
            if v.is_some_and(|t| !(t.is_finite() && (0.0..=limits::MAX_PHASE_S).contains(&t))) {
                return bad(field, format!("seconds in [0, {}]", limits::MAX_PHASE_S));
            }
        }
        if self.slo.is_some_and(|v| !(v.is_finite() && (1.0..=limits::MAX_SLO).contains(&v))) {
            return bad("slo", format!("an allowed slowdown in [1, {}]", limits::MAX_SLO));
        }
        Ok(())
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
    /// An execution backend lost a node: it leaves service, every job on it fails and is
    /// re-admitted from its last completed iteration where capacity allows.
    NodeDown {
        time_us: u64,
        node: NodeId,
        reason: String,
    },
    /// A lost node is back in service.
    NodeUp {
        time_us: u64,
        node: NodeId,
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
}

impl Record {
    pub fn time_us(&self) -> u64 {
        match self {
            Record::Submit { time_us, .. }
            | Record::Cancel { time_us, .. }
            | Record::Finish { time_us, .. }
            | Record::Fail { time_us, .. }
            | Record::NodeDown { time_us, .. }
            | Record::NodeUp { time_us, .. }
            | Record::Inventory { time_us, .. }
            | Record::Consolidate { time_us } => *time_us,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for room in fixed pools (see [`Plane::queue`]).
    Queued,
    Running,
    Completed,
    Cancelled,
    Failed,
    /// This admission was preempted for another job; the job waits in the queue again and
    /// resumes from its last completed iteration.
    Preempted,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobEntry {
    pub name: String,
    pub tenant: String,
    pub id: JobId,
    pub spec: JobSpec,
    pub slo: f64,
    /// `None`: runs until cancelled.
    pub iterations: Option<u64>,
    pub state: JobState,
    pub decision: Option<Decision>,
    /// What the job may run now and ask for next (one phase at a time on-policy; with
    /// staleness a rollout beside a training).
    #[serde(default)]
    pub gate: Gate,
    /// A snapshot written before lanes held the gate as these two (read once by `restore`).
    #[serde(default, skip_serializing, rename = "granted")]
    legacy_granted: Option<(Phase, u64)>,
    #[serde(default, skip_serializing, rename = "next")]
    legacy_next: Option<(Phase, u64)>,
    pub completed_iterations: u64,
    pub failure: Option<String>,
    pub submitted_us: u64,
    /// Current estimate (conservative at first, then re-estimated from measured phases).
    pub estimate: PhaseTimes,
    /// The submission as made (re-admission after a node failure resubmits it).
    pub submit: SubmitSpec,
    #[serde(skip)]
    measured: Measured,
    /// When the job became ready for its next phase (admission or its last finish): a grant's
    /// wait is measured from here.
    #[serde(skip)]
    ready_us: u64,
    /// When its current iteration started (admission or its last training finish).
    #[serde(skip)]
    iteration_started_us: u64,
}

/// Recent measured (rollout, training) durations.
type Measured = (VecDeque<Micros>, VecDeque<Micros>);

impl JobEntry {
    /// The phase granted now, rollout first (on-policy the only one; see `gate.grants()`).
    pub fn granted(&self) -> Option<(Phase, u64)> {
        self.gate.grants().first().copied()
    }

    /// The next phase in iteration order (on-policy: the barrier's one next phase).
    pub fn next(&self) -> (Phase, u64) {
        self.gate.next()
    }

    /// How much longer its SLO allows this admission to have taken than it has: its allowed
    /// slowdown times its solo time for the iterations done (at its current estimate, with its
    /// staleness), less the time from admission to its last training's end. Slack banked by
    /// earlier admissions is not carried (a move is judged more strictly, never less).
    pub fn banked_slack(&self) -> Micros {
        let done = self.completed_iterations.saturating_sub(self.submit.resume_from.unwrap_or(0));
        let solo = weave_dispatch::timing::solo_period(self.estimate.rollout, self.estimate.train, self.gate.staleness);
        let allowed = Micros(solo.0.saturating_mul(done)).scale(self.slo);
        let taken = if done == 0 { 0 } else { self.iteration_started_us.saturating_sub(self.submitted_us) };
        allowed.saturating_sub(Micros(taken))
    }

    /// Whether the estimate comes from the job's own measurements (both phases seen).
    pub fn measured_estimate(&self) -> bool {
        !self.measured.0.is_empty() && !self.measured.1.is_empty()
    }

    /// The job's re-admission from its last completed iteration (after a node failure or a
    /// consolidation move): its submission resuming there, and what it measured of itself,
    /// which outlives its nodes and places the new admission.
    fn resubmission(&self) -> (SubmitSpec, Option<(PhaseTimes, Measured)>) {
        let mut resubmit = self.submit.clone();
        resubmit.resume_from = (self.completed_iterations > 0).then_some(self.completed_iterations);
        let carried = self.measured_estimate().then(|| (self.estimate, self.measured.clone()));
        (resubmit, carried)
    }
}

/// What happened, for clients and tests (grants, finishes with their metadata, endings).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PlaneEvent {
    pub seq: u64,
    pub time_us: u64,
    pub job: String,
    pub kind: String,
    pub phase: Option<Phase>,
    pub iteration: Option<u64>,
    pub group: Option<u32>,
    pub meta: Option<serde_json::Value>,
}

pub struct Plane {
    cluster: ClusterConfig,
    profile: ProfileModel,
    placer: Placer,
    dispatchers: BTreeMap<GroupId, Dispatcher>,
    jobs: BTreeMap<String, JobEntry>,
    names: Vec<String>,
    events: Vec<PlaneEvent>,
    /// Changes with every applied record (long-polls wait for it to move).
    pub version: u64,
    /// Consolidation (co-located mode and moves); `None`: off.
    churn: Option<Churn>,
    /// Groups left with one member by the record being applied: consolidation looks at them
    /// once the record's own effects are done.
    lone_pending: Vec<GroupId>,
    /// Standard-normal quantile of admission's allowed SLO risk.
    slo_z: f64,
    /// Grant events tell their wait and the planned switch in `meta` (for tracing; off, a
    /// grant builds no metadata).
    grant_detail: bool,
    /// Submissions waiting for room in fixed pools, first to start first.
    queue: Vec<Queued>,
    /// Each job's place by arrival (its first submission): a job re-queued after a node loss
    /// or a preemption keeps it.
    arrivals: BTreeMap<String, u64>,
    next_arrival: u64,
    /// Tenants' quotas with fixed pools (`None`: first come, first served).
    share: Option<weave_place::share::SharePolicy>,
    /// Time of the last applied record (the server's clock continues from it).
    last_time_us: Option<u64>,
    /// Times of the first record and of the last periodic consolidation pass.
    first_time_us: Option<u64>,
    last_pass_us: Option<u64>,
    /// Sequence number of the first event still held (older ones were let go).
    events_base: u64,
    /// Ended admissions, oldest first: let go (with their events' visibility) beyond
    /// `retention.jobs`.
    ended: VecDeque<(String, JobId)>,
    retention: Retention,
    /// Admissions ended by preemption, per tenant (a counter: events are let go).
    preemptions: BTreeMap<String, u64>,
    /// Tenants' recent use, for fair share with decay (advanced at every record).
    usage_history: weave_place::share::UsageHistory,
    pub stats: PlaneStats,
}

/// How much history the plane holds: the newest events, and ended jobs (their entries; a job
/// name let go may be taken again). Bounded, so memory and snapshots follow the live state,
/// not the age of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub events: usize,
    pub jobs: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { events: 200_000, jobs: 10_000 }
    }
}

/// Counters for `/metrics`, derived from records (so a restart rebuilds them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaneStats {
    /// Per phase (rollout, training): grants, and the summed wait from the job becoming ready
    /// for the phase to its grant (what sharing the group costs it).
    pub grants: [u64; 2],
    pub wait_us: [u64; 2],
    /// Completed iterations, and those whose wall-clock period stayed within the job's SLO
    /// times its own measured phases.
    pub iterations: u64,
    pub iterations_within_slo: u64,
}

impl Plane {
    pub fn new(cluster: ClusterConfig, placer: PlacerConfig) -> Plane {
        Plane {
            cluster,
            profile: ProfileModel::builtin(),
            placer: Placer::new(placer),
            dispatchers: BTreeMap::new(),
            jobs: BTreeMap::new(),
            names: Vec::new(),
            events: Vec::new(),
            version: 0,
            churn: None,
            lone_pending: Vec::new(),
            slo_z: Variation::z_for(weave_place::DEFAULT_SLO_EPSILON),
            stats: PlaneStats::default(),
            grant_detail: false,
            queue: Vec::new(),
            last_time_us: None,
            first_time_us: None,
            last_pass_us: None,
            events_base: 0,
            ended: VecDeque::new(),
            retention: Retention::default(),
            preemptions: BTreeMap::new(),
            usage_history: Default::default(),
            arrivals: BTreeMap::new(),
            next_arrival: 0,
            share: None,
        }
    }

    /// Grant events carry their wait and planned switch from now on (tracing is on).
    pub fn set_grant_detail(&mut self, on: bool) {
        self.grant_detail = on;
    }

    /// Holds at most this much history (see [`Retention`]).
    pub fn with_retention(mut self, retention: Retention) -> Plane {
        self.retention = Retention { events: retention.events.max(1), jobs: retention.jobs };
        self
    }

    /// Turns on co-located mode and consolidation: jobs that run alone are paired into groups
    /// on arrivals and departures, by the same code the simulator runs. A move re-admits the
    /// job from its last completed iteration (a new admission: the old driver's token stops
    /// working), so drivers must follow re-admissions, as the Ray backend's launches do.
    pub fn with_consolidation(mut self, limits: ChurnLimits) -> Plane {
        let mut cfg = self.placer.config().clone();
        cfg.colocate = true;
        self.placer = Placer::new(cfg);
        self.churn = Some(Churn::new(limits));
        self
    }

    /// Tenants' quotas: the queue goes by priority, then the least-served tenant, then arrival,
    /// and a tenant starts jobs within its quota or by borrowing others' unused quota.
    pub fn with_share(mut self, policy: weave_place::share::SharePolicy) -> Plane {
        self.share = Some(policy);
        self
    }

    /// Admission's allowed risk that a job's life slowdown exceeds its SLO.
    pub fn with_slo_risk(mut self, epsilon: f64) -> Plane {
        self.slo_z = Variation::z_for(epsilon);
        self
    }

    /// Time of the last record applied, if any.
    pub fn last_time_us(&self) -> Option<u64> {
        self.last_time_us
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.cluster
    }

    pub fn placer(&self) -> &Placer {
        &self.placer
    }

    pub fn job(&self, name: &str) -> Option<&JobEntry> {
        self.jobs.get(name)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &JobEntry> {
        self.jobs.values()
    }

    /// The events still held, oldest first (see [`Retention`]).
    pub fn events(&self) -> &[PlaneEvent] {
        &self.events
    }

    /// The sequence number the next event will get.
    pub fn next_event_seq(&self) -> u64 {
        self.events_base + self.events.len() as u64
    }

    /// The events held with a sequence number of `seq` or more.
    pub fn events_from(&self, seq: u64) -> &[PlaneEvent] {
        let k = seq.saturating_sub(self.events_base).min(self.events.len() as u64) as usize;
        &self.events[k..]
    }

    /// Admissions of `tenant`'s jobs ended by preemption.
    pub fn preemptions(&self, tenant: &str) -> u64 {
        self.preemptions.get(tenant).copied().unwrap_or(0)
    }

    pub fn dispatcher(&self, g: GroupId) -> Option<&Dispatcher> {
        self.dispatchers.get(&g)
    }

    pub fn job_name(&self, id: JobId) -> Option<&str> {
        self.names.get(id.0 as usize).map(String::as_str)
    }

    /// The job as placement sees it: the model's estimate, with what the submission says it
    /// measured of itself in place of the model's switch costs and sync.
    fn place_job(&self, spec: &JobSpec, slo: f64, submit: &SubmitSpec) -> PlaceJob {
        let mut place = PlaceJob::from_spec(spec, slo, &self.profile, &self.cluster);
        // check_limits refused negative and non-finite figures before they were recorded.
        let us = |s: Option<f64>| s.filter(|s| s.is_finite() && *s >= 0.0).map(Micros::from_secs_f64);
        place.costs = place.costs.with_measured(us(submit.switch_warm_s), us(submit.switch_cold_s));
        place.sync = us(submit.sync_s).unwrap_or(place.sync);
        place
    }

    /// Checks a record without changing anything: only records that pass are made durable.
    pub fn check(&self, rec: &Record) -> Result<(), PlaneError> {
        match rec {
            Record::Submit { time_us, job, .. } => {
                if self.jobs.get(&job.id).is_some_and(|j| j.state == JobState::Running)
                    || self.queued(&job.id).is_some()
                {
                    return Err(PlaneError::Duplicate(job.id.clone()));
                }
                let id = JobId(self.names.len() as u32);
                let spec = job.to_spec(id, Micros(*time_us))?;
                let slo = spec.slo.map(|s| s.get()).unwrap_or(DEFAULT_SLO);
                match self.placer.preview(&self.place_job(&spec, slo, job)) {
                    Ok(_) => Ok(()),
                    // Fixed pools full now: it waits, unless it can never fit.
                    Err(PlaceError::NoCapacity(_) | PlaceError::Infeasible { .. }) => self.may_queue(job, *time_us),
                    Err(e) => Err(PlaneError::Placement(e.to_string())),
                }
            }
            Record::Cancel { job, .. } if self.queued(job).is_some() => Ok(()),
            Record::Cancel { job, .. } | Record::Fail { job, .. } => self.running(job).map(|_| ()),
            Record::NodeDown { node, .. } => {
                self.in_inventory(*node)?;
                if self.placer.is_down(*node) {
                    return Err(PlaneError::Invalid {
                        field: "node".into(),
                        reason: format!("{node} is already down"),
                    });
                }
                Ok(())
            }
            Record::Inventory { .. } => {
                if self.placer.config().capacity.is_none() {
                    return Err(PlaneError::Invalid {
                        field: "inventory".into(),
                        reason: "the pools are elastic (rented on demand)".into(),
                    });
                }
                Ok(())
            }
            Record::Consolidate { .. } if self.churn.is_none() => Err(PlaneError::Invalid {
                field: "consolidate".into(),
                reason: "consolidation is off (the server runs with --disagg-only)".into(),
            }),
            Record::Consolidate { .. } => Ok(()),
            Record::NodeUp { node, .. } => {
                self.in_inventory(*node)?;
                if !self.placer.is_down(*node) {
                    return Err(PlaneError::Invalid { field: "node".into(), reason: format!("{node} is not down") });
                }
                Ok(())
            }
            Record::Finish { job, phase, iteration, admission, .. } => {
                let j = self.running(job)?;
                if let Some(a) = admission.filter(|a| *a != j.id.0) {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: format!(
                            "the phase was granted to admission {a}, which has ended; the job runs as admission {} \
                             from rollout of iteration {}",
                            j.id.0, j.completed_iterations
                        ),
                    });
                }
                if !j.gate.is_granted(*phase, *iteration) {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: j.gate.order_reason(*phase, *iteration, "finish"),
                    });
                }
                Ok(())
            }
        }
    }

    /// Node failures only mean something for fixed pools, whose node names are machines.
    fn in_inventory(&self, node: NodeId) -> Result<(), PlaneError> {
        let cap = self.placer.config().capacity.ok_or_else(|| PlaneError::Invalid {
            field: "node".into(),
            reason: "node failures need fixed-capacity pools (the elastic mode rents fresh nodes)".into(),
        })?;
        let size = if node.pool == weave_core::Pool::Rollout { cap.0 } else { cap.1 };
        if node.index >= size {
            return Err(PlaneError::Invalid {
                field: "node".into(),
                reason: format!("{node} is not in the inventory ({size} {} nodes)", node.pool),
            });
        }
        Ok(())
    }

    fn running(&self, name: &str) -> Result<&JobEntry, PlaneError> {
        match self.jobs.get(name) {
            Some(j) if j.state == JobState::Running => Ok(j),
            Some(j) => Err(PlaneError::Conflict {
                job: name.into(),
                reason: format!("the job is {:?}", j.state).to_lowercase(),
            }),
            None => Err(PlaneError::NotFound(name.into())),
        }
    }

    /// Applies a checked record.
    pub fn apply(&mut self, rec: &Record) -> Result<(), PlaneError> {
        self.check(rec)?;
        self.apply_checked(rec)
    }

    /// Applies a record [`Plane::check`] has just accepted (the server checks before it makes
    /// the record durable; checking again would recompute the placement).
    pub fn apply_checked(&mut self, rec: &Record) -> Result<(), PlaneError> {
        self.version += 1;
        self.last_time_us = Some(self.last_time_us.unwrap_or(0).max(rec.time_us()));
        self.first_time_us.get_or_insert(rec.time_us());
        self.advance_usage_history(rec.time_us());
        let applied = self.apply_record(rec);
        self.consolidate_pending(rec.time_us());
        // Whatever the record freed goes to the jobs waiting for it.
        self.admit_queued(rec.time_us());
        self.record_usage();
        applied
    }

    fn apply_record(&mut self, rec: &Record) -> Result<(), PlaneError> {
        match rec {
            Record::Submit { time_us, tenant, job } => {
                self.arrivals.insert(job.id.clone(), self.next_arrival);
                self.next_arrival += 1;
                self.admit_or_queue(*time_us, tenant, job, None, false)
            }
            Record::Cancel { time_us, job } => {
                if !self.dequeue(*time_us, job) {
                    self.end(*time_us, job, JobState::Cancelled, None);
                }
                Ok(())
            }
            Record::Fail { time_us, job, reason } => {
                self.end(*time_us, job, JobState::Failed, Some(reason.clone()));
                Ok(())
            }
            Record::Finish { time_us, job, phase, iteration, duration_us, meta, .. } => {
                self.finish(*time_us, job, *phase, *iteration, Micros(*duration_us), meta.clone());
                Ok(())
            }
            Record::NodeDown { time_us, node, reason } => {
                self.node_down(*time_us, *node, reason);
                Ok(())
            }
            Record::Inventory { time_us, rollout, training } => {
                self.placer.grow_capacity((*rollout, *training));
                let meta = serde_json::json!({ "rollout": rollout, "training": training });
                self.event(PlaneEvent { meta: Some(meta), ..ev(*time_us, "", "inventory", None, None, None) });
                Ok(())
            }
            Record::Consolidate { time_us } => {
                self.consolidation_pass(*time_us);
                Ok(())
            }
            Record::NodeUp { time_us, node } => {
                self.placer.set_node_down(*node, false);
                let meta = serde_json::json!({ "node": node.to_string() });
                self.event(PlaneEvent { meta: Some(meta), ..ev(*time_us, "", "node-up", None, None, None) });
                Ok(())
            }
        }
    }

    /// Takes `node` out of service; its jobs fail and are re-admitted from their last
    /// completed iteration (their checkpoint) wherever the placer finds room.
    fn node_down(&mut self, time_us: u64, node: NodeId, reason: &str) {
        self.placer.set_node_down(node, true);
        let meta = serde_json::json!({ "node": node.to_string(), "reason": reason });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, "", "node-down", None, None, None) });
        // Every affected job leaves first, so none is re-admitted into what is left of a
        // group that still holds the lost node.
        let mut leaving = Vec::new();
        for id in self.placer.jobs_on(node) {
            let name = self.names[id.0 as usize].clone();
            let j = &self.jobs[&name];
            let (resubmit, carried) = j.resubmission();
            leaving.push((name.clone(), j.tenant.clone(), resubmit, carried));
            self.end(time_us, &name, JobState::Failed, Some(format!("node {node} lost: {reason}")));
        }
        for (name, tenant, resubmit, carried) in leaving {
            let outcome = match self.admit_or_queue(time_us, &tenant, &resubmit, carried, true) {
                Ok(()) if self.queued(&name).is_some() => {
                    ("requeued", serde_json::json!({ "resume_from": resubmit.resume_from.unwrap_or(0) }))
                }
                Ok(()) => ("readmitted", serde_json::json!({ "resume_from": resubmit.resume_from.unwrap_or(0) })),
                Err(e) => ("readmit-failed", serde_json::json!({ "reason": e.to_string() })),
            };
            let group = self.group_of(&name).filter(|_| outcome.0 == "readmitted");
            self.event(PlaneEvent { meta: Some(outcome.1), ..ev(time_us, &name, outcome.0, None, None, group) });
        }
    }

    fn event(&mut self, mut e: PlaneEvent) {
        e.seq = self.next_event_seq();
        self.events.push(e);
        // Let go of the oldest quarter at once (amortised), keeping at least the retention.
        let keep = self.retention.events;
        if self.events.len() >= keep + keep.div_ceil(4) {
            let drop = self.events.len() - keep;
            self.events.drain(..drop);
            self.events_base += drop as u64;
        }
    }

    /// Remembers that this admission of `name` ended; lets go of the oldest ended ones beyond
    /// the retention (unless the name came back: running, queued, or preempted to wait).
    fn ended(&mut self, name: &str) {
        let Some(j) = self.jobs.get(name) else { return };
        self.ended.push_back((name.to_string(), j.id));
        while self.ended.len() > self.retention.jobs {
            let Some((old, id)) = self.ended.pop_front() else { break };
            let current = self.jobs.get(&old).is_some_and(|j| j.id == id);
            let gone = current
                && self.jobs[&old].state != JobState::Running
                && self.jobs[&old].state != JobState::Preempted
                && self.queued(&old).is_none();
            if gone {
                self.jobs.remove(&old);
                self.arrivals.remove(&old);
            }
            // The admission's number no longer names anything placed: drop its name's bytes.
            if gone || !current {
                if let Some(n) = self.names.get_mut(id.0 as usize) {
                    *n = String::new();
                }
            }
        }
    }

    /// Admits a submission; `carried` is a re-admitted job's measured estimate and the
    /// measurements behind it.
    fn submit(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        carried: Option<(PhaseTimes, Measured)>,
        target: Option<Target>,
    ) -> Result<(), PlaneError> {
        let id = JobId(self.names.len() as u32);
        let spec = submit.to_spec(id, Micros(time_us))?;
        let slo = spec.slo.map(|s| s.get()).unwrap_or(DEFAULT_SLO);
        let mut place = self.place_job(&spec, slo, submit);
        let start = submit.resume_from.unwrap_or(0);
        let remaining = submit.iterations.map(|n| n.saturating_sub(start));
        let fresh = carried.is_none();
        let measured = match carried {
            Some((times, measured)) => {
                place.set_measured(times);
                place.variation = measured_variation(&measured, times, remaining, self.slo_z);
                measured
            }
            None => Measured::default(),
        };
        let estimate = place.times;
        // A new job may open a group that a job running alone moves into.
        let pairing = match (target, fresh) {
            (None, true) => self.pairing_on_arrival(time_us, &place),
            _ => None,
        };
        let target = target.or(pairing.as_ref().map(|_| Target::Isolated));
        let decision = match target {
            Some(t) => match self.placer.admit_to(place.clone(), t) {
                Ok(d) => Ok(d),
                Err(_) => self.placer.admit(place),
            },
            None => self.placer.admit(place),
        }
        .map_err(|e: PlaceError| PlaneError::Placement(e.to_string()))?;
        let iterations = submit.iterations;
        let pool = decision.training_nodes.len().max(1) as u64;
        let mut member = member_spec(&spec, vec![decision.block], &self.cluster, true, iterations);
        if decision.kind == DecisionKind::Colocated {
            // Co-located: the job updates its weights in place.
            member.sync = Micros::ZERO;
        }
        member.start_iteration = start;
        // A co-located job's phases share its GPUs: it runs on-policy whatever it allows.
        member.staleness = if decision.kind == DecisionKind::Colocated { 0 } else { spec.staleness };
        let staleness = member.staleness;
        member.train_state =
            weave_core::Bytes(weave_model::job_training_state(&spec).0 * spec.train_nodes as u64 / pool);
        let group = decision.group;
        self.names.push(submit.id.clone());
        self.jobs.insert(
            submit.id.clone(),
            JobEntry {
                name: submit.id.clone(),
                tenant: tenant.into(),
                id,
                spec,
                slo,
                iterations,
                state: JobState::Running,
                decision: Some(decision),
                gate: Gate::new(staleness, start),
                legacy_granted: None,
                legacy_next: None,
                completed_iterations: start,
                failure: None,
                submitted_us: time_us,
                estimate,
                submit: submit.clone(),
                measured,
                ready_us: time_us,
                iteration_started_us: time_us,
            },
        );
        self.event(ev(time_us, &submit.id, "admitted", None, None, Some(group)));
        let limits = GroupLimits {
            rollout_dram: self.cluster.rollout.host_dram(),
            train_dram: self.cluster.training.host_dram(),
        };
        self.dispatchers.entry(group).or_insert_with(|| {
            let mut d = Dispatcher::new(limits);
            d.set_logging(false);
            d
        });
        self.drive(time_us, group, Input::Join(member));
        if let Some((pair, movable)) = pairing {
            self.partner_joins(time_us, group, pair, &movable);
        }
        Ok(())
    }

    fn finish(
        &mut self,
        time_us: u64,
        name: &str,
        phase: Phase,
        iteration: u64,
        duration: Micros,
        meta: Option<serde_json::Value>,
    ) {
        let j = self.jobs.get_mut(name).expect("checked");
        j.gate.finish(phase, iteration);
        let kept = if phase == Phase::Rollout { &mut j.measured.0 } else { &mut j.measured.1 };
        kept.push_back(duration);
        if kept.len() > MEASURED_KEPT {
            kept.pop_front();
        }
        j.ready_us = time_us;
        if phase == Phase::Train {
            j.completed_iterations = iteration + 1;
            // Its own iteration: what the job would take alone (pipelined with its staleness),
            // against the time since its last training ended.
            // Its first iteration has nothing to overlap with.
            let roll = j.measured.0.back().copied().unwrap_or(Micros::ZERO);
            let first = iteration == j.submit.resume_from.unwrap_or(0);
            let own = weave_dispatch::timing::solo_period(roll, duration, if first { 0 } else { j.gate.staleness });
            let wall = time_us.saturating_sub(j.iteration_started_us);
            self.stats.iterations += 1;
            if wall as f64 <= j.slo * own.0 as f64 {
                self.stats.iterations_within_slo += 1;
            }
            j.iteration_started_us = time_us;
        }
        // Robust re-estimation: the median of recent measurements, once there are some.
        let median = |v: &VecDeque<Micros>| {
            let mut s: Vec<Micros> = v.iter().copied().collect();
            s.sort_unstable();
            s.get(s.len() / 2).copied()
        };
        if let (Some(r), Some(t)) = (median(&j.measured.0), median(&j.measured.1)) {
            j.estimate = PhaseTimes { rollout: r, train: t };
            let (id, est) = (j.id, j.estimate);
            let remaining = j.iterations.map(|n| n.saturating_sub(j.completed_iterations));
            let variation = measured_variation(&j.measured, est, remaining, self.slo_z);
            self.placer.update_measured(id, est);
            self.placer.update_variation(id, variation);
        }
        let (id, group) = (self.jobs[name].id, self.group_of(name));
        self.event(PlaneEvent { meta, ..ev(time_us, name, "finish", Some(phase), Some(iteration), group) });
        if let Some(g) = group {
            self.drive(time_us, g, Input::PhaseFinished { job: id, phase, iteration });
        }
    }

    fn group_of(&self, name: &str) -> Option<GroupId> {
        self.jobs.get(name).and_then(|j| j.decision.as_ref()).map(|d| d.group)
    }

    fn end(&mut self, time_us: u64, name: &str, state: JobState, failure: Option<String>) {
        let group = self.group_of(name);
        let j = self.jobs.get_mut(name).expect("checked");
        j.state = state;
        j.gate.withdraw();
        j.failure = failure;
        let id = j.id;
        let kind = format!("{state:?}").to_lowercase();
        let meta = j.failure.as_ref().map(|r| serde_json::json!({ "reason": r }));
        if state == JobState::Preempted {
            *self.preemptions.entry(j.tenant.clone()).or_default() += 1;
        }
        self.event(PlaneEvent { meta, ..ev(time_us, name, &kind, None, None, group) });
        if let Some(g) = group {
            self.drive(time_us, g, Input::Leave { job: id });
            self.depart(g, id);
            self.follow_order(time_us, g);
        }
        if state != JobState::Preempted {
            self.ended(name);
        }
    }

    fn depart(&mut self, g: GroupId, id: JobId) {
        if let Ok(d) = self.placer.depart(id) {
            if d.dissolved {
                self.dispatchers.remove(&g);
            } else if self.churn.is_some() && self.placer.group(g).is_some_and(|grp| grp.runs_alone()) {
                self.lone_pending.push(g);
            }
        }
    }

    /// Feeds an input and everything it causes to a group's dispatcher.
    fn drive(&mut self, time_us: u64, g: GroupId, first: Input) {
        let now = Micros(time_us);
        let mut queue = VecDeque::from([first]);
        // A switch the dispatcher planned before a grant: the grant's event says which.
        let mut switches: BTreeMap<JobId, (SwitchKind, Micros)> = BTreeMap::new();
        while let Some(input) = queue.pop_front() {
            let Some(d) = self.dispatchers.get_mut(&g) else { return };
            let actions = match d.handle(now, input) {
                Ok(a) => a,
                // Only checked inputs reach here; a refusal means the job already left.
                Err(_) => continue,
            };
            for a in actions {
                match a {
                    Action::BeginSwitch { job, phase, iteration, kind, duration, .. } => {
                        if self.grant_detail {
                            switches.insert(job, (kind, duration));
                        }
                        queue.push_back(Input::SwitchFinished { job, phase, iteration })
                    }
                    Action::BeginSync { job, iteration, .. } => queue.push_back(Input::SyncFinished { job, iteration }),
                    Action::StartRollout { job, iteration, weights, .. } => {
                        self.grant(time_us, job, (Phase::Rollout, iteration, weights), g, switches.remove(&job))
                    }
                    Action::StartTraining { job, iteration } => {
                        self.grant(time_us, job, (Phase::Train, iteration, 0), g, switches.remove(&job))
                    }
                    Action::Completed { job, .. } => {
                        let name = self.names[job.0 as usize].clone();
                        if let Some(j) = self.jobs.get_mut(&name) {
                            j.state = JobState::Completed;
                        }
                        self.event(ev(time_us, &name, "completed", None, None, Some(g)));
                        self.depart(g, job);
                        self.ended(&name);
                    }
                }
            }
        }
        self.follow_order(time_us, g);
    }

    /// The group's dispatcher follows the cyclic order of the placer's current prediction
    /// (what admission predicted is what runs): after a join, a departure or re-estimation.
    fn follow_order(&mut self, time_us: u64, g: GroupId) {
        let (Some(group), Some(d)) = (self.placer.group(g), self.dispatchers.get(&g)) else { return };
        if let Some(reorder) = group.reorder(d) {
            self.drive(time_us, g, reorder);
        }
    }

    /// Grants `phase` of `iteration` (a rollout sampling weights version `weights`); `switch`
    /// is the state load the dispatcher planned before it (the job does it at the start of its
    /// phase), told in the event's `meta` with the wait when grant detail is on. A stale
    /// job's rollout grant tells its weights version in `meta` always (its driver needs it).
    fn grant(
        &mut self,
        time_us: u64,
        job: JobId,
        (phase, iteration, weights): (Phase, u64, u64),
        g: GroupId,
        switch: Option<(SwitchKind, Micros)>,
    ) {
        let name = self.names[job.0 as usize].clone();
        let mut wait = 0;
        let mut stale = false;
        if let Some(j) = self.jobs.get_mut(&name) {
            j.gate.grant(phase, iteration, weights);
            stale = j.gate.staleness > 0;
            let k = (phase == Phase::Train) as usize;
            wait = time_us.saturating_sub(j.ready_us);
            self.stats.grants[k] += 1;
            self.stats.wait_us[k] += wait;
        }
        let mut meta = self.grant_detail.then(|| {
            let mut meta = serde_json::json!({ "wait_s": wait as f64 / 1e6 });
            if let Some((kind, d)) = switch {
                meta["switch"] = serde_json::json!(if kind == SwitchKind::Warm { "warm" } else { "cold" });
                meta["switch_planned_s"] = serde_json::json!(d.as_secs_f64());
            }
            meta
        });
        if stale && phase == Phase::Rollout {
            meta.get_or_insert_with(|| serde_json::json!({}))["weights"] = serde_json::json!(weights);
        }
        self.event(PlaneEvent { meta, ..ev(time_us, &name, "grant", Some(phase), Some(iteration), Some(g)) });
    }

    /// Whether `name` may start `phase` of `iteration` now: `Ok(true)` granted, `Ok(false)`
    /// not yet (it is the lane's next phase within the job's staleness bound; wait), `Err`
    /// the request breaks the barrier or the bound.
    pub fn may_start(&self, name: &str, phase: Phase, iteration: u64) -> Result<bool, PlaneError> {
        if let Some(waiting) = self.queued_may_start(name, phase, iteration) {
            return waiting;
        }
        let j = self.running(name)?;
        j.gate.may_ask(phase, iteration).map_err(|r| PlaneError::Conflict { job: name.into(), reason: r.0 })?;
        Ok(j.gate.is_granted(phase, iteration))
    }
}

/// What a job's own measurements say about its variation: each measured iteration as factors
/// of the median estimate (rollouts and trainings paired by age); empty until three of each.
fn measured_variation(measured: &Measured, est: PhaseTimes, remaining: Option<u64>, z: f64) -> Variation {
    let n = measured.0.len().min(measured.1.len());
    let samples: Vec<(f64, f64)> = if n < 3 {
        Vec::new()
    } else {
        let f = |m: Micros, e: Micros| m.0 as f64 / e.0.max(1) as f64;
        measured
            .0
            .iter()
            .rev()
            .zip(measured.1.iter().rev())
            .map(|(r, t)| (f(*r, est.rollout), f(*t, est.train)))
            .collect()
    };
    Variation { samples: samples.into(), iterations: remaining.unwrap_or(100).max(1), z }
}

fn ev(
    time_us: u64,
    job: &str,
    kind: &str,
    phase: Option<Phase>,
    iteration: Option<u64>,
    group: Option<GroupId>,
) -> PlaneEvent {
    PlaneEvent {
        seq: 0,
        time_us,
        job: job.into(),
        kind: kind.into(),
        phase,
        iteration,
        group: group.map(|g| g.0),
        meta: None,
    }
}
