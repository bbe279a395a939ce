use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::trace_cmd::render_summary;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;
use weave_model::ProfileModel;
use weave_sim::{compare, prepare, CapacityMode, Policy, PolicyReport, SimConfig, SloSetting};
use weave_trace::Summary;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    trace: TraceArgs,
    /// Cluster config (TOML); the paper's testbed when omitted.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Policies to compare, comma-separated: weave, weave-disagg-only, weave-no-migration,
    /// weave-no-scaling, weave-cold, solo-disagg, colocated, random, most-idle, or `all`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "weave,weave-disagg-only,solo-disagg,colocated,random,most-idle"
    )]
    policy: Vec<String>,
    /// `elastic`: nodes are rented on demand and paid while held; `fixed`: the configured
    /// pools are all there is and jobs queue.
    #[arg(long, default_value = "elastic", value_parser = ["elastic", "fixed"])]
    capacity: String,
    /// Allowed slowdown: a number for every job (e.g. 1.5), `uniform:LO,HI`, or `trace` (the
    /// trace's value, else uniform in [1, 2]).
    #[arg(long, default_value = "trace")]
    slo: String,
    /// Admission's allowed risk that a job's life slowdown exceeds its SLO under run-time
    /// variation (weave policies).
    #[arg(long, default_value_t = weave_sim::DEFAULT_SLO_EPSILON)]
    slo_risk: f64,
    /// Seed for every random stream of the replay.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also try saturated groups at admission (slower decisions, cheaper placements).
    #[arg(long)]
    try_saturated: bool,
    /// Weave lends idle rollout blocks to other groups' rollouts (see `weave sweep lending`).
    #[arg(long)]
    lending: bool,
    /// Adds an environment pool of this many CPU nodes (64 cores, 256 GiB, $0.05 per
    /// vCPU-hour) to the cluster, for agentic jobs' sandboxes (or give `[env]` in --cluster).
    #[arg(long, value_name = "N")]
    env_nodes: Option<u32>,
    /// Write the per-phase event log of every policy (JSON Lines) to FILE.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// `faithful` (default): our full model. `prototype`: the research prototype's
    /// simplifications (fixed lifetimes, analytic baselines, FIFO group simulation, no switch
    /// or sync costs, a group cap: `--max-group-size`), for number-for-number comparison; its
    /// Weave is the paper's disaggregated-only one.
    #[arg(long, default_value = "faithful", value_parser = ["faithful", "prototype"])]
    model: String,
    /// Prototype mode: the group cap (the prototype's experiments use 5 and 3).
    #[arg(long, default_value_t = 5)]
    max_group_size: usize,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Include every job's outcome in --json output.
    #[arg(long)]
    per_job: bool,
    /// Write a self-contained HTML report (charts and a phase timeline) to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Timeline window for --report, START,END in hours (default: the first two hours).
    #[arg(long)]
    window: Option<String>,
    /// Policy whose phase timeline --report draws.
    #[arg(long, default_value = "weave")]
    timeline_policy: String,
}

pub fn parse_slo(s: &str) -> Result<SloSetting> {
    let check = |v: f64| -> Result<f64> {
        if v.is_finite() && v >= 1.0 {
            Ok(v)
        } else {
            bail!("--slo: an allowed slowdown must be a number >= 1, got {v}")
        }
    };
    if s == "trace" {
        return Ok(SloSetting::default());
    }
    if let Some(range) = s.strip_prefix("uniform:") {
        let (lo, hi) = range.split_once(',').context("--slo uniform:LO,HI")?;
        let (lo, hi) = (check(lo.trim().parse()?)?, check(hi.trim().parse()?)?);
        if hi < lo {
            bail!("--slo uniform:LO,HI needs LO <= HI");
        }
        return Ok(SloSetting::Uniform { lo, hi });
    }
    let v: f64 = s.parse().with_context(|| format!("--slo: expected a number, uniform:LO,HI or trace, got `{s}`"))?;
    Ok(SloSetting::Fixed { value: check(v)? })
}

