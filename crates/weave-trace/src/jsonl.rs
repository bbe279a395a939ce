//! Weave's own trace format: JSON Lines, one job per line. Blank lines and lines starting
//! with `#` are skipped. Fields (see the README for the full table):
//!
//! `id` (string, unique), `arrival_s` (seconds from trace start), either `type` ("7B_8k") or
//! `model` ("7B") + `max_tokens` (8192 or "8k"), optional `batch`, `algorithm`,
//! `rollout_nodes`, `train_nodes`, `slo`, exactly one of `iterations` / `departure_s`, and
//! optionally both of `rollout_s` / `train_s` (measured per-iteration durations).

use crate::fields::{JobFields, NoUnknownFields};
use crate::{err, Trace, TraceError};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use weave_core::{
    parse_tokens, Algorithm, JobId, JobSpec, JobType, Lifetime, Micros, ModelSize, PhaseTimes, Priority, Slo,
};
use weave_model::REFERENCE_BATCH;

/// One line of the JSON Lines format, as written and read: the job's fields ([`JobFields`])
/// with the trace's own (arrival, departure, tenant).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JsonlJob {
    pub id: String,
    pub arrival_s: f64,
    #[serde(flatten)]
    pub job: JobFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub departure_s: Option<f64>,
    /// The team the job belongs to (absent: the default tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(flatten, skip_serializing)]
    pub strict: NoUnknownFields,
}

