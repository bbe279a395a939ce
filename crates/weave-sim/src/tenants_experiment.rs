//! The tenants experiment (`weave experiment tenants`): teams sharing fixed pools under FIFO,
//! quotas, quotas with preemption, and quotas with preemption and backfill, on the same jobs;
//! per mode, what it costs, who waits and who pays (against FIFO, and backfill against the
//! same mode without it). The binary parses the settings and prints the rows.

use crate::metrics::JobOutcome;
use crate::tenancy::{jain_index, BackfillReport, TenantReport};
use crate::{prepare, replay, CapacityMode, Policy, PolicyReport, SimConfig};
use serde::Serialize;
use weave_core::{ClusterConfig, Micros, Priority};
use weave_model::ProfileModel;
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_trace::Trace;

/// The experiment's settings (each mode runs with them; only the mode changes).
#[derive(Clone, Debug)]
pub struct Settings {
    pub tenants: Vec<TenantQuota>,
    /// A job is not preempted before it has run this long.
    pub min_run: Micros,
    /// Iterations between checkpoints.
    pub checkpoint_every: u64,
    pub preempts_own: Priority,
    /// Graceful preemption: how long a victim may take to finish its iteration and save.
    pub grace: Micros,
    /// Fair share with decay (`None`: use right now).
    pub half_life: Option<Micros>,
    pub seed: u64,
}

#[derive(Serialize)]
pub struct ModeRow {
    pub mode: &'static str,
    pub jobs_run: usize,
    pub never_ran: u64,
    pub cost: f64,
    pub iterations_per_k_dollars: f64,
    pub training_busy_share: f64,
    /// The same without work preemptions threw away (redone iterations are busy, not useful).
    pub training_useful_share: f64,
    pub slo_met_jobs: f64,
    pub slo_met_iterations: f64,
    /// Jobs that ended above their SLO, by priority: `low`, `normal`, `high` (preemption's
    /// cost lands on the jobs it takes the place of).
    pub slo_missed_by_priority: [usize; 3],
    /// The same jobs by what happened to them: preempted to reclaim borrowed capacity (at
    /// least once), preempted only for higher-priority jobs of their tenant, never preempted.
    pub slo_missed_by_cause: [usize; 3],
    pub preemptions: u64,
    /// Preemptions whose victim saved a checkpoint at its iteration's end within its grace
    /// period (and lost nothing).
    pub preemptions_saved: u64,
    pub lost_iterations: u64,
    pub jain_index: Option<f64>,
    /// Every job's wait for a first start, mean over jobs, hours.
    pub delay_mean_h: f64,
    /// Against FIFO on the same jobs: jobs that started more than an hour later than under
    /// FIFO, and the most any job started later.
    pub started_over_1h_after_fifo: usize,
    pub max_start_after_fifo_h: f64,
    /// The jobs that started more than an hour later than under FIFO: who pays for quotas and
    /// priorities.
    pub later_than_fifo: Vec<LateJob>,
    /// Backfill only, against the same mode without backfill (EASY's promise: a job let
    /// through early must not push back the ones it jumped).
    pub against_no_backfill: Option<Later>,
    /// Backfill only: its promise checked in this run (blocked jobs a backfill went past that
    /// started later than projected then).
    pub backfill_promise: Option<BackfillReport>,
    /// Backfill only: the same mode rerun with one more iteration between checkpoints, against
    /// this run. How far first starts move between two runs that differ in one small setting:
    /// per-job comparisons between modes are no more precise than this.
    pub perturbed: Option<Later>,
    /// `high` jobs: how many, and their wait for a first start (mean, max, hours).
    pub high_jobs: usize,
    pub high_delay_mean_h: f64,
    pub high_delay_max_h: f64,
    /// `high` jobs that waited longer than the target's bound: one checkpoint interval
    /// (`checkpoint_every` iterations at the job's own solo pace) plus its cold start.
    pub high_over_bound: usize,
    /// Of those, the ones the target counts: still waiting past the bound after a queue pass
    /// when a preemption would have started them (capacity they may take existed). The others
    /// waited for capacity inside its minimum run, or that was not theirs to take.
    pub high_passed_over: usize,
    pub tenants: Vec<TenantReport>,
}

#[derive(Serialize)]
pub struct LateJob {
    pub name: String,
    pub tenant: String,
    pub priority: Priority,
    pub later_h: f64,
}

/// First starts of one mode against another's on the same jobs.
#[derive(Serialize)]
pub struct Later {
    pub delay_mean_change_h: f64,
    pub started_over_1h_later: usize,
    pub max_later_h: f64,
    pub started_over_1h_earlier: usize,
}

/// Each job's wait for its first start, hours, by name.
type Waits = std::collections::BTreeMap<String, f64>;

/// A job's wait for its first start, hours.
fn queued_h(j: &JobOutcome) -> f64 {
    j.queued.as_secs_f64() / 3600.0
}

fn waits(r: &PolicyReport) -> Waits {
    r.per_job.iter().map(|j| (j.name.clone(), queued_h(j))).collect()
}

/// First starts in `now` against `base`, over the jobs in both.
fn later(now: &Waits, base: &Waits) -> Later {
    let d: Vec<f64> = later_than(now, base).map(|(_, d)| d).collect();
    Later {
        delay_mean_change_h: mean(now.values().copied()) - mean(base.values().copied()),
        started_over_1h_later: d.iter().filter(|d| **d > 1.0).count(),
        max_later_h: d.iter().copied().fold(0.0, f64::max),
        started_over_1h_earlier: d.iter().filter(|d| **d < -1.0).count(),
    }
}

