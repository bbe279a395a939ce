//! `weave experiment tenants`: teams sharing fixed pools under FIFO, quotas, quotas with
//! preemption, and quotas with preemption and backfill, on the same jobs.

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::{bail, Context, Result};
use rand::Rng;
use serde::Serialize;
use std::path::PathBuf;
use weave_core::{Micros, Priority};
use weave_model::{named_stream, ProfileModel};
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_sim::tenancy::{jain_index, TenantReport};
use weave_sim::{prepare, replay, CapacityMode, Policy, SimConfig};

#[derive(clap::Args)]
pub struct TenantsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Fixed pool sizes (override the cluster config's).
    #[arg(long, default_value_t = 20)]
    rollout_nodes: u32,
    #[arg(long, default_value_t = 20)]
    training_nodes: u32,
    /// Tenants and quotas (TOML: [[tenant]] name, rollout_nodes, training_nodes,
    /// borrow_limit); default: three tenants entitled to 50%, 30% and 20% of each pool.
    #[arg(long, value_name = "FILE")]
    tenants: Option<PathBuf>,
    /// Share of jobs that are `high` and `low` priority when the trace says nothing.
    #[arg(long, default_value_t = 0.1)]
    high_share: f64,
    #[arg(long, default_value_t = 0.2)]
    low_share: f64,
    /// A job is not preempted before it has run this long, hours (9 minutes by default: with
    /// graceful preemption a victim loses little, and a longer protection keeps tenants below
    /// their entitlement while young borrowed jobs sit on its nodes).
    #[arg(long, default_value_t = 0.15)]
    min_run_h: f64,
    /// Iterations between checkpoints (a preempted job resumes from its last one).
    #[arg(long, default_value_t = 10)]
    checkpoint_every: u64,
    /// The lowest priority that may preempt lower-priority jobs of its own tenant: `high`, or
    /// `normal` (any higher priority may, as in Kueue's LowerPriority).
    #[arg(long, default_value = "high", value_name = "PRIORITY")]
    preempts_own: Priority,
    /// Graceful preemption, minutes: a victim may finish its in-flight iteration and save a
    /// checkpoint there before it gives its nodes up (0: it stops at once, losing its work
    /// since its last checkpoint).
    #[arg(long, default_value_t = 5.0, value_name = "MINUTES")]
    grace_min: f64,
    /// Fair share with decay: order tenants by their use over recent hours (this half-life)
    /// instead of their use right now (0: use right now).
    #[arg(long, default_value_t = 2.0, value_name = "HOURS")]
    half_life_h: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
    /// Also write an HTML report: per mode, each tenant's nodes in use hour by hour against
    /// its entitlement.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

#[derive(Serialize)]
struct ModeRow {
    mode: &'static str,
    jobs_run: usize,
    never_ran: u64,
    cost: f64,
    iterations_per_k_dollars: f64,
    training_busy_share: f64,
    /// The same without work preemptions threw away (redone iterations are busy, not useful).
    training_useful_share: f64,
    slo_met_jobs: f64,
    slo_met_iterations: f64,
    /// Jobs that ended above their SLO, by priority: `low`, `normal`, `high` (preemption's
    /// cost lands on the jobs it takes the place of).
    slo_missed_by_priority: [usize; 3],
    /// The same jobs by what happened to them: preempted to reclaim borrowed capacity (at
    /// least once), preempted only for higher-priority jobs of their tenant, never preempted.
    slo_missed_by_cause: [usize; 3],
    preemptions: u64,
    /// Preemptions whose victim saved a checkpoint at its iteration's end within its grace
    /// period (and lost nothing).
    preemptions_saved: u64,
    lost_iterations: u64,
    jain_index: Option<f64>,
    /// Every job's wait for a first start, mean over jobs, hours.
    delay_mean_h: f64,
    /// Against FIFO on the same jobs: jobs that started more than an hour later than under
    /// FIFO, and the most any job started later.
    started_over_1h_after_fifo: usize,
    max_start_after_fifo_h: f64,
    /// The jobs that started more than an hour later than under FIFO: who pays for quotas and
    /// priorities.
    later_than_fifo: Vec<LateJob>,
    /// Backfill only, against the same mode without backfill (EASY's promise: a job let
    /// through early must not push back the ones it jumped).
    against_no_backfill: Option<Later>,
    /// Backfill only: its promise checked in this run (blocked jobs a backfill went past that
    /// started later than projected then).
    backfill_promise: Option<weave_sim::tenancy::BackfillReport>,
    /// Backfill only: the same mode rerun with one more iteration between checkpoints, against
    /// this run. How far first starts move between two runs that differ in one small setting:
    /// per-job comparisons between modes are no more precise than this.
    perturbed: Option<Later>,
    /// `high` jobs: how many, and their wait for a first start (mean, max, hours).
    high_jobs: usize,
    high_delay_mean_h: f64,
    high_delay_max_h: f64,
    /// `high` jobs that waited longer than the target's bound: one checkpoint interval
    /// (`checkpoint_every` iterations at the job's own solo pace) plus its cold start.
    high_over_bound: usize,
    /// Of those, the ones the target counts: still waiting past the bound after a queue pass
    /// when a preemption would have started them (capacity they may take existed). The others
    /// waited for capacity inside its minimum run, or that was not theirs to take.
    high_passed_over: usize,
    tenants: Vec<TenantReport>,
}

#[derive(Serialize)]
struct LateJob {
    name: String,
    tenant: String,
    priority: Priority,
    later_h: f64,
}

/// First starts of one mode against another's on the same jobs.
#[derive(Serialize)]
struct Later {
    delay_mean_change_h: f64,
    started_over_1h_later: usize,
    max_later_h: f64,
    started_over_1h_earlier: usize,
}

/// Each job's wait for its first start, hours, by name.
type Waits = std::collections::BTreeMap<String, f64>;

/// A job's wait for its first start, hours.
fn queued_h(j: &weave_sim::metrics::JobOutcome) -> f64 {
    j.queued.as_secs_f64() / 3600.0
}

fn waits(r: &weave_sim::PolicyReport) -> Waits {
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

#[derive(serde::Deserialize)]
struct TenantsFile {
    tenant: Vec<TenantQuota>,
}

fn quotas(args: &TenantsArgs) -> Result<Vec<TenantQuota>> {
    if let Some(p) = &args.tenants {
        let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        let f: TenantsFile = toml::from_str(&text).with_context(|| format!("{}: not a tenants file", p.display()))?;
        if f.tenant.is_empty() {
            bail!("{}: no [[tenant]]", p.display());
        }
        for t in &f.tenant {
            if !(t.rollout_nodes >= 0.0 && t.training_nodes >= 0.0 && t.borrow_limit.is_none_or(|b| b >= 0.0)) {
                bail!("{}: tenant `{}`: quotas must be non-negative numbers of nodes", p.display(), t.name);
            }
        }
        return Ok(f.tenant);
    }
    let (r, t) = (args.rollout_nodes as f64, args.training_nodes as f64);
    Ok([("team-a", 0.5), ("team-b", 0.3), ("team-c", 0.2)]
        .into_iter()
        .map(|(name, f)| TenantQuota {
            name: name.into(),
            rollout_nodes: r * f,
            training_nodes: t * f,
            borrow_limit: None,
        })
        .collect())
}

/// Tenants and priorities for a trace that carries none: seeded draws, tenants in proportion
/// to their training quota.
fn assign(trace: &mut weave_trace::Trace, tenants: &[TenantQuota], args: &TenantsArgs) {
    let carries = trace.jobs.iter().any(|j| j.tenant.is_some() || j.priority != Priority::Normal);
    if carries {
        return;
    }
    let total: f64 = tenants.iter().map(|t| t.training_nodes).sum::<f64>().max(1e-9);
    for j in &mut trace.jobs {
        let mut rng = named_stream(args.seed, "tenant-assignment", j.id.0 as u64);
        let mut u = rng.random_range(0.0..total);
        let pick = tenants.iter().position(|t| {
            u -= t.training_nodes;
            u < 0.0
        });
        j.tenant = Some(tenants[pick.unwrap_or(tenants.len() - 1)].name.clone());
        let p: f64 = rng.random_range(0.0..1.0);
        j.priority = if p < args.high_share {
            Priority::High
        } else if p < args.high_share + args.low_share {
            Priority::Low
        } else {
            Priority::Normal
        };
    }
}

pub fn run(args: TenantsArgs) -> Result<()> {
    if !(args.min_run_h.is_finite() && args.min_run_h >= 0.0) {
        bail!("--min-run-h must be a non-negative number of hours");
    }
    if !(args.grace_min.is_finite() && args.grace_min >= 0.0) {
        bail!("--grace-min must be a non-negative number of minutes");
    }
    if !(args.half_life_h == 0.0 || (args.half_life_h.is_finite() && args.half_life_h >= 0.01)) {
        bail!("--half-life-h must be 0 (no decay) or at least 0.01 hours");
    }
    if !(0.0..=1.0).contains(&args.high_share)
        || !(0.0..=1.0).contains(&args.low_share)
        || args.high_share + args.low_share > 1.0
    {
        bail!("--high-share and --low-share must be shares that sum to at most 1");
    }
    let profile = ProfileModel::builtin();
    let mut cluster = load_cluster(args.cluster.as_deref())?;
    cluster.rollout.nodes = args.rollout_nodes;
    cluster.training.nodes = args.training_nodes;
    let tenants = quotas(&args)?;
    let mut trace = args.trace.load(&profile)?;
    assign(&mut trace, &tenants, &args);
    let jobs = prepare(&trace, &cluster, &profile, Default::default(), args.seed);
    // Each high job's bound on its wait: one checkpoint interval at its own pace, plus its cold start.
    let high_bound_h: std::collections::BTreeMap<&str, f64> = jobs
        .iter()
        .filter(|j| j.spec.priority == Priority::High)
        .map(|j| (j.spec.name.as_str(), j.high_wait_bound(args.checkpoint_every).as_secs_f64() / 3600.0))
        .collect();
    let by_name: std::collections::BTreeMap<&str, &weave_core::JobSpec> =
        trace.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    let mut rows = Vec::new();
    let (mut fifo, mut previous) = (Waits::new(), Waits::new());
    let run_mode = |mode, checkpoint_every: u64| {
        let policy = SharePolicy {
            mode,
            tenants: tenants.clone(),
            min_run: Micros::from_secs_f64(args.min_run_h * 3600.0),
            checkpoint_every,
            half_life: (args.half_life_h > 0.0).then(|| Micros::from_secs_f64(args.half_life_h * 3600.0)),
            preempts_own: args.preempts_own,
            grace: Micros::from_secs_f64(args.grace_min * 60.0),
        };
        let cfg =
            SimConfig { seed: args.seed, capacity: CapacityMode::Fixed, share: Some(policy), ..SimConfig::default() };
        replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {}).report
    };
    let checkpoint_every = args.checkpoint_every.max(1);
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
    if let Some(path) = &args.report {
        let title =
            format!("Tenants sharing {} + {} nodes: {}", cluster.rollout.nodes, cluster.training.nodes, trace.source);
        let notes = vec![format!(
            "{} jobs, seed {}, minimum run {} h, checkpoint every {} iterations, grace {} min, fair-share half-life {} h; dashed: entitlement",
            jobs.len(),
            args.seed,
            args.min_run_h,
            args.checkpoint_every,
            args.grace_min,
            args.half_life_h
        )];
        let modes: Vec<(&str, &[TenantReport])> = rows.iter().map(|r| (r.mode, r.tenants.as_slice())).collect();
        write_output(Some(path), &weave_report::render_tenants(&title, &notes, &modes))?;
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    write_output(None, &render(&rows, &trace.source, jobs.len(), &cluster))
}

fn render(rows: &[ModeRow], source: &str, jobs: usize, cluster: &weave_core::ClusterConfig) -> String {
    let mut t = table::new(&[
        "mode",
        "tenant",
        "delay mean h",
        "p50 h",
        "p99 h",
        "max h",
        "training use / entitled",
        "longest below entitlement while waiting h",
        "preempted",
        "lost iters",
    ]);
    for r in rows {
        for x in &r.tenants {
            t.add_row(vec![
                r.mode.to_string(),
                x.name.clone(),
                format!("{:.2}", x.delay_mean_h),
                format!("{:.2}", x.delay_p50_h),
                format!("{:.2}", x.delay_p99_h),
                format!("{:.2}", x.delay_max_h),
                format!("{:.1} / {:.1} ({:.0}%)", x.mean_use[1], x.entitlement[1], x.use_of_entitlement[1] * 100.0),
                format!("{:.2}", x.longest_below_entitlement_h),
                x.preemptions.to_string(),
                x.lost_iterations.to_string(),
            ]);
        }
    }
    table::align_numbers(&mut t);
    let mut o = table::new(&[
        "mode",
        "cost $",
        "iters/$1k",
        "training busy (useful)",
        "SLO met (jobs / iters), missed low / normal / high",
        "missed: reclaimed / outranked / never preempted",
        "preemptions (saved at iteration end)",
        "lost iters",
        "Jain index",
        "delay mean h",
        "started >1 h after FIFO (max h), low priority",
        "backfill: >1 h after / before no backfill (max h)",
        "backfilled; jobs gone past: started after projection (>1 h, max h)",
        "high jobs: wait mean / max h, over checkpoint interval + cold start (with capacity to preempt)",
        "never ran",
    ]);
    for r in rows {
        o.add_row(vec![
            r.mode.to_string(),
            format!("{:.0}", r.cost),
            format!("{:.1}", r.iterations_per_k_dollars),
            format!("{:.1}% ({:.1}%)", r.training_busy_share * 100.0, r.training_useful_share * 100.0),
            format!(
                "{:.1}% / {:.1}%, {} / {} / {}",
                r.slo_met_jobs * 100.0,
                r.slo_met_iterations * 100.0,
                r.slo_missed_by_priority[0],
                r.slo_missed_by_priority[1],
                r.slo_missed_by_priority[2]
            ),
            format!("{} / {} / {}", r.slo_missed_by_cause[0], r.slo_missed_by_cause[1], r.slo_missed_by_cause[2]),
            format!("{} ({})", r.preemptions, r.preemptions_saved),
            r.lost_iterations.to_string(),
            r.jain_index.map_or("-".into(), |j| format!("{j:.3}")),
            format!("{:.2}", r.delay_mean_h),
            format!(
                "{} ({:.2}), {} low",
                r.started_over_1h_after_fifo,
                r.max_start_after_fifo_h,
                r.later_than_fifo.iter().filter(|j| j.priority == Priority::Low).count()
            ),
            r.against_no_backfill.as_ref().map_or("-".into(), |b| {
                format!("{} ({:.2}) / {}", b.started_over_1h_later, b.max_later_h, b.started_over_1h_earlier)
            }),
            r.backfill_promise.as_ref().map_or("-".into(), |b| {
                format!("{}; {}: {} ({}, {:.2})", b.backfilled, b.jumped, b.late, b.late_over_1h, b.max_late_h)
            }),
            format!(
                "{}: {:.2} / {:.2}, {} over ({})",
                r.high_jobs, r.high_delay_mean_h, r.high_delay_max_h, r.high_over_bound, r.high_passed_over
            ),
            r.never_ran.to_string(),
        ]);
    }
    table::align_numbers(&mut o);
    let noise = rows.iter().find_map(|r| r.perturbed.as_ref().map(|p| (r.mode, p))).map_or(String::new(), |(mode, p)| {
        format!(
            "Between runs: {mode} rerun with one more iteration between checkpoints starts {} jobs over 1 h later and {} over 1 h earlier (max {:.2} h later), mean delay {:+.2} h: per-job comparisons between modes are no more precise than this.\n",
            p.started_over_1h_later, p.started_over_1h_earlier, p.max_later_h, p.delay_mean_change_h
        )
    });
    format!(
        "{source} ({jobs} jobs) on fixed pools of {} rollout and {} training nodes, Weave placement\n{t}\n{o}\n{noise}",
        cluster.rollout.nodes, cluster.training.nodes
    )
}
