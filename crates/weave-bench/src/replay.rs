//! `weave bench replay`: wall-clock time of one replay per policy.

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;
use weave_core::ClusterConfig;
use weave_io::{json, write_output, TraceArgs};
use weave_model::ProfileModel;
use weave_report::table;
use weave_sim::{prepare, replay, SimConfig};
use weave_trace::{generate, GenConfig};

#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Without --trace: generate this many production-like jobs.
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Policies to time.
    #[arg(long, value_delimiter = ',', default_value = "weave,solo-disagg,colocated")]
    policy: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    policy: String,
    jobs: usize,
    iterations: u64,
    seconds: f64,
    iterations_per_second: f64,
    peak_rss_mb: Option<f64>,
}

/// Peak resident memory of this process so far (Linux), MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let profile = ProfileModel::builtin();
    let trace = match &args.trace.trace {
        Some(_) => args.trace.load(&profile)?,
        None => generate::generate(&GenConfig { jobs: args.jobs.max(1), ..GenConfig::default_workload() }, &profile),
    };
    let policies = weave_sim::Policy::parse_list(&args.policy).map_err(anyhow::Error::msg)?;
    let cluster = ClusterConfig::default();
    let cfg = SimConfig::default();
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let mut rows = Vec::new();
    for p in policies {
        let start = Instant::now();
        let r = replay(&jobs, &cluster, p, &cfg, &mut |_, _| {});
        let seconds = start.elapsed().as_secs_f64();
        rows.push(Row {
            policy: p.name().to_string(),
            jobs: jobs.len(),
            iterations: r.report.iterations,
            seconds,
            iterations_per_second: r.report.iterations as f64 / seconds.max(1e-9),
            peak_rss_mb: peak_rss_mb(),
        });
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    let mut t = table::new(&["policy", "jobs", "iterations", "seconds", "iterations/s", "peak RSS MB"]);
    for r in &rows {
        t.add_row(vec![
            r.policy.clone(),
            r.jobs.to_string(),
            r.iterations.to_string(),
            format!("{:.2}", r.seconds),
            format!("{:.0}", r.iterations_per_second),
            r.peak_rss_mb.map(|m| format!("{m:.0}")).unwrap_or_else(|| "-".into()),
        ]);
    }
    table::align_numbers(&mut t);
    write_output(None, &format!("one replay per policy, wall clock, one core\n{t}\n"))
}
