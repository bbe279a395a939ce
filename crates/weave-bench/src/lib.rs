//! `weave bench ...`: measurements that are reported, never asserted on timing.

mod abuse;
mod agentic;
mod chaos;
mod diskfull;
mod failover;
mod place;
mod replay;
mod restart;
mod serve;
mod slowbody;
mod soak;
pub mod sync;
mod timing;

use anyhow::{bail, Result};
use serde::Serialize;
use weave_core::{JobSpec, JobType, Pool};
use weave_dispatch::rollout::{alternate_pair, calibrate, MigrationTrigger, RolloutConfig};
use weave_io::{json, write_output};
use weave_model::{named_stream, switch_time, Deployment, ProfileModel, SwitchKind, REFERENCE_BATCH};
use weave_report::table;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Throughput gain of long-tail migration for pairs of jobs alternating rollouts on the
    /// same H20 node(s), from the request-level rollout model.
    Migration(MigrationArgs),
    /// Latency of one admission decision with 100 .. 20,000 jobs already placed.
    Placement(crate::place::PlacementArgs),
    /// Online heuristic vs the exact optimum on many small random instances.
    Optimality(crate::place::OptimalityArgs),
    /// Replay speed per policy on a trace (default: 100,000 generated jobs).
    Replay(crate::replay::ReplayArgs),
    /// Control-plane load: submissions per second and phase-gate round trips on loopback.
    Serve(crate::serve::ServeBenchArgs),
    /// `weave serve` under SIGKILLs and generated hostile requests, every outcome checked.
    Chaos(crate::chaos::ChaosArgs),
    /// `weave serve --etcd` replicas on a local etcd cluster, the active one SIGKILLed under
    /// load again and again: how soon a replica answers, nothing acknowledged lost or doubled.
    Failover(crate::failover::FailoverArgs),
    /// `weave serve` on a small file system filled up and freed round after round: refused
    /// writes never durable, acknowledged ones kept, readiness back without a restart (root).
    DiskFull(crate::diskfull::DiskFullArgs),
    /// Clients trickling request bodies a byte at a time against `weave serve`: its memory
    /// before, during and after, and whether the body deadline cuts every connection.
    SlowBodies(crate::slowbody::SlowBodiesArgs),
    /// One tenant using every endpoint with the largest bodies allowed at the default rate
    /// limit: the server's memory and store, and another tenant's gate latency.
    Abuse(crate::abuse::AbuseArgs),
    /// `weave serve` under steady load for a long time with `/v1/events` polled: its memory.
    Soak(crate::soak::SoakArgs),
    /// The agentic rollout model against RollArt's published figures (SWE iteration split,
    /// trajectory- over batch-level interaction).
    Agentic(crate::agentic::AgenticArgs),
    /// Restart time of `weave serve` (store replay) by records in its store.
    Restart(crate::restart::RestartArgs),
    /// Exact group timing vs the dispatcher it predicts, on many random groups; what the
    /// cyclic order changes against first-come round-robin; timing's speed.
    Timing(crate::timing::TimingArgs),
    /// Holds connections to a server open like slow clients (half a request header each) until
    /// stdin closes; `weave bench serve --slow-connections` runs it as a separate process.
    #[command(hide = true)]
    SlowClients(crate::serve::SlowClientsArgs),
}

