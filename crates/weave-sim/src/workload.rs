//! A trace prepared for replay: each job's SLO, iteration count and estimates, fixed once so
//! every policy replays exactly the same jobs.

use rand::Rng;
use serde::Serialize;
use std::collections::VecDeque;
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
    /// Saving its training state to storage when told to (graceful preemption): as long as
    /// loading it takes.
    pub checkpoint_save: Micros,
    pub place: PlaceJob,
    /// How the job's durations drift over its life (see `dynamics::assign_drift`).
    pub drift: weave_model::Drift,
    /// How long-tail migration reshapes the job's rollouts on a shared block.
    pub migration: MigrationShape,
    /// An agentic job's sampled rollouts (`None`: an ordinary job).
    pub agentic: Option<crate::agentic::AgenticRuns>,
    /// LoRA jobs sharing a base, run as this one job (`None`: a job of its own).
    pub pack: Option<Box<Pack>>,
}

/// LoRA jobs sharing a base's engine and trainer, run as one job of the replay (formed by
/// the replay's `lora` module): its members and its iteration as they leave.
#[derive(Clone, Debug)]
pub struct Pack {
    /// The members as they would run alone (their own SLOs, iterations and solo runs).
    pub members: Vec<SimJob>,
    /// Each member's first iteration as the pack counts them: 0 for the pack's founders, the
    /// pack's next rollout for a job that joined it running.
    pub firsts: Vec<u64>,
    /// Each member's SLO as packing sees it: its own, less the wait for its first rollout
    /// (spread over its iterations) if it joined the pack running.
    pub slos: Vec<f64>,
    /// `(until, times)`: the pack's iteration for its iterations below `until`, ascending.
    pub schedule: Vec<(u64, PhaseTimes)>,
}

impl Pack {
    /// The pack's estimated iteration `k`.
    pub fn times_at(&self, k: u64) -> PhaseTimes {
        let last = self.schedule.last().map(|s| s.1).unwrap_or(PhaseTimes { rollout: Micros(1), train: Micros(1) });
        self.schedule.iter().find(|(until, _)| k < *until).map_or(last, |s| s.1)
    }

    /// A member's iteration `k` alone, with the variation the pack drew for its iteration `k`.
    pub fn member_draw(&self, member: &SimJob, pack_drawn: PhaseTimes, k: u64) -> PhaseTimes {
        let est = self.times_at(k);
        let scale = |own: Micros, drawn: Micros, est: Micros| {
            Micros((own.0 as u128 * drawn.0 as u128 / est.0.max(1) as u128) as u64)
        };
        PhaseTimes {
            rollout: scale(member.disagg.rollout, pack_drawn.rollout, est.rollout),
            train: scale(member.disagg.train, pack_drawn.train, est.train),
        }
    }
}

/// Long-tail migration of one rollout, as fractions of its duration without migration: the
/// nodes are handed on at `release`, the stragglers finish at `end` (later: they are packed
/// onto a few workers and re-generated there), and meanwhile they occupy `share` of the block.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MigrationShape {
    pub release: f64,
    pub end: f64,
    pub share: f64,
}

impl MigrationShape {
    /// No migration: the rollout holds its nodes to the end.
    pub const NONE: MigrationShape = MigrationShape { release: 1.0, end: 1.0, share: 0.0 };
}

/// Measures the migration shape of a job type with the request-level rollout model (trigger:
/// the remaining requests fit in two workers), averaged over `samples` seeded rollouts.
pub fn migration_shape(spec: &JobSpec, seed: u64, samples: usize) -> MigrationShape {
    use weave_dispatch::rollout::{simulate_rollout, MigrationTrigger, RolloutConfig};
    let tp = RolloutConfig::tensor_parallel(spec.job_type.model);
    let cfg = RolloutConfig::for_job(spec.batch, spec.job_type.max_tokens, spec.rollout_nodes, tp);
    let starts = vec![0.0; cfg.workers as usize];
    let mut rng =
        named_stream(seed, "migration-shape", spec.job_type.model.0 as u64 ^ ((spec.job_type.max_tokens as u64) << 32));
    let (mut release, mut end, mut n) = (0.0, 0.0, 0);
    for _ in 0..samples.max(1) {
        let lengths = cfg.draw_lengths(&mut rng);
        let plain = simulate_rollout(&cfg, &lengths, &starts, MigrationTrigger::Never).end;
        let mig = simulate_rollout(&cfg, &lengths, &starts, MigrationTrigger::FitsInWorkers(2));
        if let (Some(t), true) = (mig.migrated_at, plain > 0.0) {
            release += t / plain;
            end += mig.end / plain;
            n += 1;
        }
    }
    if n == 0 || cfg.workers <= 2 {
        return MigrationShape::NONE;
    }
    MigrationShape { release: release / n as f64, end: end / n as f64, share: 2.0 / cfg.workers as f64 }
}

