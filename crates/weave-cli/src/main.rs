//! `weave`: a thin command-line front end over Weave's library crates (`weave bench` is
//! `weave-bench`; reading inputs and printing tables is `weave-io`).

mod client_cmd;
mod config_cmd;
mod experiment_cmd;
mod group_cmd;
mod prototype_cmd;
mod report_cmd;
mod serve_cmd;
mod simulate_cmd;
mod store_cmd;
mod sweep_cmd;
mod sweep_lending;
mod sweep_spot;
mod sync_cmd;
mod tenants_cmd;
mod trace_cmd;
mod waterfall_cmd;

use clap::{Parser, Subcommand};
// The command modules read inputs and print through `weave-io`, as `weave bench` does.
use weave_io as input;
use weave_report::table;

/// Weave: co-scheduling for disaggregated RL post-training.
///
/// Packs RL jobs into co-execution groups so one job's rollout fills another's idle
/// training bubble (and vice versa), keeping every job's state warm in host DRAM.
#[derive(Parser)]
#[command(name = "weave", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a job trace (the built-in default workload unless --trace is given).
    Simulate(simulate_cmd::Args),
    /// Generate, inspect and convert job traces.
    #[command(subcommand)]
    Trace(trace_cmd::TraceCommand),
    /// Cluster configuration.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Co-execution groups: analyze a candidate group offline, or list a server's groups.
    #[command(subcommand)]
    Group(group_cmd::GroupCommand),
    /// Run the control plane: admit jobs, place them, gate their phases (HTTP/JSON).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Jobs on a running `weave serve`.
    #[command(subcommand)]
    Job(client_cmd::JobCommand),
    /// Weight synchronisation: plans, the transfer engine, the namespace experiment.
    #[command(subcommand)]
    Sync(sync_cmd::SyncCommand),
    /// Tokens for the tenants file.
    #[command(subcommand)]
    Token(serve_cmd::TokenCommand),
    /// Rerun the comparison across SLOs, prices, link speeds or workload classes.
    #[command(subcommand)]
    Sweep(sweep_cmd::SweepCommand),
    /// Experiments beyond a single replay.
    #[command(subcommand)]
    Experiment(experiment_cmd::ExperimentCommand),
    /// Render an HTML report from a saved event log (and optionally results).
    Report(report_cmd::ReportArgs),
    /// A server's durable store: verify it, recover from damage.
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Benchmarks (reported numbers, not pass/fail).
    #[command(subcommand)]
    Bench(weave_bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate_cmd::run(args),
        Command::Trace(cmd) => trace_cmd::run(cmd),
        Command::Config(cmd) => config_cmd::run(cmd),
        Command::Group(cmd) => group_cmd::run(cmd),
        Command::Serve(args) => serve_cmd::serve(*args),
        Command::Job(cmd) => client_cmd::job(cmd),
        Command::Token(cmd) => serve_cmd::token(cmd),
        Command::Sync(cmd) => sync_cmd::run(cmd),
        Command::Bench(cmd) => weave_bench::run(cmd),
        Command::Sweep(cmd) => sweep_cmd::run(cmd),
        Command::Report(args) => report_cmd::run(args),
        Command::Experiment(cmd) => experiment_cmd::run(cmd),
        Command::Store(cmd) => store_cmd::run(cmd),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
