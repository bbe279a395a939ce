//! What a trace holds, at a glance.

use crate::Trace;
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{JobType, Lifetime, Micros};
use weave_model::{Deployment, ProfileModel};

#[derive(Clone, Debug, Serialize)]
pub struct TypeCount {
    pub job_type: String,
    pub jobs: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub source: String,
    pub jobs: usize,
    /// Job types, most frequent first (ties by type).
    pub types: Vec<TypeCount>,
    /// Mean solo lifetime, hours: departure - arrival where the trace gives it, otherwise
    /// iterations x the estimated solo iteration time.
    pub mean_lifetime_h: f64,
    pub max_lifetime_h: f64,
    /// First arrival to last arrival, hours.
    pub arrival_span_h: f64,
    pub jobs_with_slo: usize,
    pub jobs_with_explicit_durations: usize,
    pub start: Option<String>,
}

impl Summary {
    pub fn of(trace: &Trace, profile: &ProfileModel) -> Summary {
        let mut types: BTreeMap<JobType, usize> = BTreeMap::new();
        let mut lifetimes = Vec::with_capacity(trace.jobs.len());
        for job in &trace.jobs {
            *types.entry(job.job_type).or_default() += 1;
            let life = match job.lifetime {
                Lifetime::SoloUntil(end) => end.saturating_sub(job.arrival),
                Lifetime::Iterations(n) => {
                    let solo = profile.estimate(Deployment::Disagg, job).times.solo();
                    Micros(solo.0.saturating_mul(n))
                }
            };
            lifetimes.push(life.as_hours_f64());
        }
        let mut types: Vec<TypeCount> =
            types.into_iter().map(|(t, n)| TypeCount { job_type: t.to_string(), jobs: n }).collect();
        types.sort_by_key(|t| std::cmp::Reverse(t.jobs));
        let n = trace.jobs.len();
        let span = match (trace.jobs.first(), trace.jobs.last()) {
            (Some(a), Some(b)) => b.arrival.saturating_sub(a.arrival).as_hours_f64(),
            _ => 0.0,
        };
        Summary {
            source: trace.source.clone(),
            jobs: n,
            types,
            mean_lifetime_h: if n == 0 { 0.0 } else { lifetimes.iter().sum::<f64>() / n as f64 },
            max_lifetime_h: lifetimes.iter().copied().fold(0.0, f64::max),
            arrival_span_h: span,
            jobs_with_slo: trace.jobs.iter().filter(|j| j.slo.is_some()).count(),
            jobs_with_explicit_durations: trace.jobs.iter().filter(|j| j.phase_times.is_some()).count(),
            start: trace.epoch_start_s.map(crate::datetime::format),
        }
    }
}
