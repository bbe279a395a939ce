//! `weave experiment tenants`: teams sharing fixed pools under FIFO, quotas, quotas with
//! preemption, and quotas with preemption and backfill, on the same jobs.

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use weave_core::{Micros, Priority};
use weave_model::ProfileModel;
use weave_place::share::TenantQuota;
use weave_sim::tenancy::TenantReport;
use weave_sim::tenants_experiment::{self, ModeRow, Settings};

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
    /// Tenants and quotas: the server's tenants file (TOML: [[tenant]] name, rollout_nodes,
    /// training_nodes, borrow_limit; token_sha256 and admin allowed, not needed); default:
    /// three tenants entitled to 50%, 30% and 20% of each pool.
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

/// The tenants and their quotas: the `--tenants` file (the server's format; tokens optional),
/// else three tenants entitled to 50%, 30% and 20% of each pool.
fn quotas(args: &TenantsArgs) -> Result<Vec<TenantQuota>> {
    if let Some(p) = &args.tenants {
        let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        return weave_server::auth::quotas_from_toml(&text).with_context(|| format!("{}", p.display()));
    }
    let (r, t) = (args.rollout_nodes as f64, args.training_nodes as f64);
    Ok([("team-a", 0.5), ("team-b", 0.3), ("team-c", 0.2)]
        .into_iter()
        .map(|(name, f)| TenantQuota {
            name: name.into(),
            rollout_nodes: r * f,
            training_nodes: t * f,
            borrow_limit: None,
            env_cores: None,
        })
        .collect())
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
    let weights: Vec<(&str, f64)> = tenants.iter().map(|t| (t.name.as_str(), t.training_nodes)).collect();
    weave_trace::generate::assign_tenants(&mut trace, &weights, args.high_share, args.low_share, args.seed);
    let settings = Settings {
        tenants,
        min_run: Micros::from_secs_f64(args.min_run_h * 3600.0),
        checkpoint_every: args.checkpoint_every,
        preempts_own: args.preempts_own,
        grace: Micros::from_secs_f64(args.grace_min * 60.0),
        half_life: (args.half_life_h > 0.0).then(|| Micros::from_secs_f64(args.half_life_h * 3600.0)),
        seed: args.seed,
    };
    let rows = tenants_experiment::run(&trace, &cluster, &profile, &settings);
    let jobs = trace.jobs.len();
    if let Some(path) = &args.report {
        let title =
            format!("Tenants sharing {} + {} nodes: {}", cluster.rollout.nodes, cluster.training.nodes, trace.source);
        let notes = vec![format!(
            "{} jobs, seed {}, minimum run {} h, checkpoint every {} iterations, grace {} min, fair-share half-life {} h; dashed: entitlement",
            jobs,
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
    write_output(None, &render(&rows, &trace.source, jobs, &cluster))
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
