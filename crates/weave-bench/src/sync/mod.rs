//! `weave sync bench`: measured vs predicted sync time, both plans, between processes on an
//! emulated mini cluster (`net`: a network namespace per GPU, the slow inter-pool link and
//! the rollout pool's fast fabric shaped per port with `tc tbf`). Needs root and `ip`/`tc`;
//! without them it says so and skips.

mod net;

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;
use weave_model::syncplan::{plan, predict, transfer_seconds, Topology};
use weave_model::SyncPlanKind;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model size, MB.
    #[arg(long, default_value_t = 128)]
    size_mb: u64,
    /// Training GPUs (sender processes, one slow-link NIC each).
    #[arg(long, default_value_t = 4)]
    train: u32,
    /// Rollout GPUs (receiver processes, one node: a slow-link NIC and a fabric port each).
    #[arg(long, default_value_t = 4)]
    rollout: u32,
    /// Rate of one NIC on the slow link, Mbit/s.
    #[arg(long, default_value_t = 400)]
    slow_mbit: u64,
    /// Rate of one GPU's port on the rollout fabric, Mbit/s.
    #[arg(long, default_value_t = 4000)]
    fast_mbit: u64,
    /// Runs per plan (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Also run both plans with torch.distributed (gloo) through this Python, which must have
    /// `weave_client` with its `torch` extra installed.
    #[arg(long)]
    gloo_python: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// What executes the plan.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    /// `weave sync send` / `weave sync receive`.
    Weave,
    /// `python -m weave_client.runtime.plan_sync`.
    Gloo,
}

/// Child processes, killed on drop.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `program <args>` in namespace `ns`; with `listening`, reads its address from its
/// first line (`listening ADDR`). The channel yields the rest of its output when it ends.
fn spawn_in(
    procs: &mut Procs,
    ns: &str,
    program: &[&str],
    args: &[&str],
    listening: bool,
) -> Result<(String, Receiver<String>)> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start a process in the namespace")?;
    let mut out = BufReader::new(child.stdout.take().context("no stdout")?);
    procs.0.push(child);
    let mut addr = String::new();
    if listening {
        let mut line = String::new();
        out.read_line(&mut line)?;
        addr =
            line.trim().strip_prefix("listening ").with_context(|| format!("unexpected first line `{line}`"))?.into();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = String::new();
        while out.read_line(&mut rest).unwrap_or(0) > 0 {}
        let _ = tx.send(rest);
    });
    Ok((addr, rx))
}

fn model_file(dir: &Path, bytes: u64) -> Result<PathBuf> {
    let p = dir.join("model.bin");
    let mut data = vec![0u8; bytes as usize];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = (x >> (8 * i)) as u8;
        }
    }
    std::fs::write(&p, data)?;
    Ok(p)
}

/// One run of one plan: the slowest receiver's seconds, and the slowest receiver's rate
/// across the slow link (stage-1 bytes over stage-1 seconds), bytes/s.
struct Measured {
    seconds: f64,
    cross_link_bps: f64,
}