/// Fills in every job's migration shape (one measurement per distinct job shape).
pub fn assign_migration(jobs: &mut [SimJob], seed: u64) {
    let mut cache: std::collections::BTreeMap<(weave_core::JobType, u32, u32), MigrationShape> =
        std::collections::BTreeMap::new();
    // An agentic rollout's tail is its longest trajectory, not its longest response: the
    // request-level model does not describe it, and its rollouts are not migrated.
    for j in jobs.iter_mut().filter(|j| j.agentic.is_none()) {
        let key = (j.spec.job_type, j.spec.batch, j.spec.rollout_nodes);
        j.migration = *cache.entry(key).or_insert_with(|| migration_shape(&j.spec, seed, 10));
    }
}

/// What admission knows about job `job`'s variation: `samples` iterations drawn from the
/// runtime model on the job's own admission stream (not its runtime stream: admission sees
/// the model, never the draws the replay will use), averaged over its iterations, at risk
/// `epsilon`.
pub fn admission_variation(
    job: &SimJob,
    runtime: &RuntimeModel,
    epsilon: f64,
    seed: u64,
    samples: usize,
) -> weave_place::Variation {
    let mut drawn = variation_samples(runtime, seed, job.spec.id, samples);
    // A three-tier policy's admission sees the environment: its rollouts' own spread.
    if let Some(a) = job.agentic.as_ref().filter(|a| a.started_early) {
        let factors = a.admission_factors();
        drawn = drawn.iter().enumerate().map(|(i, &(_, train))| (factors[i % factors.len()], train)).collect();
    }
    weave_place::Variation { samples: drawn, iterations: job.iterations, z: weave_place::Variation::z_for(epsilon) }
}

/// `n` iterations of job `id` drawn from the runtime model as (rollout, training) factors of
/// the estimate, on the job's admission stream.
pub fn variation_samples(
    runtime: &RuntimeModel,
    seed: u64,
    id: weave_core::JobId,
    n: usize,
) -> std::sync::Arc<[(f64, f64)]> {
    let unit = PhaseTimes { rollout: Micros(1_000_000), train: Micros(1_000_000) };
    let mut rng = named_stream(seed, "admission-variation", id.0 as u64);
    (0..n)
        .map(|_| {
            let d = runtime.sample(unit, 0.0, weave_model::Drift::None, &mut rng);
            (d.rollout.0 as f64 / 1e6, d.train.0 as f64 / 1e6)
        })
        .collect()
}

impl SimJob {
    /// Iteration `k` of a solo disaggregated run with durations `d`: the first pays the cold
    /// loads, every one but the last ends with a weight sync. With staleness (solo-async),
    /// every iteration after the first overlaps its rollout with earlier trainings: it takes
    /// the pipelined period at these durations.
    pub fn solo_iteration(&self, d: PhaseTimes, k: u64) -> Micros {
        let sync = if k + 1 < self.iterations { self.sync } else { Micros::ZERO };
        if k == 0 {
            return d.solo() + sync + self.cold_start;
        }
        weave_dispatch::timing::solo_period(d.rollout, d.train + sync, self.spec.staleness)
    }

    /// Iteration `k`'s weight sync in a solo run: every iteration's but the last.
    pub fn sync_after(&self, k: u64) -> Micros {
        if k + 1 < self.iterations {
            self.sync
        } else {
            Micros::ZERO
        }
    }

    /// The same job with its sandboxes started during its previous training and admission
    /// seeing the environment (a three-tier policy); an ordinary job unchanged.
    pub fn three_tier(&self) -> SimJob {
        let mut j = self.clone();
        if let Some(a) = &self.agentic {
            let a = a.started_early();
            (j.disagg, j.colo) = crate::agentic::estimates(&a, j.disagg, j.colo);
            let tail = self.spec.agentic.as_ref().and_then(|s| a.migration(s.gen_s_per_turn));
            j.migration =
                tail.map_or(MigrationShape::NONE, |(release, end, share)| MigrationShape { release, end, share });
            j.place.times = j.disagg;
            j.place.colo = Some(j.colo);
            j.agentic = Some(a);
        }
        j
    }

    /// The same job at staleness `k` at least (RollArt's trajectory-level asynchrony).
    pub fn at_least_stale(&self, k: u32) -> SimJob {
        let mut j = self.clone();
        j.spec.staleness = j.spec.staleness.max(k);
        j.place.staleness = j.spec.staleness;
        j
    }

