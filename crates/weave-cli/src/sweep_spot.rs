//! `weave sweep spot`: Weave with a preemptible rollout tier across spot discounts and
//! preemption rates, against on-demand Weave and a spot-only baseline (every job alone on
//! spot, preempted rollouts restarted).

use crate::input::{json, load_cluster, write_output, TraceArgs};
use anyhow::{ensure, Result};
use std::path::PathBuf;
use weave_core::{ClusterConfig, SpotConfig};
use weave_model::ProfileModel;
use weave_report::text::{render_spot_sweep, SpotSweep as Sweep, SpotSweepRow as Row};
use weave_sim::spot_plan::{recommend, PlannedRun, RunFigures, SpotPlan};
use weave_sim::{prepare, replay, Policy, PolicyReport, SimConfig};

#[derive(clap::Args)]
pub struct SpotSweepArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Spot discounts off the on-demand rollout price, percent.
    #[arg(long, value_delimiter = ',', default_value = "0,30,50,60,70")]
    discounts: Vec<f64>,
    /// Mean preemptions per spot node-hour (from rare to hourly).
    #[arg(long, value_delimiter = ',', default_value = "0.0417,0.125,0.5,1")]
    rates: Vec<f64>,
    /// Notice before a node is taken, seconds.
    #[arg(long, default_value_t = 120)]
    notice_s: u64,
    /// How long a replacement node takes once asked for, seconds.
    #[arg(long, default_value_t = 300)]
    replacement_s: u64,
    #[arg(long)]
    json: bool,
}

pub fn run(args: SpotSweepArgs) -> Result<()> {
    for &d in &args.discounts {
        ensure!((0.0..=100.0).contains(&d), "--discounts: {d} is not a percentage from 0 to 100");
    }
    for &r in &args.rates {
        ensure!(r.is_finite() && r >= 0.0, "--rates: {r} is not a rate >= 0 per node-hour");
    }
    let profile = ProfileModel::builtin();
    let base = load_cluster(args.cluster.as_deref())?;
    ensure!(base.rollout_spot.is_none(), "the cluster file declares `rollout_spot`: the sweep sets it itself");
    let trace = args.trace.load(&profile)?;
    let cfg = SimConfig { seed: args.seed, ..SimConfig::default() };
    let jobs = prepare(&trace, &base, &profile, cfg.slo, cfg.seed);
    let run = |cluster: &ClusterConfig, policy| replay(&jobs, cluster, policy, &cfg, &mut |_, _| {}).report;
    let on_demand = run(&base, Policy::Weave);
    let mut rows = Vec::new();
    for &discount in &args.discounts {
        for &rate in &args.rates {
            let mut spot = SpotConfig::at_discount(&base.rollout, discount / 100.0, rate);
            (spot.notice_s, spot.replacement_s) = (args.notice_s, args.replacement_s);
            let cluster = ClusterConfig { rollout_spot: Some(spot), ..base.clone() };
            rows.push(Row {
                discount_pct: discount,
                preemptions_per_node_hour: rate,
                weave: run(&cluster, Policy::Weave),
                spot_only: run(&cluster, Policy::SoloDisagg),
                recommended: None,
            });
        }
    }
    let plans: Vec<_> = rows.iter().map(|row| recommend_for(row, &rows, &on_demand, &base)).collect();
    for (row, plan) in rows.iter_mut().zip(plans) {
        row.recommended = Some(plan);
    }
    let sweep = Sweep { on_demand, rows };
    if args.json {
        return write_output(None, &json(&sweep)?);
    }
    write_output(None, &render_spot_sweep(&sweep, jobs.len()))
}

/// The plan the sweep recommends for `row`'s cell, from the Weave runs at the same rate.
fn recommend_for(row: &Row, rows: &[Row], on_demand: &PolicyReport, base: &ClusterConfig) -> SpotPlan {
    let rate = row.preemptions_per_node_hour;
    let runs: Vec<_> = rows
        .iter()
        .filter(|r| r.preemptions_per_node_hour == rate)
        .map(|r| PlannedRun { discount_pct: r.discount_pct, figures: RunFigures::of(&r.weave) })
        .collect();
    let price = SpotConfig::at_discount(&base.rollout, row.discount_pct / 100.0, rate).price_per_gpu_hour;
    recommend(RunFigures::of(on_demand), &runs, row.discount_pct, price)
}
