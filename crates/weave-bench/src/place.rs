//! `weave bench placement` and `weave bench optimality`.

use anyhow::{bail, Result};
use rand::Rng;
use serde::Serialize;
use std::time::Instant;
use weave_core::{ClusterConfig, JobId};
use weave_io::{json, write_output};
use weave_model::{named_stream, ProfileModel};
use weave_place::optimal::{optimal, Prices, MAX_JOBS};
use weave_place::{PlaceJob, PlacePolicy, Placer, PlacerConfig};
use weave_report::table;
use weave_trace::{generate, Arrivals, GenConfig, GenMode, ProfileClass, SizeClass};

/// Synthetic jobs: the production mix, SLO uniform in [1, 2].
fn synthetic_jobs(n: usize, seed: u64, mode: GenMode, slo: SloSetting, cluster: &ClusterConfig) -> Vec<PlaceJob> {
    let profile = ProfileModel::builtin();
    let cfg = GenConfig { mode, jobs: n, arrivals: Arrivals::Batch, seed, lifetime_median_h: 16.0 };
    let trace = generate::generate(&cfg, &profile);
    trace
        .jobs
        .iter()
        .map(|j| {
            let s = match slo {
                SloSetting::Fixed(v) => v,
                SloSetting::Uniform => named_stream(seed, "bench-slo", j.id.0 as u64).random_range(1.0..=2.0),
            };
            PlaceJob::from_spec(j, s, &profile, cluster)
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
pub enum SloSetting {
    Fixed(f64),
    Uniform,
}

impl std::fmt::Display for SloSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SloSetting::Fixed(v) => write!(f, "{v}"),
            SloSetting::Uniform => f.write_str("U[1,2]"),
        }
    }
}