#[derive(clap::Args)]
pub struct MigrationArgs {
    /// Trigger: `fraction:<f>` (fraction of responses done) or `fits:<k>` (remaining requests
    /// fit in k workers' batch slots).
    #[arg(long, default_value = "fits:2")]
    trigger: String,
    /// Rollouts per job in each measured sequence.
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// Independent sequences averaged per pair.
    #[arg(long, default_value_t = 5)]
    repeats: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct PairResult {
    pair: String,
    trigger: String,
    without_migration_s: f64,
    with_migration_s: f64,
    throughput_gain: f64,
}

fn parse_trigger(s: &str) -> Result<MigrationTrigger> {
    match s.split_once(':') {
        Some(("fraction", f)) => {
            let f: f64 = f.parse()?;
            if !(0.0..1.0).contains(&f) {
                bail!("--trigger fraction must be in [0, 1), got {f}");
            }
            Ok(MigrationTrigger::FractionDone(f))
        }
        Some(("fits", k)) => {
            let k: u32 = k.parse()?;
            if k == 0 {
                bail!("--trigger fits needs at least one worker");
            }
            Ok(MigrationTrigger::FitsInWorkers(k))
        }
        _ => bail!("--trigger: expected fraction:<f> or fits:<k>, got `{s}`"),
    }
}

/// Rollout config of a job type on its default width, calibrated to its profiled rollout.
fn job_rollout(ty: JobType, profile: &ProfileModel, seed: u64) -> RolloutConfig {
    let width = JobSpec::default_width(ty.model);
    let tp = RolloutConfig::tensor_parallel(ty.model);
    let cfg = RolloutConfig::for_job(REFERENCE_BATCH, ty.max_tokens, width, tp);
    let target = profile.predict(Deployment::Disagg, ty, REFERENCE_BATCH, (width, width)).times.rollout.as_secs_f64();
    calibrate(
        &cfg,
        target,
        20,
        &mut named_stream(seed, "migration-calibrate", ty.max_tokens as u64 ^ ty.model.0 as u64),
    )
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Migration(args) => migration(args),
        BenchCommand::Placement(args) => crate::place::placement(args),
        BenchCommand::Optimality(args) => crate::place::optimality(args),
        BenchCommand::Replay(args) => crate::replay::run(args),
        BenchCommand::Serve(args) => crate::serve::run(args),
        BenchCommand::Restart(args) => crate::restart::run(args),
        BenchCommand::Chaos(args) => crate::chaos::run(args),
        BenchCommand::Failover(args) => crate::failover::run(args),
        BenchCommand::DiskFull(args) => crate::diskfull::run(args),
        BenchCommand::Soak(args) => crate::soak::run(args),
        BenchCommand::Abuse(args) => crate::abuse::run(args),
        BenchCommand::Agentic(args) => crate::agentic::run(args),
        BenchCommand::SlowBodies(args) => crate::slowbody::run(args),
        BenchCommand::Timing(args) => crate::timing::run(args),
        BenchCommand::SlowClients(args) => crate::serve::slow_clients(args),
    }
}

fn migration(args: MigrationArgs) -> Result<()> {
    let trigger = parse_trigger(&args.trigger)?;
    if args.rounds == 0 || args.repeats == 0 {
        bail!("--rounds and --repeats must be at least 1");
    }
    let profile = ProfileModel::builtin();
    let pairs = [
        (JobType::new(7, 8), JobType::new(7, 8)),
        (JobType::new(14, 8), JobType::new(14, 8)),
        (JobType::new(7, 8), JobType::new(14, 8)),
    ];
    let mut results = Vec::new();
    for (a, b) in pairs {
        let cfgs = [job_rollout(a, &profile, args.seed), job_rollout(b, &profile, args.seed)];
        let warm = |t: JobType| switch_time(t.model, Pool::Rollout, SwitchKind::Warm).as_secs_f64();
        let switch = [warm(a), warm(b)];
        let measure = |trig: MigrationTrigger| -> f64 {
            (0..args.repeats)
                .map(|r| {
                    // The same draws with and without migration: one stream per repeat.
                    let mut rng = named_stream(args.seed, "migration-bench", r as u64);
                    alternate_pair([&cfgs[0], &cfgs[1]], switch, args.rounds, trig, &mut rng)
                })
                .sum::<f64>()
                / args.repeats as f64
        };
        let without = measure(MigrationTrigger::Never);
        let with = measure(trigger);
        results.push(PairResult {
            pair: format!("{a} + {b}"),
            trigger: args.trigger.clone(),
            without_migration_s: without,
            with_migration_s: with,
            throughput_gain: without / with - 1.0,
        });
    }
    if args.json {
        return write_output(None, &json(&results)?);
    }
    let mut t = table::new(&["pair", "without migration (s)", "with migration (s)", "rollout throughput gain"]);
    for r in &results {
        t.add_row(vec![
            r.pair.clone(),
            format!("{:.0}", r.without_migration_s),
            format!("{:.0}", r.with_migration_s),
            format!("{:+.1}%", r.throughput_gain * 100.0),
        ]);
    }
    table::align_numbers(&mut t);
    let text = format!(
        "{} rollouts per job, alternating on one shared set of H20 workers, mean of {} seeded runs; trigger {}\n{t}\n",
        args.rounds, args.repeats, args.trigger
    );
    write_output(None, &text)
}