    /// A LoRA job as today's Weave places and runs it (`weave-full-model`): its host state and
    /// weight sync a full model's; its phases, iterations and solo reference its own.
    pub fn as_full_model(&self, cluster: &ClusterConfig) -> SimJob {
        let mut j = self.clone();
        if j.spec.lora.is_some() {
            let full = JobSpec { lora: None, ..j.spec.clone() };
            j.place.rollout_state = weave_model::job_rollout_state(&full);
            j.place.train_state_total =
                weave_core::Bytes(weave_model::job_training_state(&full).0 * u64::from(full.train_nodes));
            j.place.sync = job_sync(&full, cluster);
        }
        j
    }

    /// The same job run on-policy (what the synchronous baselines run).
    pub fn on_policy(&self) -> SimJob {
        let mut j = self.clone();
        j.spec.staleness = 0;
        j.place.staleness = 0;
        j
    }

    /// A `high` job's bound on its wait for a first start when capacity it may preempt
    /// exists: one checkpoint interval (`checkpoint_every` iterations at its own solo pace, the
    /// most a victim loses), plus its cold start.
    pub fn high_wait_bound(&self, checkpoint_every: u64) -> Micros {
        self.solo_run(checkpoint_every.max(1))
    }

    /// `n` iterations run solo on the conservative estimate, with weight syncs, plus its cold
    /// start.
    fn solo_run(&self, n: u64) -> Micros {
        Micros((self.disagg.solo() + self.sync).0.saturating_mul(n)) + self.cold_start
    }

    /// The job's life at fixed lifetimes: until the trace's solo end, or its iterations run
    /// solo.
    pub fn lifetime(&self) -> Micros {
        match self.spec.lifetime {
            weave_core::Lifetime::SoloUntil(end) => end.saturating_sub(self.spec.arrival),
            weave_core::Lifetime::Iterations(n) => self.solo_run(n),
        }
    }

    /// The job's own random stream of runtime durations: every policy draws the same
    /// sequence for the same job.
    pub fn runtime_stream(&self, seed: u64) -> Stream {
        named_stream(seed, "runtime", self.spec.id.0 as u64)
    }
}

/// A bounded-staleness job's solo run (its own nodes, rollout n waiting only for weights
/// n - k - 1), replayed on the durations the job really drew: how long each of its
/// iterations would have taken alone. Exact under variation, where the per-iteration
/// pipelined period is not (a long rollout delays the next ones too). Times are the solo
/// run's own, from its start.
#[derive(Clone, Debug, Default)]
pub struct SoloPipeline {
    rollout_end: Micros,
    train_end: Micros,
    /// When the last trainings' weights were synced, oldest first (at most k + 1 kept).
    synced: VecDeque<Micros>,
}

