//! `weave simulate --model prototype`: the research prototype's rules and metrics.

use crate::input::{json, write_output};
use crate::table;
use crate::trace_cmd::render_summary;
use anyhow::{bail, Result};
use std::time::Instant;
use weave_model::ProfileModel;
use weave_sim::prototype::{ProtoConfig, ProtoPolicy, ProtoPolicyKind};
use weave_sim::SloSetting;
use weave_trace::Summary;

pub struct Options {
    pub seed: u64,
    pub slo: SloSetting,
    pub baselines: Vec<ProtoPolicyKind>,
    pub max_group_size: usize,
    pub json: bool,
}

pub fn run(opts: &Options, trace: &weave_trace::Trace, profile: &ProfileModel) -> Result<()> {
    if opts.max_group_size == 0 {
        bail!("--max-group-size must be at least 1");
    }
    let mut cfg = ProtoConfig {
        seed: opts.seed,
        max_members: opts.max_group_size,
        baselines: opts.baselines.clone(),
        ..Default::default()
    };
    match opts.slo {
        SloSetting::Fixed { value } => cfg.slo_fixed = Some(value),
        SloSetting::Uniform { lo, hi } => (cfg.slo_lo, cfg.slo_hi) = (lo, hi),
        // The prototype's default range for jobs without an SLO in the trace.
        SloSetting::FromTrace { .. } => {}
    }
    let started = Instant::now();
    let report = weave_sim::prototype::run(trace, profile, &cfg);
    let elapsed = started.elapsed().as_secs_f64();
    if opts.json {
        return write_output(None, &json(&report)?);
    }
    let mut text = render_summary(&Summary::of(trace, profile));
    text.push_str(&format!(
        "prototype mode (fixed lifetimes; cost 1 per training node-second, 1/3 per rollout node-second; group cap {}), {elapsed:.2} s\n",
        cfg.max_members
    ));
    let seeded = |p: &&ProtoPolicy| p.seed.is_some();
    let fixed: Vec<&ProtoPolicy> = report.policies.iter().filter(|p| !seeded(p)).collect();
    text.push_str(&format!("{}\n", policy_table(&fixed)));
    let a = &report.admissions;
    text.push_str(&format!(
        "weave admissions: direct {} / scaling {} / new group {}; mean group size {:.2}; jobs with an SLO violation: {}\n",
        a.direct, a.scaling, a.isolated, report.mean_group_size, report.slo_violations
    ));
    for b in &cfg.baselines {
        let rows: Vec<&ProtoPolicy> = report.policies.iter().filter(|p| seeded(p) && p.policy == b.name()).collect();
        text.push_str(&spread(b.name(), &rows));
    }
    text.push_str("what these numbers mean (the prototype's definitions):\n");
    for d in &report.definitions {
        text.push_str(&format!("  - {d}\n"));
    }
    write_output(None, &text)
}

fn policy_table(rows: &[&ProtoPolicy]) -> String {
    let mut t = table::new(&[
        "policy",
        "cost (node-hours)",
        "cost ratio: solo / this",
        "cost ratio: colo / this",
        "iterations",
        "iters per cost-hour",
        "vs solo",
        "vs colo",
        "rollout util",
        "training util",
    ]);
    let pct = |v: Option<f64>| v.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "-".into());
    for p in rows {
        t.add_row(vec![
            p.policy.clone(),
            format!("{:.1}", p.cost / 3600.0),
            format!("{:.2}x", p.cost_ratio_vs_solo_disagg),
            format!("{:.2}x", p.cost_ratio_vs_colocated),
            p.iterations.to_string(),
            format!("{:.2}", p.iterations_per_cost_hour),
            format!("{:.2}x", p.vs_solo_disagg),
            format!("{:.2}x", p.vs_colocated),
            pct(p.rollout_utilisation),
            pct(p.training_utilisation),
        ]);
    }
    table::align_numbers(&mut t);
    t.to_string()
}

/// A seeded baseline's spread: its ratios swing with the seed.
fn spread(name: &str, rows: &[&ProtoPolicy]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let stats = |f: &dyn Fn(&ProtoPolicy) -> f64| {
        let v: Vec<f64> = rows.iter().map(|p| f(p)).collect();
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(*x), b.max(*x)));
        format!("{:.2}x (min {lo:.2}x, max {hi:.2}x)", v.iter().sum::<f64>() / v.len() as f64)
    };
    format!(
        "{name} over {} seeds: cost ratio solo / it {}, colo / it {}; iterations per cost vs solo {}\n",
        rows.len(),
        stats(&|p| p.cost_ratio_vs_solo_disagg),
        stats(&|p| p.cost_ratio_vs_colocated),
        stats(&|p| p.vs_solo_disagg)
    )
}
