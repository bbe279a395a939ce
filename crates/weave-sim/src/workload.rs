//! A trace prepared for replay: each job's SLO, iteration count and estimates, fixed once so
//! every policy replays exactly the same jobs.

use rand::Rng;
use serde::Serialize;
use weave_core::{ClusterConfig, JobSpec, Micros, PhaseTimes, Pool};
use weave_dispatch::from_model::job_sync;
use weave_model::{iterations, named_stream, switch_time, Deployment, ProfileModel, RuntimeModel, Stream, SwitchKind};
use weave_place::PlaceJob;
use weave_trace::Trace;

/// Where each job's allowed slowdown comes from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SloSetting {
    /// The trace's value; jobs without one draw uniformly from [lo, hi].
    FromTrace { lo: f64, hi: f64 },
    /// The same value for every job, overriding the trace.
    Fixed { value: f64 },
    /// Uniform in [lo, hi] for every job, overriding the trace.
    Uniform { lo: f64, hi: f64 },
}

impl Default for SloSetting {
    /// [paper]: the replay draws each job's allowed slowdown uniformly from [1, 2].
    fn default() -> Self {
        SloSetting::FromTrace { lo: 1.0, hi: 2.0 }
    }
}

#[derive(Clone, Debug)]
pub struct SimJob {
    pub spec: JobSpec,
    pub slo: f64,
    pub iterations: u64,
    /// Conservative per-iteration estimates (admission uses these).
    pub disagg: PhaseTimes,
    pub colo: PhaseTimes,
    pub sync: Micros,
    /// Loading the job's state from storage on both pools at its first start.
    pub cold_start: Micros,
    pub place: PlaceJob,
    /// How the job's durations drift over its life (see `dynamics::assign_drift`).
    pub drift: weave_model::Drift,
}

impl SimJob {
    /// Iteration `k` of a solo disaggregated run with durations `d`: the first pays the cold
    /// loads, every one but the last ends with a weight sync.
    pub fn solo_iteration(&self, d: PhaseTimes, k: u64) -> Micros {
        let sync = if k + 1 < self.iterations { self.sync } else { Micros::ZERO };
        let cold = if k == 0 { self.cold_start } else { Micros::ZERO };
        d.solo() + sync + cold
    }

    /// The job's own random stream of runtime durations: every policy draws the same
    /// sequence for the same job.
    pub fn runtime_stream(&self, seed: u64) -> Stream {
        named_stream(seed, "runtime", self.spec.id.0 as u64)
    }
}

/// Draws one iteration: disaggregated and co-located durations share the same factors.
pub fn draw_iteration(
    job: &SimJob,
    runtime: &RuntimeModel,
    iteration: u64,
    rng: &mut Stream,
) -> (PhaseTimes, PhaseTimes) {
    let progress = iteration as f64 / job.iterations.max(1) as f64;
    let disagg = runtime.sample(job.disagg, progress, job.drift, rng);
    let ratio = |a: Micros, b: Micros, c: Micros| Micros((c.0 as u128 * a.0 as u128 / b.0.max(1) as u128) as u64);
    let colo = PhaseTimes {
        rollout: ratio(disagg.rollout, job.disagg.rollout, job.colo.rollout),
        train: ratio(disagg.train, job.disagg.train, job.colo.train),
    };
    (disagg, colo)
}

pub fn prepare(
    trace: &Trace,
    cluster: &ClusterConfig,
    profile: &ProfileModel,
    slo: SloSetting,
    seed: u64,
) -> Vec<SimJob> {
    trace
        .jobs
        .iter()
        .map(|spec| {
            let mut slo_rng = named_stream(seed, "slo", spec.id.0 as u64);
            let slo = match (slo, spec.slo) {
                (SloSetting::Fixed { value }, _) => value,
                (SloSetting::FromTrace { .. }, Some(s)) => s.get(),
                (SloSetting::FromTrace { lo, hi } | SloSetting::Uniform { lo, hi }, _) => draw(&mut slo_rng, lo, hi),
            };
            let disagg = profile.estimate(Deployment::Disagg, spec).times;
            let colo = profile.estimate(Deployment::Colo, spec).times;
            let sync = job_sync(spec, cluster);
            let model = spec.job_type.model;
            let cold_start = switch_time(model, Pool::Rollout, SwitchKind::Cold)
                + switch_time(model, Pool::Training, SwitchKind::Cold);
            SimJob {
                iterations: iterations(spec, disagg.solo() + sync),
                place: PlaceJob::from_spec(spec, slo, profile, cluster),
                spec: spec.clone(),
                slo,
                disagg,
                colo,
                sync,
                cold_start,
                drift: weave_model::Drift::None,
            }
        })
        .collect()
}

fn draw(rng: &mut Stream, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        rng.random_range(lo..=hi)
    } else {
        lo
    }
}
