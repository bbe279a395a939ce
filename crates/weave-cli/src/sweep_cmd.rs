//! `weave sweep ...`: rerun the comparison across settings, one table per sweep.

use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::table;
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;
use weave_core::ClusterConfig;
use weave_model::ProfileModel;
use weave_sim::{compare, prepare, with_staleness, Policy, PolicyReport, SimConfig, SloSetting};
use weave_trace::{generate, GenConfig, GenMode, ProfileClass, SizeClass, Trace};

#[derive(clap::Subcommand)]
pub enum SweepCommand {
    /// Allowed slowdown: fixed 1.2 / 1.5 / 2.0 and uniform [1, 2].
    Slo(SweepArgs),
    /// H800 price relative to H20 (H20 stays at its configured price).
    Price(SweepArgs),
    /// Inter-cluster link speed per stream (changes every job's weight-sync time).
    Link(SweepArgs),
    /// Profile-class workloads: balanced, rollout-heavy, training-heavy, mixed.
    Classes(SweepArgs),
    /// Bounded staleness: 0 to 100% of the jobs at k = 1, then at k = 2 (solo-async, the
    /// best solo run of a stale job, is added to the policies).
    Staleness(SweepArgs),
    /// A preemptible rollout tier: spot discounts 0-70% and preemption rates from rare to
    /// hourly, Weave with spot against on-demand Weave and a spot-only baseline.
    Spot(crate::sweep_spot::SpotSweepArgs),
    /// Lending idle rollout blocks across groups: Weave with and without it, per seed.
    Lending(crate::sweep_lending::LendingSweepArgs),
}

#[derive(clap::Args)]
pub struct SweepArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Policies per setting (solo-disagg and colocated are always run for the ratios).
    #[arg(long, value_delimiter = ',', default_value = "weave,solo-disagg,colocated")]
    policy: Vec<String>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Jobs per generated workload (classes sweep).
    #[arg(long, default_value_t = 60)]
    jobs: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    setting: String,
    reports: Vec<PolicyReport>,
}

fn run_setting(setting: String, trace: &Trace, cluster: &ClusterConfig, policies: &[Policy], cfg: &SimConfig) -> Row {
    let profile = ProfileModel::builtin();
    let jobs = prepare(trace, cluster, &profile, cfg.slo, cfg.seed);
    let reports = compare(&jobs, cluster, policies, cfg, &mut |_, _, _| {}).into_iter().map(|r| r.report).collect();
    Row { setting, reports }
}

