//! HTML reports: from a replay in process (`simulate --report`) or from saved files
//! (`weave report`).

use crate::input::write_output;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use weave_core::ClusterConfig;
use weave_report::{render, ReportData, Timeline};
use weave_sim::{EventRecord, PolicyReport};

/// Groups drawn in a timeline.
pub const MAX_TIMELINE_GROUPS: usize = 8;

pub fn parse_window(s: &str) -> Result<(f64, f64)> {
    let (a, b) = s.split_once(',').context("--window: expected START,END in hours")?;
    let (a, b): (f64, f64) = (a.trim().parse().context("--window START")?, b.trim().parse().context("--window END")?);
    if !(a.is_finite() && b.is_finite() && a >= 0.0 && b > a) {
        bail!("--window: need 0 <= START < END hours, got {a},{b}");
    }
    Ok((a, b))
}

pub fn build(
    title: String,
    notes: Vec<String>,
    reports: &[PolicyReport],
    cluster: &ClusterConfig,
    timeline: Option<Timeline>,
) -> String {
    let prices = (cluster.rollout.price_per_gpu_hour, cluster.training.price_per_gpu_hour);
    render(&ReportData { title, notes, reports, prices, timeline })
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Event log written by `weave simulate --events` (JSON Lines), or with `--server` the
    /// events of a running `weave serve` (`GET /v1/events`: a JSON array, or JSON Lines).
    events: PathBuf,
    /// The events are a server's: report its jobs' phases (real durations, re-admissions).
    #[arg(long, conflicts_with_all = ["sim", "window"])]
    server: bool,
    /// The replay's results, from `weave simulate --json --per-job`, for the charts.
    #[arg(long, value_name = "FILE")]
    sim: Option<PathBuf>,
    /// Policy whose timeline to draw.
    #[arg(long, default_value = "weave")]
    policy: String,
    /// Timeline window in hours, START,END (default: the first two hours).
    #[arg(long)]
    window: Option<String>,
    /// Output HTML file.
    #[arg(short, long)]
    output: PathBuf,
}

/// A server's events: one JSON array (as `GET /v1/events` answers) or one event per line.
fn server_events(path: &std::path::Path, text: &str) -> Result<Vec<weave_server::plane::PlaneEvent>> {
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(text).with_context(|| format!("{}: not a JSON array of events", path.display()));
    }
    let lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    lines
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}: not an event", path.display(), i + 1)))
        .collect()
}

pub fn run(args: ReportArgs) -> Result<()> {
    let text =
        std::fs::read_to_string(&args.events).with_context(|| format!("cannot read {}", args.events.display()))?;
    if args.server {
        let events = server_events(&args.events, &text)?;
        if events.is_empty() {
            bail!("{}: no events", args.events.display());
        }
        let title = format!("Weave: {}", args.events.display());
        return write_output(Some(&args.output), &weave_server::events_report(&title, &events));
    }
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", args.events.display(), i + 1))?;
        if v.get("policy").and_then(|p| p.as_str()).is_some_and(|p| p != args.policy) {
            continue;
        }
        let e: EventRecord = serde_json::from_value(v)
            .with_context(|| format!("{}:{}: not an event record", args.events.display(), i + 1))?;
        events.push(e);
    }
    if events.is_empty() {
        bail!("{}: no events of policy `{}`", args.events.display(), args.policy);
    }
    let window = args.window.as_deref().map(parse_window).transpose()?;
    let timeline = Timeline::from_events(&args.policy, &events, window, MAX_TIMELINE_GROUPS);
    let reports: Vec<PolicyReport> = match &args.sim {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
            serde_json::from_value(v["policies"].clone())
                .with_context(|| format!("{}: no `policies` from `weave simulate --json`", p.display()))?
        }
        None => Vec::new(),
    };
    let notes = vec![format!("events: {}", args.events.display())];
    let html = build("Weave replay report".into(), notes, &reports, &ClusterConfig::default(), Some(timeline));
    write_output(Some(&args.output), &html)
}
