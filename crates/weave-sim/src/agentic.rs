//! Agentic jobs in the replay (the third tier): each job's rollouts are sampled from its
//! declaration (`weave_model::agentic`) once, before any policy runs, so that every policy
//! replays the same trajectories.
//!
//! What the third tier changes, in this replay:
//! - **Sandboxes start ahead.** An environment's reset does not depend on the new weights, so
//!   a three-tier policy starts iteration n's sandboxes when training n - 1 begins; only a
//!   start longer than that training still delays the rollout (the first iteration has no
//!   training before it). A sandbox that cannot pause is paid from its start.
//! - **Admission sees the environment.** A three-tier policy's SLO check samples rollouts
//!   with their environment tails and start-up failures (on draws of its own, never the
//!   replay's); `weave-two-tier` sees the runtime model's variation only.
//! - **The environment pool is paid** per sandbox core-hour held, by every policy.
//!
//! - **The tail hands the block on.** Once a tenth of a rollout's trajectories are left (they
//!   mostly wait on their environments), a three-tier policy moves them to a tenth of the block
//!   and the next member of the group generates on the rest (long-tail migration, with the
//!   shape from [`AgenticRuns::migration`]).
//!
//! Not modelled yet: one member's generation filling another's environment waits before the
//! tail (members otherwise take turns on the rollout GPUs), the reward computed off the
//! rollout GPUs (it holds them here), and sandboxes queueing for cores one by one (with fixed
//! pools placement reserves a job's whole batch of sandboxes in the environment pool; renting
//! on demand they are paid by use).

use std::collections::BTreeMap;
use std::sync::Arc;
use weave_core::agentic::AgenticSpec;
use weave_core::{Micros, PhaseTimes};
use weave_model::agentic::{AgenticRollout, SampledRollouts, TAIL_SHARE};

/// Rollouts sampled per job for the replay's draws, and as many again for admission.
const SAMPLES: u32 = 16;

/// One agentic job's sampled rollouts and how the policy runs them.
#[derive(Clone, Debug)]
pub struct AgenticRuns {
    /// What the replay draws (iteration k takes a sample by k and the job's number).
    replay: Arc<SampledRollouts>,
    /// What admission sees: draws of its own.
    admission: Arc<SampledRollouts>,
    /// Sandboxes start during the previous training (a three-tier policy).
    pub started_early: bool,
    /// Where the job's draws start in the sample list (jobs of one declaration share it).
    offset: usize,
    /// Generation on the training GPUs over generation on the rollout GPUs (the profile's
    /// co-located over disaggregated rollout, for the job's type).
    colo_speed: f64,
}

/// Sampled rollouts by declaration, batch and head start: jobs of one class share them.
#[derive(Default)]
pub struct Cache(BTreeMap<String, (Arc<SampledRollouts>, Arc<SampledRollouts>)>);

impl AgenticRuns {
    /// Samples `spec`'s rollouts for a job of `batch` trajectories whose training takes `train`
    /// (the head start of a sandbox started with it).
    pub fn prepare(
        spec: &AgenticSpec,
        batch: u32,
        train: Micros,
        seed: u64,
        (job, colo_speed): (u32, f64),
        cache: &mut Cache,
    ) -> AgenticRuns {
        let key = format!("{spec:?}|{batch}|{}", train.0);
        let stream = fnv32(&key);
        let (replay, admission) = cache
            .0
            .entry(key)
            .or_insert_with(|| {
                let head = train.as_secs_f64();
                let draw = |name| Arc::new(SampledRollouts::draw(spec, batch, head, (seed, name, stream), SAMPLES));
                (draw("agentic-replay"), draw("agentic-admission"))
            })
            .clone();
        AgenticRuns { replay, admission, started_early: false, offset: job as usize, colo_speed }
    }

    fn mode<'a>(&self, s: &'a SampledRollouts) -> &'a [AgenticRollout] {
        if self.started_early {
            &s.started_early
        } else {
            &s.at_rollout
        }
    }

    /// Iteration `k`'s rollout: the first has no training before it to start its sandboxes in.
    pub fn rollout(&self, k: u64) -> AgenticRollout {
        let list = if k == 0 { &self.replay.at_rollout } else { self.mode(&self.replay) };
        list[(self.offset + k as usize) % list.len()]
    }

    /// The rollout admission plans with: the mean of its own draws.
    pub fn estimate(&self) -> Micros {
        SampledRollouts::mean_duration(self.mode(&self.admission))
    }

    /// The same on the training GPUs (co-located): generation at their speed, the
    /// environment's time as it is.
    pub fn colo_estimate(&self) -> Micros {
        let runs = self.mode(&self.admission);
        let (d, g) = (SampledRollouts::mean_duration(runs), SampledRollouts::mean_generating(runs));
        weave_model::agentic::colocated_rollout(d, g, self.colo_speed)
    }

    /// Admission's sampled rollouts as factors of its estimate.
    pub fn admission_factors(&self) -> Vec<f64> {
        let mean = self.estimate().0.max(1) as f64;
        self.mode(&self.admission).iter().map(|r| r.duration.0 as f64 / mean).collect()
    }

    /// Sandbox core-hours per iteration, on the replay's draws.
    pub fn core_hours(&self) -> f64 {
        SampledRollouts::mean_core_hours(self.mode(&self.replay))
    }

    /// Long-tail migration of the job's rollouts (a three-tier policy): the block passes on to
    /// the next member once a tenth of the trajectories are left (`TAIL_SHARE`; their mean
    /// point in admission's draws), and those few, mostly waiting on their environments, finish
    /// on a tenth of the block, one turn later than they would have (their contexts
    /// re-prefilled on the workers they move to): `(release, end, share)` of the rollout, as
    /// `workload::MigrationShape` takes them (`None`: no tail to hand on).
    pub fn migration(&self, gen_s_per_turn: f64) -> Option<(f64, f64, f64)> {
        let runs = self.mode(&self.admission);
        let share = |r: &AgenticRollout| r.tail_from.0 as f64 / r.duration.0.max(1) as f64;
        let release = runs.iter().map(share).sum::<f64>() / runs.len().max(1) as f64;
        let mean = SampledRollouts::mean_duration(runs).as_secs_f64().max(1e-9);
        (release < 1.0).then_some((release, 1.0 + gen_s_per_turn / mean, TAIL_SHARE))
    }

    /// Sandboxes started during the previous training, the policy's estimates with it.
    pub fn started_early(&self) -> AgenticRuns {
        AgenticRuns { started_early: true, ..self.clone() }
    }
}

/// Conservative per-iteration estimates of an agentic job: the rollout from the sampled
/// declaration, the training as the profile predicts it.
pub fn estimates(runs: &AgenticRuns, disagg: PhaseTimes, colo: PhaseTimes) -> (PhaseTimes, PhaseTimes) {
    (
        PhaseTimes { rollout: runs.estimate(), train: disagg.train },
        PhaseTimes { rollout: runs.colo_estimate(), train: colo.train },
    )
}

fn fnv32(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