fn write_manifest(m: &weave_sync::Manifest, run_dir: &Path) -> Result<PathBuf> {
    let path = run_dir.join("manifest.json");
    let tmp = run_dir.join("manifest.tmp");
    std::fs::write(&tmp, serde_json::to_string(m)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The slowest receiver's seconds and slowest cross-link rate, from their JSON reports.
fn collect(reports: Vec<Receiver<String>>) -> Result<Measured> {
    let mut measured = Measured { seconds: 0.0, cross_link_bps: f64::INFINITY };
    for (j, report) in reports.into_iter().enumerate() {
        let out = report.recv_timeout(Duration::from_secs(600)).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap_or(""))
            .with_context(|| format!("receiver {j} reported nothing: `{out}`"))?;
        measured.seconds = measured.seconds.max(v["seconds"].as_f64().unwrap_or(f64::NAN));
        let (b, s) = (v["stats"]["stage1_bytes"].as_f64().unwrap_or(0.0), v["stats"]["stage1_seconds"].as_f64());
        if let Some(s) = s.filter(|s| b > 0.0 && *s > 0.0) {
            measured.cross_link_bps = measured.cross_link_bps.min(b / s);
        }
    }
    Ok(measured)
}

/// One run of one plan with Weave's engine; every receiver's published copy is checked.
fn run_weave(kind: SyncPlanKind, args: &BenchArgs, run_dir: &Path, model: &Path, topo: &Topology) -> Result<Measured> {
    let bytes = args.size_mb * 1_000_000;
    let mut procs = Procs(Vec::new());
    let exe = std::env::current_exe()?.display().to_string();
    let model_arg = model.display().to_string();
    let mut train_addrs = Vec::new();
    for i in 0..args.train {
        let listen = format!("{}:0", net::train_ip(i));
        let a = ["sync", "send", "--model-file", &model_arg, "--listen", &listen];
        let (addr, _) = spawn_in(&mut procs, &net::train_ns(i), &[&exe], &a, true)?;
        train_addrs.push(addr.parse()?);
    }
    let manifest_arg = run_dir.join("manifest.json").display().to_string();
    let (mut rollout_addrs, mut reports) = (Vec::new(), Vec::new());
    for j in 0..args.rollout {
        let (me, listen, out) =
            (j.to_string(), format!("{}:0", net::rollout_ip(j)), run_dir.join(format!("r{j}")).display().to_string());
        let a = ["sync", "receive", "--manifest", &manifest_arg, "--me", &me, "--listen", &listen, "--out", &out];
        let (addr, report) =
            spawn_in(&mut procs, &net::rollout_ns(j), &[&exe], &[&a[..], &["--linger-s", "2"]].concat(), true)?;
        rollout_addrs.push(addr.parse()?);
        reports.push(report);
    }
    let m = weave_sync::Manifest::build(1, plan(kind, bytes, topo), model, train_addrs, rollout_addrs)?;
    write_manifest(&m, run_dir)?;
    let measured = collect(reports)?;
    let want = weave_sync::sha256_range(model, 0, bytes)?;
    for j in 0..args.rollout {
        let published = run_dir.join(format!("r{j}")).join("v1.bin");
        if weave_sync::sha256_range(&published, 0, bytes)? != want {
            bail!("receiver {j} published a corrupt model");
        }
    }
    Ok(measured)
}

/// One run of one plan with torch.distributed (gloo); each rank checks every piece it gets.
fn run_gloo(
    kind: SyncPlanKind,
    args: &BenchArgs,
    python: &Path,
    run_dir: &Path,
    model: &Path,
    topo: &Topology,
) -> Result<Measured> {
    let bytes = args.size_mb * 1_000_000;
    let m = weave_sync::Manifest::build(1, plan(kind, bytes, topo), model, Vec::new(), Vec::new())?;
    let manifest = write_manifest(&m, run_dir)?.display().to_string();
    let (model_arg, master) = (model.display().to_string(), format!("{}:29500", net::train_ip(0)));
    let py = python.display().to_string();
    let mut procs = Procs(Vec::new());
    let mut reports = Vec::new();
    for (side, count) in [("train", args.train), ("rollout", args.rollout)] {
        for k in 0..count {
            let ns = if side == "train" { net::train_ns(k) } else { net::rollout_ns(k) };
            let ifname = format!("GLOO_SOCKET_IFNAME={}", net::nic(side == "train", k));
            // Quiet: c10d warns on every connection that a namespace has no hostname to look up.
            let program = [
                "env",
                &ifname,
                "TORCH_CPP_LOG_LEVEL=ERROR",
                &py,
                "-W",
                "ignore",
                "-m",
                "weave_client.runtime.plan_sync",
            ];
            let gpu = k.to_string();
            let a =
                ["--manifest", &manifest, "--model", &model_arg, "--side", side, "--gpu", &gpu, "--master", &master];
            let (_, report) = spawn_in(&mut procs, &ns, &program, &a, false)?;
            if side == "rollout" {
                reports.push(report);
            }
        }
    }
    collect(reports)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn can_run() -> std::result::Result<(), String> {
    let root = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let tools = ["ip", "tc"].iter().all(|t| Command::new(t).arg("-V").output().is_ok());
    match (root.unwrap_or(false), tools) {
        (true, true) => Ok(()),
        (root, tools) => {
            Err(format!("the namespace experiment needs root and iproute2 (`ip`, `tc`); root: {root}, tools: {tools}"))
        }
    }
}

struct Row {
    engine: Engine,
    kind: SyncPlanKind,
    measured_s: f64,
    predicted_s: f64,
    transfer_s: f64,
    cross_link_share: f64,
}

pub fn run(args: BenchArgs) -> Result<()> {
    if let Err(why) = can_run() {
        println!("skipped: {why}");
        return Ok(());
    }
    if args.train == 0 || args.rollout == 0 || args.size_mb == 0 || args.runs == 0 {
        bail!("--train, --rollout, --size-mb and --runs must be at least 1");
    }
    let fabric = match net::Fabric::up(args.train, args.rollout, args.slow_mbit, args.fast_mbit) {
        Ok(f) => f,
        Err(e) => {
            println!("skipped: cannot build the namespaces here: {e:#}");
            return Ok(());
        }
    };
    // Received weights land in host memory (tmpfs) where there is one, as the runtime keeps
    // them: on a disk, publishing's fsync of the whole model would be timed as transfer.
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("weave-sync-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let rows = measure_both(&args, &dir);
    drop(fabric);
    let _ = std::fs::remove_dir_all(&dir);
    report(&args, &rows?)
}

fn measure_both(args: &BenchArgs, dir: &Path) -> Result<Vec<Row>> {
    let bytes = args.size_mb * 1_000_000;
    let model = model_file(dir, bytes)?;
    let rate = |mbit: u64| mbit as f64 * 1e6 / 8.0 * weave_model::sync::STREAM_EFFICIENCY;
    let topo = Topology {
        train_gpus: args.train,
        rollout_gpus: args.rollout,
        gpus_per_node: args.rollout,
        slow_stream_bps: rate(args.slow_mbit),
        slow_aggregate_bps: f64::INFINITY,
        fast_bps: rate(args.fast_mbit),
        latency: weave_core::Micros(100),
    };
    let mut rows = Vec::new();
    let engines = [Some(Engine::Weave), args.gloo_python.as_ref().map(|_| Engine::Gloo)];
    for (engine, kind) in
        engines.into_iter().flatten().flat_map(|e| [(e, SyncPlanKind::Flat), (e, SyncPlanKind::TopologyAware)])
    {
        let run_dir = dir.join(format!("{kind:?}").to_lowercase());
        let once = || -> Result<Measured> {
            let _ = std::fs::remove_dir_all(&run_dir);
            std::fs::create_dir_all(&run_dir)?;
            match (engine, &args.gloo_python) {
                (Engine::Gloo, Some(py)) => run_gloo(kind, args, py, &run_dir, &model, &topo),
                _ => run_weave(kind, args, &run_dir, &model, &topo),
            }
        };
        let runs = (0..args.runs).map(|_| once()).collect::<Result<Vec<_>>>()?;
        let p = plan(kind, bytes, &topo);
        rows.push(Row {
            engine,
            kind,
            measured_s: median(runs.iter().map(|m| m.seconds).collect()),
            predicted_s: predict(&p, &topo).as_secs_f64(),
            transfer_s: transfer_seconds(&p, &topo),
            cross_link_share: median(runs.iter().map(|m| m.cross_link_bps).collect())
                / (args.slow_mbit as f64 * 1e6 / 8.0),
        });
    }
    Ok(rows)
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Weave => "weave-sync",
            Engine::Gloo => "gloo",
        }
    }
}

/// Per engine: flat over topology-aware, measured, predicted and transfer part alone.
fn ratios(rows: &[Row]) -> Vec<(Engine, [f64; 3])> {
    rows.chunks(2)
        .map(|p| {
            let r = |f: fn(&Row) -> f64| f(&p[0]) / f(&p[1]);
            (p[0].engine, [r(|x| x.measured_s), r(|x| x.predicted_s), r(|x| x.transfer_s)])
        })
        .collect()
}

fn report(args: &BenchArgs, rows: &[Row]) -> Result<()> {
    if args.json {
        let plans: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({ "engine": r.engine.name(), "plan": r.kind, "measured_s": r.measured_s,
                    "predicted_s": r.predicted_s, "transfer_predicted_s": r.transfer_s,
                    "cross_link_share_of_line_rate": r.cross_link_share })
            })
            .collect();
        let ratios: Vec<_> = ratios(rows)
            .into_iter()
            .map(|(e, [m, p, t])| {
                serde_json::json!({ "engine": e.name(), "measured": m, "predicted": p, "transfer_predicted": t })
            })
            .collect();
        let v = serde_json::json!({ "size_mb": args.size_mb, "train": args.train, "rollout": args.rollout,
            "slow_mbit": args.slow_mbit, "fast_mbit": args.fast_mbit, "runs": args.runs, "plans": plans,
            "flat_over_topology_aware": ratios });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} MB model, {} training GPUs -> {} rollout GPUs; slow link {} Mbit/s per NIC, rollout fabric {} Mbit/s per GPU \
         (a namespace per GPU, tc tbf per port); median of {} runs",
        args.size_mb, args.train, args.rollout, args.slow_mbit, args.fast_mbit, args.runs
    );
    let mut t = weave_report::table::new(&[
        "engine",
        "plan",
        "measured s",
        "predicted s",
        "of which transfer s",
        "measured / transfer",
        "cross-link rate, % of line",
    ]);
    for r in rows {
        t.add_row(vec![
            r.engine.name().to_string(),
            format!("{:?}", r.kind),
            format!("{:.2}", r.measured_s),
            format!("{:.2}", r.predicted_s),
            format!("{:.2}", r.transfer_s),
            format!("{:.2}", r.measured_s / r.transfer_s),
            format!("{:.1}", 100.0 * r.cross_link_share),
        ]);
    }
    weave_report::table::align_numbers(&mut t);
    println!("{t}");
    for (e, [m, p, tr]) in ratios(rows) {
        println!(
            "{}: flat / topology-aware measured {m:.2}x, predicted {p:.2}x (transfer part alone {tr:.2}x)",
            e.name()
        );
    }
    Ok(())
}
