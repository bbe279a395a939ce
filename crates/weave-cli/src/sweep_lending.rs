//! `weave sweep lending`: Weave lending idle rollout blocks across groups against Weave
//! without it, per seed: what the loans saved, what they cost the lenders (never a delay), and
//! iterations per dollar at equal work.

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::{ensure, Result};
use serde::Serialize;
use std::path::PathBuf;
use weave_model::ProfileModel;
use weave_sim::{prepare, replay, Policy, PolicyReport, SimConfig};

#[derive(clap::Args)]
pub struct LendingSweepArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Seeds to replay, comma-separated (each a full run with and without lending).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    seed: u64,
    without: PolicyReport,
    with_lending: PolicyReport,
}

pub fn run(args: LendingSweepArgs) -> Result<()> {
    ensure!(!args.seeds.is_empty(), "--seeds: give at least one seed");
    let profile = ProfileModel::builtin();
    let cluster = load_cluster(args.cluster.as_deref())?;
    let trace = args.trace.load(&profile)?;
    let mut rows = Vec::new();
    for &seed in &args.seeds {
        let cfg = SimConfig { seed, ..SimConfig::default() };
        let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
        let run = |cfg: &SimConfig| replay(&jobs, &cluster, Policy::Weave, cfg, &mut |_, _| {}).report;
        let with_lending = run(&SimConfig { lending: true, ..cfg.clone() });
        rows.push(Row { seed, without: run(&cfg), with_lending });
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    write_output(None, &render(&rows))
}

fn render(rows: &[Row]) -> String {
    let mut t = table::new(&[
        "seed",
        "weave iters/$1k",
        "with lending",
        "change",
        "SLO met (jobs)",
        "loans",
        "reclaimed early",
        "lender delays",
        "lent H20 GPU-h",
        "lent $",
        "rollout h saved",
    ]);
    for r in rows {
        let (a, b) = (&r.without, &r.with_lending);
        let l = b.lending.expect("a lending run reports it");
        t.add_row(vec![
            r.seed.to_string(),
            format!("{:.2}", a.iterations_per_k_dollars),
            format!("{:.2}", b.iterations_per_k_dollars),
            format!(
                "{:+.2}%",
                (b.iterations_per_k_dollars / a.iterations_per_k_dollars.max(f64::MIN_POSITIVE) - 1.0) * 100.0
            ),
            format!("{:.1}% / {:.1}%", a.slo_attainment_jobs * 100.0, b.slo_attainment_jobs * 100.0),
            l.counts.loans.to_string(),
            l.counts.reclaimed_early.to_string(),
            l.counts.lender_delays.to_string(),
            format!("{:.0}", l.lent_gpu_hours),
            b.money.lent.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cost.as_dollars())),
            format!("{:.1}", l.saved_rollout_hours),
        ]);
    }
    table::align_numbers(&mut t);
    format!("sweep: lending idle rollout blocks across groups (weave, equal work)\n{t}\n")
}