pub fn slo_risk(v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 && v <= 0.5 {
        Ok(v)
    } else {
        bail!("--slo-risk: an allowed risk must be in (0, 0.5], got {v}")
    }
}

/// Prototype mode runs Weave and the analytic baselines always; `random` and `most-idle`
/// add the prototype's own baselines (over 10 seeds); other names have no prototype version.
fn parse_prototype_policies(names: &[String]) -> Result<Vec<weave_sim::prototype::ProtoPolicyKind>> {
    use weave_sim::prototype::ProtoPolicyKind as K;
    let mut out = Vec::new();
    for n in names.iter().map(|n| n.trim()) {
        let k = match n {
            "all" => {
                out = vec![K::Random, K::MostIdle];
                continue;
            }
            "random" => K::Random,
            "most-idle" => K::MostIdle,
            "weave" | "weave-disagg-only" | "solo-disagg" | "colocated" => continue,
            other => bail!("--policy `{other}` has no prototype version (prototype mode runs weave, solo-disagg, colocated, random and most-idle)"),
        };
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct Output<'a> {
    workload: &'a Summary,
    seed: u64,
    capacity: &'a str,
    note: &'a str,
    policies: Vec<&'a PolicyReport>,
    /// With LoRA jobs: the cheapest any scheduler could run them within their SLOs.
    #[serde(skip_serializing_if = "Option::is_none")]
    lora_floor: Option<weave_sim::lora::CostFloor>,
}

const NOTE: &str = "long-tail migration on shared rollout nodes uses the request-level model's release point and straggler slowdown per job type (see `weave bench migration`)";

pub fn run(args: Args) -> Result<()> {
    let profile = ProfileModel::builtin();
    let mut cluster = load_cluster(args.cluster.as_deref())?;
    if let Some(n) = args.env_nodes {
        let env = weave_core::agentic::EnvPoolConfig::of_nodes(n);
        env.validate().context("--env-nodes")?;
        cluster.env = Some(env);
    }
    let trace = args.trace.load(&profile)?;
    crate::input::check_environment(&trace, &cluster)?;
    if args.model == "prototype" {
        crate::input::on_policy_only(&trace, "prototype mode")?;
        let slo = parse_slo(&args.slo)?;
        let baselines = parse_prototype_policies(&args.policy)?;
        let opts = crate::prototype_cmd::Options {
            seed: args.seed,
            slo,
            baselines,
            max_group_size: args.max_group_size,
            json: args.json,
        };
        return crate::prototype_cmd::run(&opts, &trace, &profile);
    }
    let named = Policy::parse_list(&args.policy).map_err(anyhow::Error::msg)?;
    let policies = Policy::with_baselines_for(named, &trace.jobs);
    let cfg = SimConfig {
        seed: args.seed,
        capacity: if args.capacity == "fixed" { CapacityMode::Fixed } else { CapacityMode::Elastic },
        slo: parse_slo(&args.slo)?,
        events: args.events.is_some(),
        skip_saturated: !args.try_saturated,
        slo_epsilon: slo_risk(args.slo_risk)?,
        lending: args.lending,
        ..SimConfig::default()
    };
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let show_progress = !args.json && std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last = Instant::now();
    let replays = compare(&jobs, &cluster, &policies, &cfg, &mut |p, done, total| {
        if show_progress && (done == total || last.elapsed().as_millis() > 200) {
            last = Instant::now();
            eprint!("\r{p:<20} {done}/{total} jobs");
            if done == total {
                eprint!("\r{:<50}\r", "");
            }
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(path) = &args.events {
        let mut text = String::new();
        for (r, policy) in replays.iter().zip(&policies) {
            for e in &r.events {
                let mut v = serde_json::to_value(e)?;
                v["policy"] = serde_json::Value::String(policy.name().to_string());
                text.push_str(&serde_json::to_string(&v)?);
                text.push('\n');
            }
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let summary = Summary::of(&trace, &profile);
    if let Some(path) = &args.report {
        write_report(path, &args, &trace, &cluster, &cfg, &jobs, &replays, &summary)?;
    }
    let mut owned: Vec<PolicyReport> = replays.iter().map(|r| r.report.clone()).collect();
    if !args.per_job {
        owned.iter_mut().for_each(|r| r.per_job.clear());
    }
    let reports: Vec<&PolicyReport> = owned.iter().collect();
    let lora_floor =
        jobs.iter().any(|j| j.spec.lora.is_some()).then(|| weave_sim::lora::cost_floor(&jobs, &cluster, &profile));
    if args.json {
        let out = Output {
            workload: &summary,
            seed: args.seed,
            capacity: &args.capacity,
            note: NOTE,
            policies: reports,
            lora_floor,
        };
        return write_output(None, &json(&out)?);
    }
    let mut text = render_summary(&summary);
    text.push_str(&format!(
        "replayed {} policies in {elapsed:.2} s (seed {}, {} capacity)\n",
        reports.len(),
        args.seed,
        args.capacity
    ));
    text.push_str(&weave_report::text::render(&reports));
    text.push_str(&lora_lines(&reports, lora_floor));
    text.push_str(&format!("note: {NOTE}.\n"));
    write_output(None, &text)
}

/// What a run with LoRA jobs adds to the text: the cost floor, and the jobs that joined running
/// packs under each policy that grows packs.
fn lora_lines(reports: &[&PolicyReport], floor: Option<weave_sim::lora::CostFloor>) -> String {
    let mut text = String::new();
    if let Some(f) = floor {
        text.push_str(&format!(
            "LoRA floor: ${:.0} ({:.1} iterations per $1k) if every GPU-second were busy and each LoRA job shared its base's engine with as many partners like it as its SLO allows (${:.0} without sharing); see docs/experiments/lora.md.\n",
            f.dollars, f.iterations_per_k_dollars, f.unshared_dollars
        ));
    }
    for r in reports.iter().filter_map(|r| Some((&r.policy, r.lora_pack_joins?))) {
        text.push_str(&format!("{}: {} LoRA jobs joined a running pack of their base.\n", r.0, r.1));
    }
    text
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    path: &std::path::Path,
    args: &Args,
    trace: &weave_trace::Trace,
    cluster: &weave_core::ClusterConfig,
    cfg: &SimConfig,
    jobs: &[weave_sim::SimJob],
    replays: &[weave_sim::Replay],
    summary: &Summary,
) -> Result<()> {
    let window = args.window.as_deref().map(crate::report_cmd::parse_window).transpose()?;
    let policy: Policy = args.timeline_policy.parse().map_err(anyhow::Error::msg)?;
    // The replay is deterministic: run the timeline policy once more with its event log on,
    // rather than keeping every policy's log in memory.
    let logged = weave_sim::replay(jobs, cluster, policy, &SimConfig { events: true, ..cfg.clone() }, &mut |_, _| {});
    let timeline = (policy != Policy::Colocated).then(|| {
        weave_report::Timeline::from_events(
            policy.name(),
            &logged.events,
            window,
            crate::report_cmd::MAX_TIMELINE_GROUPS,
        )
        .with_names(jobs.iter().map(|j| (j.spec.id.0, j.spec.name.clone())))
    });
    let reports: Vec<PolicyReport> = replays.iter().map(|r| r.report.clone()).collect();
    let notes = vec![
        format!(
            "Workload: {} ({} jobs, mean solo lifetime {:.1} h).",
            trace.source, summary.jobs, summary.mean_lifetime_h
        ),
        format!("Seed {}, {} capacity. {NOTE}.", args.seed, args.capacity),
    ];
    let html = crate::report_cmd::build("Weave replay report".into(), notes, &reports, cluster, timeline);
    std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))
}
