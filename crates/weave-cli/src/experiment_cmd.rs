//! `weave experiment drift`: re-grouping policies against drift scenarios, with failures off
//! and on.

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;
use weave_model::ProfileModel;
use weave_sim::dynamics::{assign_drift, DriftScenario, Failures, Regroup};
use weave_sim::{prepare, replay, Policy, SimConfig};

#[derive(clap::Subcommand)]
pub enum ExperimentCommand {
    /// Static vs periodic vs incremental re-grouping on each drift scenario, failures off and
    /// on (Weave placement, online re-estimation on for all).
    Drift(DriftArgs),
    /// From the research prototype's numbers to ours: prototype mode, then the faithful
    /// engine under the prototype's assumptions, then one assumption switched to ours per row.
    Waterfall(crate::waterfall_cmd::WaterfallArgs),
    /// Teams sharing fixed pools: FIFO, quotas, quotas + preemption, quotas + preemption +
    /// backfill on the same jobs (default: the trace split into three tenants, 50/30/20%).
    Tenants(crate::tenants_cmd::TenantsArgs),
}

#[derive(clap::Args)]
pub struct DriftArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Job failures per job-hour when failures are on.
    #[arg(long, default_value_t = 0.02)]
    job_failure_rate: f64,
    /// Node failures per node-hour when failures are on.
    #[arg(long, default_value_t = 0.002)]
    node_failure_rate: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    scenario: String,
    failures: bool,
    regroup: String,
    cost: f64,
    iterations_per_k_dollars: f64,
    slo_met_iterations: f64,
    slo_violation_ratio: f64,
    slo_met_jobs: f64,
    migrations: u64,
    repacks: u64,
    restarts: u64,
    lost_iterations: u64,
    failed_permanently: u64,
}

pub fn run(cmd: ExperimentCommand) -> Result<()> {
    match cmd {
        ExperimentCommand::Drift(args) => drift(args),
        ExperimentCommand::Waterfall(args) => crate::waterfall_cmd::run(args),
        ExperimentCommand::Tenants(args) => crate::tenants_cmd::run(args),
    }
}

fn drift(args: DriftArgs) -> Result<()> {
    let profile = ProfileModel::builtin();
    let cluster = load_cluster(args.cluster.as_deref())?;
    let trace = args.trace.load(&profile)?;
    let base = prepare(&trace, &cluster, &profile, Default::default(), args.seed);
    let scenarios = [
        DriftScenario::None,
        DriftScenario::Increasing { extent: 0.25 },
        DriftScenario::Increasing { extent: 1.0 },
        DriftScenario::Decreasing { extent: 0.3 },
        DriftScenario::Mixed { extent: 0.5 },
    ];
    let failures = Failures {
        job_rate_per_hour: args.job_failure_rate,
        node_rate_per_hour: args.node_failure_rate,
        ..Failures::default()
    };
    let mut rows = Vec::new();
    for scenario in scenarios {
        let mut jobs = base.clone();
        assign_drift(&mut jobs, scenario, args.seed);
        for with_failures in [false, true] {
            for regroup in [Regroup::Static, Regroup::periodic_default(), Regroup::Incremental] {
                let cfg = SimConfig {
                    seed: args.seed,
                    reestimate: true,
                    regroup,
                    failures: with_failures.then_some(failures),
                    ..SimConfig::default()
                };
                let r = replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {}).report;
                rows.push(Row {
                    scenario: scenario.name(),
                    failures: with_failures,
                    regroup: regroup.name().into(),
                    cost: r.total_cost.as_dollars(),
                    iterations_per_k_dollars: r.iterations_per_k_dollars,
                    slo_met_iterations: r.slo_attainment_iterations,
                    slo_violation_ratio: 1.0 - r.slo_attainment_iterations,
                    slo_met_jobs: r.slo_attainment_jobs,
                    migrations: r.events.migrations,
                    repacks: r.events.repacks,
                    restarts: r.events.restarts,
                    lost_iterations: r.events.lost_iterations,
                    failed_permanently: r.events.failed_permanently,
                });
            }
        }
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    let mut t = table::new(&[
        "drift",
        "failures",
        "re-grouping",
        "cost $",
        "iters/$1k",
        "SLO violations (iters)",
        "SLO met (jobs)",
        "migrations",
        "restarts",
        "lost iters",
        "failed",
    ]);
    for r in &rows {
        t.add_row(vec![
            r.scenario.clone(),
            if r.failures { "on" } else { "off" }.to_string(),
            r.regroup.clone(),
            format!("{:.0}", r.cost),
            format!("{:.1}", r.iterations_per_k_dollars),
            format!("{:.1}%", r.slo_violation_ratio * 100.0),
            format!("{:.1}%", r.slo_met_jobs * 100.0),
            format!(
                "{}{}",
                r.migrations,
                if r.repacks > 0 { format!(" ({} re-packs)", r.repacks) } else { String::new() }
            ),
            r.restarts.to_string(),
            r.lost_iterations.to_string(),
            r.failed_permanently.to_string(),
        ]);
    }
    table::align_numbers(&mut t);
    write_output(None, &format!("{} jobs ({}); Weave placement, online re-estimation\n{t}\n", base.len(), trace.source))
}