impl SoloPipeline {
    /// Runs the next iteration (rollout, training, then `sync`) with staleness `k`; returns
    /// the time from the previous training's end to this one's.
    pub fn next(&mut self, k: u32, d: PhaseTimes, sync: Micros) -> Micros {
        let k1 = k as usize + 1;
        // Rollout n needs the weights of training n - k - 1: the oldest kept, once k + 1 are.
        let gate = if self.synced.len() == k1 { self.synced[0] } else { Micros::ZERO };
        self.rollout_end = self.rollout_end.max(gate) + d.rollout;
        let trainer_free = self.synced.back().copied().unwrap_or(Micros::ZERO);
        let before = self.train_end;
        self.train_end = trainer_free.max(self.rollout_end) + d.train;
        if self.synced.len() == k1 {
            self.synced.pop_front();
        }
        self.synced.push_back(self.train_end + sync);
        self.train_end.saturating_sub(before)
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
    let mut disagg = runtime.sample(job.disagg, progress, job.drift, rng);
    if let Some(a) = &job.agentic {
        // The same draws of the runtime stream either way: policies stay paired.
        disagg.rollout = a.rollout(iteration).duration;
    }
    if let Some(pack) = &job.pack {
        // A pack's iteration shrinks as its members leave; the variation drawn scales it.
        let est = pack.times_at(iteration);
        let at =
            |d: Micros, full: Micros, est: Micros| Micros((d.0 as u128 * est.0 as u128 / full.0.max(1) as u128) as u64);
        disagg = PhaseTimes {
            rollout: at(disagg.rollout, job.disagg.rollout, est.rollout),
            train: at(disagg.train, job.disagg.train, est.train),
        };
    }
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
    let mut jobs = prepare_jobs(trace, cluster, profile, slo, seed);
    assign_migration(&mut jobs, seed);
    jobs
}

fn prepare_jobs(
    trace: &Trace,
    cluster: &ClusterConfig,
    profile: &ProfileModel,
    slo: SloSetting,
    seed: u64,
) -> Vec<SimJob> {
    let mut cache = crate::agentic::Cache::default();
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
            let mut disagg = profile.estimate(Deployment::Disagg, spec).times;
            let mut colo = profile.estimate(Deployment::Colo, spec).times;
            let agentic = spec.agentic.as_ref().map(|a| {
                let speed = colo.rollout.0 as f64 / disagg.rollout.0.max(1) as f64;
                let runs = crate::agentic::AgenticRuns::prepare(
                    a,
                    spec.batch,
                    disagg.train,
                    seed,
                    (spec.id.0, speed),
                    &mut cache,
                );
                (disagg, colo) = crate::agentic::estimates(&runs, disagg, colo);
                runs
            });
            let mut place = PlaceJob::from_spec(spec, slo, profile, cluster);
            if agentic.is_some() {
                place.times = disagg;
                place.colo = Some(colo);
            }
            let sync = job_sync(spec, cluster);
            let model = spec.job_type.model;
            let cold_start = switch_time(model, Pool::Rollout, SwitchKind::Cold)
                + switch_time(model, Pool::Training, SwitchKind::Cold);
            SimJob {
                iterations: iterations(spec, disagg.solo() + sync),
                place,
                spec: spec.clone(),
                slo,
                disagg,
                colo,
                sync,
                cold_start,
                checkpoint_save: switch_time(model, Pool::Training, SwitchKind::Cold),
                drift: weave_model::Drift::None,
                migration: MigrationShape::NONE,
                agentic,
                pack: None,
            }
        })
        .collect()
}

/// The trace with a `share` of its jobs at staleness `k` and the rest on-policy: each job
/// draws once from its own stream, so the stale jobs at a smaller share are among those at a
/// larger one (and k = 1 and k = 2 pick the same jobs).
pub fn with_staleness(trace: &Trace, share: f64, k: u32, seed: u64) -> Trace {
    let mut out = trace.clone();
    for job in &mut out.jobs {
        let u: f64 = named_stream(seed, "staleness-share", u64::from(job.id.0)).random();
        job.staleness = if u < share { k } else { 0 };
    }
    out
}

fn draw(rng: &mut Stream, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        rng.random_range(lo..=hi)
    } else {
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::SoloPipeline;
    use weave_core::{Micros, PhaseTimes};

    fn secs(rollout: u64, train: u64) -> PhaseTimes {
        PhaseTimes { rollout: Micros::from_secs(rollout), train: Micros::from_secs(train) }
    }

    #[test]
    fn on_policy_pipeline_is_the_serial_run() {
        let mut p = SoloPipeline::default();
        let sync = Micros::from_secs(5);
        // The first iteration: rollout then training; later ones also wait for the sync.
        assert_eq!(p.next(0, secs(30, 20), sync), Micros::from_secs(50));
        assert_eq!(p.next(0, secs(30, 20), sync), Micros::from_secs(55));
        assert_eq!(p.next(0, secs(10, 40), sync), Micros::from_secs(55));
    }

    #[test]
    fn stale_pipeline_settles_at_the_pipelined_period() {
        let sync = Micros::from_secs(5);
        // Rollout-bound with k = 1: max(30, 20 + 5, 55 / 2) = 30 s per iteration.
        let mut p = SoloPipeline::default();
        let steps: Vec<Micros> = (0..6).map(|_| p.next(1, secs(30, 20), sync)).collect();
        assert_eq!(steps[0], Micros::from_secs(50));
        assert!(steps[2..].iter().all(|&s| s == Micros::from_secs(30)), "{steps:?}");
        // A 90 s rollout costs its own length once; the rollouts after it follow back to back.
        let mut p = SoloPipeline::default();
        let d: Vec<Micros> = [30, 30, 90, 30, 30, 30].iter().map(|&r| p.next(1, secs(r, 20), sync)).collect();
        assert_eq!(d[2], Micros::from_secs(90));
        assert_eq!(d[3], Micros::from_secs(30));
        // k = 2 with a training-bound job: period = train + sync.
        let mut p = SoloPipeline::default();
        let t: Vec<Micros> = (0..8).map(|_| p.next(2, secs(10, 40), sync)).collect();
        assert!(t[3..].iter().all(|&s| s == Micros::from_secs(45)), "{t:?}");
    }
}