type FieldResult<T> = Result<T, (&'static str, String)>;

impl JsonlJob {
    /// Validates and converts to a [`JobSpec`] (id 0; the trace renumbers).
    pub fn to_spec(&self) -> FieldResult<JobSpec> {
        let job_type = self.job_type()?;
        let arrival = seconds("arrival_s", self.arrival_s)?;
        let lifetime = match (self.job.iterations, self.departure_s) {
            (Some(n), None) => Lifetime::Iterations(n),
            (None, Some(d)) => Lifetime::SoloUntil(seconds("departure_s", d)?),
            _ => return Err(("iterations", "give exactly one of `iterations` and `departure_s`".into())),
        };
        let slo = self.job.slo.map(Slo::new).transpose().map_err(|e| ("slo", e.to_string()))?;
        let algorithm = match &self.job.algorithm {
            Some(a) => a.parse::<Algorithm>().map_err(|e| ("algorithm", e.to_string()))?,
            None => Algorithm::default(),
        };
        let phase_times = match (self.job.rollout_s, self.job.train_s) {
            (None, None) => None,
            (Some(r), Some(t)) => Some(PhaseTimes { rollout: seconds("rollout_s", r)?, train: seconds("train_s", t)? }),
            _ => return Err(("rollout_s", "give both `rollout_s` and `train_s`, or neither".into())),
        };
        let priority = match &self.job.priority {
            Some(p) => p.parse::<Priority>().map_err(|e| ("priority", e))?,
            None => Priority::default(),
        };
        if let Some(t) = &self.tenant {
            let ok =
                !t.is_empty() && t.len() <= 64 && t.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok {
                return Err(("tenant", format!("`{t}`: 1-64 letters, digits, `-`, `_` or `.`")));
            }
        }
        let staleness = match &self.job.staleness {
            None => 0,
            Some(v) => {
                v.as_u64().and_then(|k| u32::try_from(k).ok()).filter(|k| *k <= weave_core::MAX_STALENESS).ok_or((
                    "staleness",
                    format!("expected a whole number from 0 to {}, got {v}", weave_core::MAX_STALENESS),
                ))?
            }
        };
        let width = JobSpec::default_width(job_type.model);
        let spec = JobSpec {
            id: JobId(0),
            name: self.id.clone(),
            arrival,
            job_type,
            batch: self.job.batch.unwrap_or(REFERENCE_BATCH),
            algorithm,
            rollout_nodes: self.job.rollout_nodes.unwrap_or(width),
            train_nodes: self.job.train_nodes.unwrap_or(width),
            slo,
            lifetime,
            phase_times,
            tenant: self.tenant.clone(),
            priority,
            staleness,
            agentic: self.job.agentic.clone(),
            lora: self.job.lora.clone(),
        };
        spec.validate().map_err(|e| match e {
            weave_core::JobSpecError::Invalid { field, reason } => (field, reason),
            other => ("id", other.to_string()),
        })?;
        Ok(spec)
    }

    fn job_type(&self) -> FieldResult<JobType> {
        match (&self.job.job_type, &self.job.model, &self.job.max_tokens) {
            (Some(t), None, None) => t.parse().map_err(|e: weave_core::JobSpecError| ("type", e.to_string())),
            (None, Some(m), Some(l)) => {
                let model: ModelSize = m.parse().map_err(|e: weave_core::JobSpecError| ("model", e.to_string()))?;
                let tokens = match l {
                    serde_json::Value::Number(n) => n.as_u64().and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0),
                    serde_json::Value::String(s) => parse_tokens(s),
                    _ => None,
                };
                let max_tokens = tokens
                    .ok_or(("max_tokens", "expected a positive token count such as 8192 or \"8k\"".to_string()))?;
                Ok(JobType { model, max_tokens })
            }
            _ => Err(("type", "give either `type` (e.g. \"7B_8k\") or both `model` and `max_tokens`".into())),
        }
    }

    /// The line written for `job`.
    pub fn from_spec(job: &JobSpec) -> JsonlJob {
        let width = JobSpec::default_width(job.job_type.model);
        let (iterations, departure_s) = match job.lifetime {
            Lifetime::Iterations(n) => (Some(n), None),
            Lifetime::SoloUntil(t) => (None, Some(t.as_secs_f64())),
        };
        JsonlJob {
            id: job.name.clone(),
            arrival_s: job.arrival.as_secs_f64(),
            job: JobFields {
                job_type: Some(job.job_type.to_string()),
                batch: (job.batch != REFERENCE_BATCH).then_some(job.batch),
                algorithm: Some(job.algorithm.to_string()),
                rollout_nodes: (job.rollout_nodes != width).then_some(job.rollout_nodes),
                train_nodes: (job.train_nodes != width).then_some(job.train_nodes),
                slo: job.slo.map(Slo::get),
                iterations,
                rollout_s: job.phase_times.map(|p| p.rollout.as_secs_f64()),
                train_s: job.phase_times.map(|p| p.train.as_secs_f64()),
                priority: (job.priority != Priority::default()).then(|| job.priority.to_string()),
                staleness: (job.staleness > 0).then(|| job.staleness.into()),
                agentic: job.agentic.clone(),
                lora: job.lora.clone(),
                ..Default::default()
            },
            departure_s,
            tenant: job.tenant.clone(),
            ..Default::default()
        }
    }
}

fn seconds(field: &'static str, v: f64) -> FieldResult<Micros> {
    if v.is_finite() && (0.0..1e12).contains(&v) {
        Ok(Micros::from_secs_f64(v))
    } else {
        Err((field, format!("expected a non-negative number of seconds, got {v}")))
    }
}

pub(crate) fn parse(text: &str, source: &str) -> Result<Trace, TraceError> {
    let mut jobs = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let row: JsonlJob = serde_json::from_str(l).map_err(|e| err(source, line, None, format!("{e}")))?;
        let spec = row.to_spec().map_err(|(field, msg)| err(source, line, Some(field), msg))?;
        if !seen.insert(spec.name.clone()) {
            return Err(err(source, line, Some("id"), format!("duplicate job id `{}`", spec.name)));
        }
        jobs.push(spec);
    }
    // Arrivals out of order are accepted and sorted: a hand-written file need not be ordered.
    Ok(Trace::from_jobs(source, jobs, None))
}

/// Writes a trace in the JSON Lines format (one job per line, in arrival order).
pub fn write_jsonl(trace: &Trace) -> String {
    let mut out = String::new();
    for job in &trace.jobs {
        let line = serde_json::to_string(&JsonlJob::from_spec(job)).unwrap_or_default();
        out.push_str(&line);
        out.push('\n');
    }
    out
}