#[derive(clap::Args)]
pub struct PlacementArgs {
    /// Also try saturated groups (event-level timing) instead of skipping them.
    #[arg(long)]
    try_saturated: bool,
    /// `weave` (co-located mode, pairing on arrival, admission under sampled variation) or
    /// `weave-disagg-only` (the paper's rules, deterministic estimates).
    #[arg(long, default_value = "weave", value_parser = ["weave", "weave-disagg-only"])]
    policy: String,
    /// Concurrent jobs already placed, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,500,2000,20000")]
    sizes: Vec<usize>,
    /// Probe decisions timed per size (each admitted, then removed again).
    #[arg(long, default_value_t = 200)]
    probes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

/// One arrival as the replay and the server handle it: admission's best option, and with the
/// full policy the pairing check against every job that runs alone (no cooldowns in the
/// bench); a pairing is carried out (the new job opens a group, the partner moves in).
/// Returns the partner that moved.
fn arrive(placer: &mut Placer, job: PlaceJob, full: bool) -> Result<Option<PlaceJob>> {
    use weave_place::consolidate::{self, Churn, ChurnLimits};
    use weave_place::Target;
    if !full {
        placer.admit(job)?;
        return Ok(None);
    }
    let best = placer.best_option(&job)?;
    let mut churn = Churn::new(ChurnLimits { cooldown: weave_core::Micros(0), max_moves_per_hour: u32::MAX });
    let movable = consolidate::movable(placer, &mut churn, weave_core::Micros(0), |_| {
        Some(consolidate::Progress { remaining: 400, slack: None })
    });
    let Some(pair) = consolidate::pair_for_arrival(placer, &job, best, &movable) else {
        placer.admit(job)?;
        return Ok(None);
    };
    let d = placer.admit_to(job, Target::Isolated)?;
    let g = placer.group_of(pair.partner).and_then(|g| placer.group(g)).expect("a partner is placed");
    let partner = g.members.iter().find(|m| m.job.id == pair.partner).expect("member").job.clone();
    placer.depart(pair.partner)?;
    let target = Target::Group { group: d.group, block: pair.direct.then_some(0) };
    if placer.admit_to(partner.clone(), target).is_err() {
        placer.admit(partner.clone())?;
    }
    Ok(Some(partner))
}

#[derive(Serialize)]
struct PlacementRow {
    jobs: usize,
    groups: usize,
    unsaturated_groups: usize,
    build_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    /// A job no group can take (SLO 1.0): every unsaturated group is tried.
    full_scan_us: f64,
}

pub fn placement(args: PlacementArgs) -> Result<()> {
    if args.sizes.is_empty() || args.probes == 0 {
        bail!("--sizes and --probes must not be empty or zero");
    }
    let cluster = ClusterConfig::default();
    let full = args.policy == "weave";
    let mut rows = Vec::new();
    for &n in &args.sizes {
        let mut jobs = synthetic_jobs(n + args.probes, args.seed, GenMode::Production, SloSetting::Uniform, &cluster);
        if full {
            let runtime = weave_model::RuntimeModel::default();
            let z = weave_place::Variation::z_for(weave_place::DEFAULT_SLO_EPSILON);
            for j in &mut jobs {
                let samples =
                    weave_sim::workload::variation_samples(&runtime, args.seed, j.id, weave_sim::VARIATION_SAMPLES);
                j.variation = weave_place::Variation { samples, iterations: 400, z };
            }
        }
        let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, args.seed);
        cfg.skip_saturated = !args.try_saturated;
        cfg.colocate = full;
        let mut placer = Placer::new(cfg);
        let start = Instant::now();
        for j in &jobs[..n] {
            arrive(&mut placer, j.clone(), full)?;
        }
        let build_s = start.elapsed().as_secs_f64();
        let mut times = Vec::with_capacity(args.probes);
        for j in &jobs[n..] {
            let t = Instant::now();
            let moved = arrive(&mut placer, j.clone(), full)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            placer.depart(j.id)?;
            // Put a moved partner back where it was (alone, as admission places it).
            if let Some(p) = moved {
                placer.depart(p.id)?;
                placer.admit(p)?;
            }
        }
        let mut strict = jobs[n].clone();
        strict.id = JobId(u32::MAX);
        strict.slo = 1.0;
        let t = Instant::now();
        arrive(&mut placer, strict, full)?;
        let full_scan_us = t.elapsed().as_secs_f64() * 1e6;
        times.sort_by(f64::total_cmp);
        rows.push(PlacementRow {
            jobs: n,
            groups: placer.groups().count(),
            unsaturated_groups: placer.groups().filter(|g| !g.prediction.saturated).count(),
            build_s,
            mean_us: times.iter().sum::<f64>() / times.len() as f64,
            p50_us: times[times.len() / 2],
            p99_us: times[(times.len() * 99 / 100).min(times.len() - 1)],
            full_scan_us,
        });
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    let mut t =
        table::new(&["placed jobs", "groups", "unsaturated", "mean µs", "p50 µs", "p99 µs", "full scan µs", "build s"]);
    for r in &rows {
        t.add_row(vec![
            r.jobs.to_string(),
            r.groups.to_string(),
            r.unsaturated_groups.to_string(),
            format!("{:.1}", r.mean_us),
            format!("{:.1}", r.p50_us),
            format!("{:.1}", r.p99_us),
            format!("{:.1}", r.full_scan_us),
            format!("{:.2}", r.build_s),
        ]);
    }
    table::align_numbers(&mut t);
    let text = format!("one admission decision ({} policy, wall clock on one core, release build)\n{t}\n", args.policy);
    write_output(None, &text)
}

#[derive(clap::Args)]
pub struct OptimalityArgs {
    /// Also try saturated groups (event-level timing) instead of skipping them.
    #[arg(long)]
    try_saturated: bool,
    /// Jobs per instance.
    #[arg(long, default_value_t = 8)]
    jobs: usize,
    /// Instances per (class, SLO) cell.
    #[arg(long, default_value_t = 30)]
    instances: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct OptimalityRow {
    class: String,
    slo: String,
    instances: usize,
    mean_ratio: f64,
    worst_ratio: f64,
    optimal_found: usize,
    heuristic_slo_feasible: usize,
}

pub fn optimality(args: OptimalityArgs) -> Result<()> {
    if args.jobs == 0 || args.jobs > MAX_JOBS || args.instances == 0 {
        bail!("--jobs must be 1..={MAX_JOBS} and --instances at least 1");
    }
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, args.seed);
    cfg.skip_saturated = !args.try_saturated;
    let prices = Prices { rollout_node: cfg.rollout_node_price, train_node: cfg.train_node_price };
    let classes = [
        ("balanced", ProfileClass::Balanced),
        ("rollout-heavy", ProfileClass::RolloutHeavy),
        ("training-heavy", ProfileClass::TrainingHeavy),
        ("mixed", ProfileClass::Mixed),
    ];
    let slos = [SloSetting::Fixed(1.2), SloSetting::Fixed(1.5), SloSetting::Fixed(2.0), SloSetting::Uniform];
    let mut rows = Vec::new();
    for (name, class) in classes {
        for slo in slos {
            let mut ratios = Vec::new();
            let mut feasible = 0;
            for i in 0..args.instances {
                let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
                let mode = GenMode::Classes { profile: class, size: SizeClass::Mixed };
                let jobs = synthetic_jobs(args.jobs, seed, mode, slo, &cluster);
                let mut placer = Placer::new(cfg.clone());
                for j in &jobs {
                    placer.admit(j.clone())?;
                }
                let ok = placer.groups().all(|g| {
                    g.members
                        .iter()
                        .enumerate()
                        .all(|(k, m)| g.prediction.coexec[k].0 as f64 <= m.job.slo * m.job.solo().0 as f64 + 1.0)
                });
                feasible += ok as usize;
                if let Some(plan) = optimal(&jobs, prices, &cfg.residency) {
                    ratios.push(placer.hourly_cost().0 as f64 / plan.cost_per_hour.0 as f64);
                }
            }
            rows.push(OptimalityRow {
                class: name.to_string(),
                slo: slo.to_string(),
                instances: args.instances,
                mean_ratio: ratios.iter().sum::<f64>() / ratios.len().max(1) as f64,
                worst_ratio: ratios.iter().copied().fold(0.0, f64::max),
                optimal_found: ratios.len(),
                heuristic_slo_feasible: feasible,
            });
        }
    }
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    let mut t =
        table::new(&["class", "SLO", "instances", "cost heuristic/optimal: mean", "worst", "heuristic SLO-feasible"]);
    for r in &rows {
        t.add_row(vec![
            r.class.clone(),
            r.slo.clone(),
            r.instances.to_string(),
            format!("{:.3}", r.mean_ratio),
            format!("{:.3}", r.worst_ratio),
            format!("{}/{}", r.heuristic_slo_feasible, r.instances),
        ]);
    }
    table::align_numbers(&mut t);
    let text = format!(
        "{} jobs per instance, all present at once, placed in arrival order vs the exact optimum\n{t}\n",
        args.jobs
    );
    write_output(None, &text)
}
