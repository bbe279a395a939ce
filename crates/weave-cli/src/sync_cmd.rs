//! `weave sync plan|send|receive|bench`.

use crate::input::{json, load_cluster, write_output};
use crate::table;
use anyhow::{bail, Result};
use std::path::PathBuf;
use weave_core::{ModelSize, GPUS_PER_NODE};
use weave_model::syncplan::{checked_plan, transfer_seconds, Topology};
use weave_model::{sync_bytes, SyncPlanKind};
use weave_sync::Fault;

#[derive(clap::Subcommand)]
pub enum SyncCommand {
    /// Show the flat and topology-aware plans for a shape and their predicted times.
    Plan(PlanArgs),
    /// Serve a model file's byte ranges (a training GPU's side of a transfer).
    Send {
        #[arg(long)]
        model_file: PathBuf,
        /// The model version served.
        #[arg(long, default_value_t = 1)]
        model_version: u64,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Fault injection: drop one connection after this many bytes.
        #[arg(long)]
        fail_after_bytes: Option<u64>,
        /// Fault injection: send one chunk with a flipped byte after this many bytes.
        #[arg(long, conflicts_with = "fail_after_bytes")]
        corrupt_after_bytes: Option<u64>,
    },
    /// Receive this rollout GPU's part of a plan and publish the version.
    Receive {
        /// Manifest JSON; waited for until it appears.
        #[arg(long)]
        manifest: PathBuf,
        #[arg(long)]
        me: u32,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long)]
        out: PathBuf,
        /// Keep serving peers this long after publishing.
        #[arg(long, default_value_t = 3.0)]
        linger_s: f64,
    },
    /// Measured vs predicted sync time in network namespaces with rate-limited links (root).
    Bench(weave_bench::sync::BenchArgs),
}

pub fn run(cmd: SyncCommand) -> Result<()> {
    match cmd {
        SyncCommand::Plan(args) => match &args.emit {
            Some(kind) => emit_plan(&args, kind),
            None => show_plan(&args),
        },
        SyncCommand::Send { model_file, model_version, listen, fail_after_bytes, corrupt_after_bytes } => {
            let fault = match (fail_after_bytes, corrupt_after_bytes) {
                (Some(b), _) => Fault::drop_after(b),
                (_, Some(b)) => Fault::corrupt_after(b),
                _ => Fault::default(),
            };
            Ok(weave_sync::process::run_sender(model_file, model_version, &listen, fault)?)
        }
        SyncCommand::Receive { manifest, me, listen, out, linger_s } => {
            Ok(weave_sync::process::run_receiver(&manifest, me, &listen, &out, linger_s)?)
        }
        SyncCommand::Bench(args) => weave_bench::sync::run(args),
    }
}

/// What `weave sync plan` plans for, and how it shows it.
#[derive(clap::Args)]
pub struct PlanArgs {
    #[arg(long, default_value = "7B")]
    pub model: ModelSize,
    /// The bytes to move, in place of `--model`'s (a real job's parameters).
    #[arg(long)]
    pub model_bytes: Option<u64>,
    #[arg(long, default_value_t = 8)]
    pub train_gpus: u32,
    #[arg(long, default_value_t = 8)]
    pub rollout_gpus: u32,
    /// Rollout GPUs per node (a flat plan sends one copy across the slow link per node).
    #[arg(long, default_value_t = GPUS_PER_NODE)]
    pub gpus_per_node: u32,
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// Print this plan itself as JSON (its transfers, what a job's sync runs), with its
    /// predicted seconds and their transfer part.
    #[arg(long, value_name = "KIND", value_parser = ["flat", "topology-aware"])]
    pub emit: Option<String>,
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    /// The topology on `cluster`'s network and the bytes to move.
    fn topology(&self) -> Result<(Topology, u64)> {
        let (n, m) = (self.train_gpus, self.rollout_gpus);
        if n == 0 || m == 0 || self.gpus_per_node == 0 {
            bail!("--train-gpus, --rollout-gpus and --gpus-per-node must be at least 1");
        }
        if self.model_bytes == Some(0) {
            bail!("--model-bytes must be at least 1");
        }
        let cluster = load_cluster(self.cluster.as_deref())?;
        let bytes = self.model_bytes.unwrap_or_else(|| sync_bytes(self.model).0);
        Ok((Topology::new(&cluster.network, n, m, self.gpus_per_node), bytes))
    }
}

/// One plan as JSON: the plan (what `weave_client.runtime.sync` runs), its predicted seconds and
/// the transfer part of them (without the start-up fitted to the paper's engine).
fn emit_plan(args: &PlanArgs, kind: &str) -> Result<()> {
    let (topo, bytes) = args.topology()?;
    let kind = if kind == "flat" { SyncPlanKind::Flat } else { SyncPlanKind::TopologyAware };
    let (p, summary) = checked_plan(kind, bytes, &topo).map_err(anyhow::Error::msg)?;
    let out = serde_json::json!({
        "plan": p, "predicted_s": summary.predicted_s, "transfer_predicted_s": transfer_seconds(&p, &topo),
    });
    write_output(None, &json(&out)?)
}

fn show_plan(args: &PlanArgs) -> Result<()> {
    let (topo, bytes) = args.topology()?;
    let (model, n, m) = (args.model, args.train_gpus, args.rollout_gpus);
    let rows = [SyncPlanKind::Flat, SyncPlanKind::TopologyAware]
        .into_iter()
        .map(|kind| checked_plan(kind, bytes, &topo).map(|(_, s)| s).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if args.json {
        return write_output(None, &json(&rows)?);
    }
    let mut t = table::new(&["plan", "transfers", "slow-link copies", "predicted s"]);
    for r in &rows {
        let kind = serde_json::to_value(r.plan)?;
        let copies = format!("{:.2}", r.slow_link_copies);
        t.add_row(vec![
            kind.as_str().unwrap_or("").to_string(),
            r.transfers.to_string(),
            copies,
            format!("{:.2}", r.predicted_s),
        ]);
    }
    table::align_numbers(&mut t);
    write_output(
        None,
        &format!("{model} ({:.1} GB bf16), {n} training GPUs -> {m} rollout GPUs\n{t}\n", bytes as f64 / 1e9),
    )
}