pub fn run(cmd: SweepCommand) -> Result<()> {
    let (kind, args) = match cmd {
        SweepCommand::Slo(a) => ("slo", a),
        SweepCommand::Price(a) => ("price", a),
        SweepCommand::Link(a) => ("link", a),
        SweepCommand::Classes(a) => ("classes", a),
        SweepCommand::Staleness(a) => ("staleness", a),
        SweepCommand::Spot(a) => return crate::sweep_spot::run(a),
        SweepCommand::Lending(a) => return crate::sweep_lending::run(a),
    };
    let profile = ProfileModel::builtin();
    let base_cluster = load_cluster(args.cluster.as_deref())?;
    let mut policies = Policy::parse_list(&args.policy).map_err(anyhow::Error::msg)?;
    if kind == "staleness" && !policies.contains(&Policy::SoloAsync) {
        policies.push(Policy::SoloAsync);
    }
    let base = SimConfig { seed: args.seed, ..SimConfig::default() };
    let mut rows = Vec::new();
    match kind {
        "slo" => {
            let trace = args.trace.load(&profile)?;
            let settings = [
                ("1.2", SloSetting::Fixed { value: 1.2 }),
                ("1.5", SloSetting::Fixed { value: 1.5 }),
                ("2.0", SloSetting::Fixed { value: 2.0 }),
                ("uniform [1,2]", SloSetting::Uniform { lo: 1.0, hi: 2.0 }),
            ];
            for (name, slo) in settings {
                rows.push(run_setting(
                    name.into(),
                    &trace,
                    &base_cluster,
                    &policies,
                    &SimConfig { slo, ..base.clone() },
                ));
            }
        }
        "price" => {
            let trace = args.trace.load(&profile)?;
            for ratio in [1.5, 2.0, 2.85, 4.0, 6.0] {
                let mut c = base_cluster.clone();
                c.training.price_per_gpu_hour = c.rollout.price_per_gpu_hour * ratio;
                let name = format!("H800 = {ratio}x H20 (${:.2}/GPU-h)", c.training.price_per_gpu_hour);
                rows.push(run_setting(name, &trace, &c, &policies, &base));
            }
        }
        "link" => {
            let trace = args.trace.load(&profile)?;
            for gbps in [5.0, 10.0, 20.0, 50.0, 100.0] {
                let mut c = base_cluster.clone();
                c.network.inter_cluster_gbps_per_stream = gbps;
                rows.push(run_setting(format!("{gbps} Gb/s per stream"), &trace, &c, &policies, &base));
            }
        }
        "staleness" => {
            let trace = args.trace.load(&profile)?;
            for k in [1, 2] {
                for share in [0.0, 0.25, 0.5, 0.75, 1.0] {
                    if k > 1 && share == 0.0 {
                        continue; // the same on-policy run as k = 1's
                    }
                    let stale = with_staleness(&trace, share, k, args.seed);
                    let name = format!("{:.0}% of jobs at k = {k}", share * 100.0);
                    rows.push(run_setting(name, &stale, &base_cluster, &policies, &base));
                }
            }
        }
        _ => {
            let classes = [
                ("balanced", ProfileClass::Balanced),
                ("rollout-heavy", ProfileClass::RolloutHeavy),
                ("training-heavy", ProfileClass::TrainingHeavy),
                ("mixed", ProfileClass::Mixed),
            ];
            for (name, class) in classes {
                let gen = GenConfig {
                    mode: GenMode::Classes { profile: class, size: SizeClass::Mixed },
                    jobs: args.jobs.max(1),
                    seed: args.seed,
                    ..GenConfig::default_workload()
                };
                let trace = generate::generate(&gen, &profile);
                rows.push(run_setting(name.into(), &trace, &base_cluster, &policies, &base));
            }
        }
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    write_output(None, &render(kind, &rows, &policies))
}

fn render(kind: &str, rows: &[Row], policies: &[Policy]) -> String {
    let mut header = vec!["setting".to_string()];
    for p in policies {
        header.push(format!("{p} iters/$1k"));
    }
    let stale = kind == "staleness";
    header.extend(["weave vs solo".into(), "weave vs colo".into()]);
    if stale {
        header.extend(["weave vs solo-async".into(), "weave vs best".into(), "weave versions behind".into()]);
    }
    header.extend(["weave SLO met (jobs)".into(), "weave SLO met (iters)".into()]);
    let refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table::new(&refs);
    for r in rows {
        let mut cells = vec![r.setting.clone()];
        for p in policies {
            let v = r.reports.iter().find(|x| x.policy == p.name()).map(|x| x.iterations_per_k_dollars);
            cells.push(v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()));
        }
        let weave = r.reports.iter().find(|x| x.policy == "weave");
        let fmt = |v: Option<f64>| v.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
        cells.push(fmt(weave.and_then(|w| w.vs_solo_disagg)));
        cells.push(fmt(weave.and_then(|w| w.vs_colocated)));
        if stale {
            cells.push(fmt(weave.and_then(|w| w.vs_solo_async)));
            // Against the best of the baselines a user could run instead.
            let best = weave.and_then(|w| {
                [w.vs_solo_disagg, w.vs_colocated, w.vs_solo_async].into_iter().flatten().reduce(f64::min)
            });
            cells.push(fmt(best));
            let behind = weave.and_then(|w| w.staleness.as_ref()).map(|s| format!("{:.2}", s.mean_versions_behind));
            cells.push(behind.unwrap_or_else(|| "-".into()));
        }
        let pct = |v: Option<f64>| v.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "-".into());
        cells.push(pct(weave.map(|w| w.slo_attainment_jobs)));
        cells.push(pct(weave.map(|w| w.slo_attainment_iterations)));
        t.add_row(cells);
    }
    table::align_numbers(&mut t);
    format!("sweep: {kind}\n{t}\n")
}
