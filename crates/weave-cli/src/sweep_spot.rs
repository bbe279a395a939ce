//! `weave sweep spot`: Weave with a preemptible rollout tier across spot discounts and
//! preemption rates, against on-demand Weave and a spot-only baseline (every job alone on
//! spot, preempted rollouts restarted).

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::{ensure, Result};
use serde::Serialize;
use std::path::PathBuf;
use weave_core::{ClusterConfig, SpotConfig};
use weave_model::ProfileModel;
use weave_sim::{prepare, replay, Policy, PolicyReport, SimConfig, SimJob};

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

#[derive(Serialize)]
struct Row {
    discount_pct: f64,
    preemptions_per_node_hour: f64,
    weave: PolicyReport,
    spot_only: PolicyReport,
}

#[derive(Serialize)]
struct Sweep {
    on_demand: PolicyReport,
    rows: Vec<Row>,
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
            });
        }
    }
    let sweep = Sweep { on_demand, rows };
    if args.json {
        return write_output(None, &json(&sweep)?);
    }
    write_output(None, &render(&sweep, &jobs))
}

fn render(s: &Sweep, jobs: &[SimJob]) -> String {
    let mut t = table::new(&[
        "discount",
        "preemptions /node-h",
        "weave spot iters/$1k",
        "$/iter vs on-demand weave",
        "started on spot",
        "SLO met (jobs)",
        "preempted",
        "moved/restarted/idle",
        "lost to preemption $",
        "spot-only iters/$1k",
        "spot-only SLO met",
        "weave vs spot-only",
    ]);
    let per_iteration = |r: &PolicyReport| r.total_cost.as_dollars() / r.iterations.max(1) as f64;
    let base = per_iteration(&s.on_demand);
    let pct = |v: f64| format!("{:.1}%", v * 100.0);
    for r in &s.rows {
        let (w, b) = (&r.weave, &r.spot_only);
        let spot = spot_cells(w.spot);
        t.add_row(vec![
            format!("{:.0}%", r.discount_pct),
            format!("{}", r.preemptions_per_node_hour),
            format!("{:.1}", w.iterations_per_k_dollars),
            format!("{:+.1}%", (per_iteration(w) / base - 1.0) * 100.0),
            format!("{} of {}", spot.0, jobs.len()),
            pct(w.slo_attainment_jobs),
            spot.1.to_string(),
            spot.2,
            w.money.lost_to_preemption.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cost.as_dollars())),
            format!("{:.1}", b.iterations_per_k_dollars),
            pct(b.slo_attainment_jobs),
            format!("{:.2}x", w.iterations_per_k_dollars / b.iterations_per_k_dollars.max(f64::MIN_POSITIVE)),
        ]);
    }
    table::align_numbers(&mut t);
    format!(
        "sweep: spot (on-demand weave: {:.1} iters/$1k, ${:.2}/iteration, SLO met {})\n{t}\n",
        s.on_demand.iterations_per_k_dollars,
        base,
        pct(s.on_demand.slo_attainment_jobs)
    )
}

/// The spot columns of a report: jobs admitted on spot, preemptions, and how they were met.
fn spot_cells(s: Option<weave_sim::metrics::SpotReport>) -> (u64, u64, String) {
    match s {
        Some(s) => {
            let c = s.counts;
            (c.spot_jobs, c.preemptions, format!("{}/{}/{}", c.moved, c.restarted, c.idle))
        }
        None => (0, 0, "-".into()),
    }
}
