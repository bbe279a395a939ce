//! `weave sync plan|send|receive|bench`.

use crate::input::{json, load_cluster, write_output};
use crate::table;
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weave_core::{ModelSize, GPUS_PER_NODE};
use weave_model::syncplan::{plan, predict, slow_bytes, verify, Topology};
use weave_model::{sync_bytes, SyncPlanKind};
use weave_sync::{Fault, Manifest, Source, Staging};

#[derive(clap::Subcommand)]
pub enum SyncCommand {
    /// Show the flat and topology-aware plans for a shape and their predicted times.
    Plan {
        #[arg(long, default_value = "7B")]
        model: ModelSize,
        /// The bytes to move, in place of `--model`'s (a real job's parameters).
        #[arg(long)]
        model_bytes: Option<u64>,
        #[arg(long, default_value_t = 8)]
        train_gpus: u32,
        #[arg(long, default_value_t = 8)]
        rollout_gpus: u32,
        /// Rollout GPUs per node (a flat plan sends one copy across the slow link per node).
        #[arg(long, default_value_t = GPUS_PER_NODE)]
        gpus_per_node: u32,
        #[arg(long, value_name = "FILE")]
        cluster: Option<PathBuf>,
        /// Print this plan itself as JSON (its transfers, what a job's sync runs), with its
        /// predicted seconds and their transfer part.
        #[arg(long, value_name = "KIND", value_parser = ["flat", "topology-aware"])]
        emit: Option<String>,
        #[arg(long)]
        json: bool,
    },
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
        SyncCommand::Plan { model, model_bytes, train_gpus, rollout_gpus, gpus_per_node, cluster, emit, json } => {
            let shape = PlanShape { model, model_bytes, train_gpus, rollout_gpus, gpus_per_node };
            match emit {
                Some(kind) => emit_plan(&shape, cluster, &kind),
                None => show_plan(&shape, cluster, json),
            }
        }
        SyncCommand::Send { model_file, model_version, listen, fail_after_bytes, corrupt_after_bytes } => {
            let fault = match (fail_after_bytes, corrupt_after_bytes) {
                (Some(b), _) => Fault::drop_after(b),
                (_, Some(b)) => Fault::corrupt_after(b),
                _ => Fault::default(),
            };
            send(model_file, model_version, &listen, fault)
        }
        SyncCommand::Receive { manifest, me, listen, out, linger_s } => receive(&manifest, me, &listen, &out, linger_s),
        SyncCommand::Bench(args) => weave_bench::sync::run(args),
    }
}

/// What `weave sync plan` plans for.
struct PlanShape {
    model: ModelSize,
    model_bytes: Option<u64>,
    train_gpus: u32,
    rollout_gpus: u32,
    gpus_per_node: u32,
}

impl PlanShape {
    /// The topology on `cluster`'s network and the bytes to move.
    fn topology(&self, cluster: Option<PathBuf>) -> Result<(Topology, u64)> {
        let (n, m) = (self.train_gpus, self.rollout_gpus);
        if n == 0 || m == 0 || self.gpus_per_node == 0 {
            bail!("--train-gpus, --rollout-gpus and --gpus-per-node must be at least 1");
        }
        if self.model_bytes == Some(0) {
            bail!("--model-bytes must be at least 1");
        }
        let cluster = load_cluster(cluster.as_deref())?;
        let bytes = self.model_bytes.unwrap_or_else(|| sync_bytes(self.model).0);
        Ok((Topology::new(&cluster.network, n, m, self.gpus_per_node), bytes))
    }
}

/// One plan as JSON: the plan (what `weave_client.runtime.sync` runs), its predicted seconds and
/// the transfer part of them (without the start-up fitted to the paper's engine).
fn emit_plan(shape: &PlanShape, cluster: Option<PathBuf>, kind: &str) -> Result<()> {
    let (topo, bytes) = shape.topology(cluster)?;
    let kind = if kind == "flat" { SyncPlanKind::Flat } else { SyncPlanKind::TopologyAware };
    let p = plan(kind, bytes, &topo);
    verify(&p).map_err(anyhow::Error::msg)?;
    let out = serde_json::json!({
        "plan": p, "predicted_s": predict(&p, &topo).as_secs_f64(),
        "transfer_predicted_s": weave_model::syncplan::transfer_seconds(&p, &topo),
    });
    write_output(None, &json(&out)?)
}

fn show_plan(shape: &PlanShape, cluster: Option<PathBuf>, as_json: bool) -> Result<()> {
    let (topo, bytes) = shape.topology(cluster)?;
    let (model, n, m) = (shape.model, shape.train_gpus, shape.rollout_gpus);
    let mut rows = Vec::new();
    for kind in [SyncPlanKind::Flat, SyncPlanKind::TopologyAware] {
        let p = plan(kind, bytes, &topo);
        verify(&p).map_err(anyhow::Error::msg)?;
        rows.push(serde_json::json!({
            "plan": kind, "transfers": p.transfers.len(), "slow_link_bytes": slow_bytes(&p),
            "slow_link_copies": slow_bytes(&p) as f64 / bytes as f64, "predicted_s": predict(&p, &topo).as_secs_f64(),
        }));
    }
    if as_json {
        return write_output(None, &json(&rows)?);
    }
    let mut t = table::new(&["plan", "transfers", "slow-link copies", "predicted s"]);
    for r in &rows {
        t.add_row(vec![
            r["plan"].as_str().unwrap_or("").to_string(),
            r["transfers"].to_string(),
            format!("{:.2}", r["slow_link_copies"].as_f64().unwrap_or(0.0)),
            format!("{:.2}", r["predicted_s"].as_f64().unwrap_or(0.0)),
        ]);
    }
    table::align_numbers(&mut t);
    write_output(
        None,
        &format!("{model} ({:.1} GB bf16), {n} training GPUs -> {m} rollout GPUs\n{t}\n", bytes as f64 / 1e9),
    )
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn send(model_file: PathBuf, version: u64, listen: &str, fault: Fault) -> Result<()> {
    if !model_file.exists() {
        bail!("no model file {}", model_file.display());
    }
    runtime()?.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        println!("listening {}", l.local_addr()?);
        weave_sync::serve(l, Source::whole(model_file, version), fault).await.context("serving")
    })
}

fn wait_for_manifest(path: &Path) -> Result<Manifest> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return serde_json::from_str(&text).with_context(|| format!("{}: invalid manifest", path.display()));
        }
        if Instant::now() > deadline {
            bail!("no manifest at {} after 60 s", path.display());
        }
        // Often: the benchmark times receivers from the moment they see it.
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn receive(manifest: &Path, me: u32, listen: &str, out: &Path, linger_s: f64) -> Result<()> {
    runtime()?.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        let addr: SocketAddr = l.local_addr()?;
        println!("listening {addr}");
        let m = tokio::task::spawn_blocking({
            let p = manifest.to_path_buf();
            move || wait_for_manifest(&p)
        })
        .await??;
        let staging = Staging::create(out, m.version, m.plan.model_bytes)?;
        tokio::spawn(weave_sync::serve(l, staging.source(), Fault::default()));
        let t = Instant::now();
        let stats = weave_sync::receive(&m, me, &staging, out).await?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{}",
            serde_json::json!({ "me": me, "seconds": secs, "stats": stats, "published": weave_sync::current(out) })
        );
        tokio::time::sleep(Duration::from_secs_f64(linger_s.max(0.0))).await;
        let _ = std::fs::remove_file(&staging.path);
        Ok(())
    })
}