/// How much later each job of `now` first started than in `base` (jobs in both).
fn later_than<'a>(now: &'a Waits, base: &'a Waits) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    now.iter().filter_map(|(name, w)| base.get(name).map(|b| (name.as_str(), w - b)))
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Runs every sharing mode on the trace's jobs (tenants and priorities already assigned) on
/// `cluster`'s fixed pools; one row per mode, in [`ShareMode::ALL`]'s order.
pub fn run(trace: &Trace, cluster: &ClusterConfig, profile: &ProfileModel, s: &Settings) -> Vec<ModeRow> {
    let jobs = prepare(trace, cluster, profile, Default::default(), s.seed);
    // Each high job's bound on its wait: one checkpoint interval at its own pace, plus its cold start.
    let high_bound_h: std::collections::BTreeMap<&str, f64> = jobs
        .iter()
        .filter(|j| j.spec.priority == Priority::High)
        .map(|j| (j.spec.name.as_str(), j.high_wait_bound(s.checkpoint_every).as_secs_f64() / 3600.0))
        .collect();
    let by_name: std::collections::BTreeMap<&str, &weave_core::JobSpec> =
        trace.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    let mut rows = Vec::new();
    let (mut fifo, mut previous) = (Waits::new(), Waits::new());
    let run_mode = |mode, checkpoint_every: u64| {
        let policy = SharePolicy {
            mode,
            tenants: s.tenants.clone(),
            min_run: s.min_run,
            checkpoint_every,
            half_life: s.half_life,
            preempts_own: s.preempts_own,
            grace: s.grace,
        };
        let cfg =
            SimConfig { seed: s.seed, capacity: CapacityMode::Fixed, share: Some(policy), ..SimConfig::default() };
        replay(&jobs, cluster, Policy::Weave, &cfg, &mut |_, _| {}).report
    };
    let checkpoint_every = s.checkpoint_every.max(1);
    for mode in ShareMode::ALL {
        let r = run_mode(mode, checkpoint_every);
        let w = waits(&r);
        if mode == ShareMode::Fifo {
            fifo = w.clone();
        }
        // Later than FIFO: the first start's delay against FIFO's for the same job.
        let against_fifo = later(&w, &fifo);
        let later_than_fifo = later_than(&w, &fifo)
            .filter(|(_, d)| *d > 1.0)
            .map(|(name, later_h)| LateJob {
                name: name.into(),
                tenant: by_name.get(name).and_then(|j| j.tenant.clone()).unwrap_or_default(),
                priority: by_name.get(name).map_or(Priority::Normal, |j| j.priority),
                later_h,
            })
            .collect();
        // `ShareMode::ALL` lists backfill right after the same mode without it.
        let against_no_backfill = (mode == ShareMode::Backfill).then(|| later(&w, &previous));
        let perturbed = (mode == ShareMode::Backfill).then(|| later(&waits(&run_mode(mode, checkpoint_every + 1)), &w));
        let high: Vec<(f64, f64)> = r
            .per_job
            .iter()
            .filter_map(|j| high_bound_h.get(j.name.as_str()).map(|&bound| (queued_h(j), bound)))
            .collect();
        let (mut slo_missed_by_priority, mut slo_missed_by_cause) = ([0; 3], [0; 3]);
        for j in r.per_job.iter().filter(|j| j.slowdown > j.slo + 1e-9) {
            let p = by_name.get(j.name.as_str()).map_or(Priority::Normal, |s| s.priority);
            slo_missed_by_priority[p as usize] += 1;
            slo_missed_by_cause[if j.reclaimed > 0 {
                0
            } else if j.outranked > 0 {
                1
            } else {
                2
            }] += 1;
        }
        let held = r.training.gpu_hours.max(1e-9);
        rows.push(ModeRow {
            mode: mode.name(),
            jobs_run: r.per_job.len().max(r.jobs),
            never_ran: r.rejected,
            cost: r.total_cost.as_dollars(),
            iterations_per_k_dollars: r.iterations_per_k_dollars,
            training_busy_share: r.training.busy_gpu_hours / held,
            training_useful_share: (r.training.busy_gpu_hours - r.preempted_training_gpu_hours.unwrap_or(0.0)) / held,
            slo_met_jobs: r.slo_attainment_jobs,
            slo_met_iterations: r.slo_attainment_iterations,
            slo_missed_by_priority,
            slo_missed_by_cause,
            preemptions: r.events.preemptions,
            preemptions_saved: r.events.preemptions_saved,
            lost_iterations: r.events.lost_iterations,
            jain_index: jain_index(&r.tenants),
            delay_mean_h: mean(w.values().copied()),
            started_over_1h_after_fifo: against_fifo.started_over_1h_later,
            max_start_after_fifo_h: against_fifo.max_later_h,
            later_than_fifo,
            against_no_backfill,
            backfill_promise: r.backfill,
            perturbed,
            high_jobs: high.len(),
            high_delay_mean_h: mean(high.iter().map(|h| h.0)),
            high_delay_max_h: high.iter().map(|h| h.0).fold(0.0, f64::max),
            high_over_bound: high.iter().filter(|(wait, bound)| wait > bound).count(),
            high_passed_over: r.per_job.iter().filter(|j| j.passed_over).count(),
            tenants: r.tenants,
        });
        previous = w;
    }
    rows
}
