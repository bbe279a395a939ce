//! `weave sync bench`: measured vs predicted sync time, both plans, between processes in two
//! network namespaces joined by rate-limited links (iproute2 `ip netns`, veth, `tc tbf`): one
//! veth pair per slow-link stream between the training and rollout namespaces, and a
//! rate-limited loopback inside the rollout namespace as the fast fabric. Needs root and
//! `ip`/`tc`; without them it says so and skips.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weave_core::Micros;
use weave_model::syncplan::{plan, predict, Topology};
use weave_model::SyncPlanKind;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model size, MB.
    #[arg(long, default_value_t = 128)]
    size_mb: u64,
    /// Training GPUs (sender processes, one slow-link stream each).
    #[arg(long, default_value_t = 4)]
    train: u32,
    /// Rollout GPUs (receiver processes, one node).
    #[arg(long, default_value_t = 4)]
    rollout: u32,
    /// Per-stream rate of the slow link, Mbit/s.
    #[arg(long, default_value_t = 400)]
    slow_mbit: u64,
    /// Rate of the fast fabric (the rollout side's loopback), Mbit/s.
    #[arg(long, default_value_t = 4000)]
    fast_mbit: u64,
}

const NS_T: &str = "weave-bench-t";
const NS_R: &str = "weave-bench-r";

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output().with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Namespaces and links, removed again on drop.
struct Net {
    streams: u32,
}

impl Net {
    fn up(streams: u32, slow_mbit: u64, fast_mbit: u64) -> Result<Net> {
        let _ = Net { streams }.down();
        sh(&["ip", "netns", "add", NS_T])?;
        sh(&["ip", "netns", "add", NS_R])?;
        let net = Net { streams };
        for ns in [NS_T, NS_R] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        let (slow, fast) = (format!("{slow_mbit}mbit"), format!("{fast_mbit}mbit"));
        for i in 0..streams {
            let (a, b) = (format!("wbt{i}"), format!("wbr{i}"));
            sh(&["ip", "link", "add", &a, "netns", NS_T, "type", "veth", "peer", "name", &b, "netns", NS_R])?;
            sh(&["ip", "-n", NS_T, "addr", "add", &format!("10.213.{i}.1/24"), "dev", &a])?;
            sh(&["ip", "-n", NS_R, "addr", "add", &format!("10.213.{i}.2/24"), "dev", &b])?;
            sh(&["ip", "-n", NS_T, "link", "set", &a, "up"])?;
            sh(&["ip", "-n", NS_R, "link", "set", &b, "up"])?;
            // The slow link, both directions.
            sh(&[
                "ip", "netns", "exec", NS_T, "tc", "qdisc", "add", "dev", &a, "root", "tbf", "rate", &slow, "burst",
                "256kb", "latency", "100ms",
            ])?;
            sh(&[
                "ip", "netns", "exec", NS_R, "tc", "qdisc", "add", "dev", &b, "root", "tbf", "rate", &slow, "burst",
                "256kb", "latency", "100ms",
            ])?;
        }
        sh(&[
            "ip", "netns", "exec", NS_R, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", &fast, "burst",
            "1mb", "latency", "100ms",
        ])?;
        Ok(net)
    }

    fn down(&self) -> Result<()> {
        let _ = self.streams;
        let a = Command::new("ip").args(["netns", "del", NS_T]).output();
        let b = Command::new("ip").args(["netns", "del", NS_R]).output();
        let _ = (a, b);
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = self.down();
    }
}

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_in(ns: &str, args: &[String]) -> Result<(Child, String)> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start a process in the namespace")?;
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().context("no stdout")?);
    out.read_line(&mut line)?;
    let addr =
        line.trim().strip_prefix("listening ").with_context(|| format!("unexpected first line `{line}`"))?.to_string();
    // Keep draining stdout in the background; the final line is read through the returned
    // reader by the caller when needed.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = String::new();
        while out.read_line(&mut rest).unwrap_or(0) > 0 {}
        let _ = tx.send(rest);
    });
    RESULTS.with(|r| r.borrow_mut().push(rx));
    Ok((child, addr))
}

thread_local! {
    static RESULTS: std::cell::RefCell<Vec<std::sync::mpsc::Receiver<String>>> = const { std::cell::RefCell::new(Vec::new()) };
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

/// One measured run of one plan; returns the slowest receiver's seconds.
fn run_plan(
    kind: SyncPlanKind,
    args: &BenchArgs,
    dir: &Path,
    model: &Path,
    bytes: u64,
    topo: &Topology,
) -> Result<f64> {
    RESULTS.with(|r| r.borrow_mut().clear());
    let mut procs = Procs(Vec::new());
    let mut train_addrs = Vec::new();
    for i in 0..args.train {
        let listen = format!("10.213.{i}.1:0");
        let (c, a) = spawn_in(
            NS_T,
            &[
                "sync".into(),
                "send".into(),
                "--model-file".into(),
                model.display().to_string(),
                "--listen".into(),
                listen,
            ],
        )?;
        procs.0.push(c);
        train_addrs.push(a.parse()?);
    }
    let run_dir = dir.join(format!("{kind:?}").to_lowercase());
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir)?;
    let manifest_path = run_dir.join("manifest.json");
    let mut rollout_addrs = Vec::new();
    for j in 0..args.rollout {
        let a = [
            "sync",
            "receive",
            "--manifest",
            &manifest_path.display().to_string(),
            "--me",
            &j.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--out",
            &run_dir.join(format!("r{j}")).display().to_string(),
            "--linger-s",
            "2",
        ];
        let (c, addr) = spawn_in(NS_R, &a.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        procs.0.push(c);
        rollout_addrs.push(addr.parse()?);
    }
    let p = plan(kind, bytes, topo);
    let m = weave_sync::Manifest::build(1, p, model, train_addrs, rollout_addrs)?;
    let tmp = run_dir.join("manifest.tmp");
    std::fs::write(&tmp, serde_json::to_string(&m)?)?;
    let start = Instant::now();
    std::fs::rename(&tmp, &manifest_path)?;
    let mut slowest: f64 = 0.0;
    let results: Vec<String> = RESULTS.with(|r| {
        r.borrow_mut()
            .drain(..)
            .skip(args.train as usize)
            .map(|rx| rx.recv_timeout(Duration::from_secs(600)).unwrap_or_default())
            .collect()
    });
    for (j, out) in results.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap_or(""))
            .with_context(|| format!("receiver {j} reported nothing: `{out}`"))?;
        slowest = slowest.max(v["seconds"].as_f64().unwrap_or(f64::NAN));
        let published = run_dir.join(format!("r{j}")).join("v1.bin");
        let got = weave_sync::sha256_range(&published, 0, bytes)?;
        if got != weave_sync::sha256_range(model, 0, bytes)? {
            bail!("receiver {j} published a corrupt model");
        }
    }
    let _ = start;
    Ok(slowest)
}

pub fn run(args: BenchArgs) -> Result<()> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let tools = ["ip", "tc"].iter().all(|t| Command::new(t).arg("-V").output().is_ok());
    if !root || !tools {
        println!(
            "skipped: the namespace experiment needs root and iproute2 (`ip`, `tc`); root: {root}, tools: {tools}"
        );
        return Ok(());
    }
    if args.train == 0 || args.rollout == 0 || args.size_mb == 0 {
        bail!("--train, --rollout and --size-mb must be at least 1");
    }
    let net = match Net::up(args.train, args.slow_mbit, args.fast_mbit) {
        Ok(n) => n,
        Err(e) => {
            println!("skipped: cannot build the namespaces here: {e:#}");
            return Ok(());
        }
    };
    let dir = std::env::temp_dir().join(format!("weave-sync-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bytes = args.size_mb * 1_000_000;
    let model = model_file(&dir, bytes)?;
    let topo = Topology {
        train_gpus: args.train,
        rollout_gpus: args.rollout,
        gpus_per_node: args.rollout,
        slow_stream_bps: args.slow_mbit as f64 * 1e6 / 8.0 * weave_model::sync::STREAM_EFFICIENCY,
        slow_aggregate_bps: f64::INFINITY,
        fast_bps: args.fast_mbit as f64 * 1e6 / 8.0 * weave_model::sync::STREAM_EFFICIENCY,
        latency: Micros(100),
    };
    let mut rows = Vec::new();
    for kind in [SyncPlanKind::Flat, SyncPlanKind::TopologyAware] {
        let measured = run_plan(kind, &args, &dir, &model, bytes, &topo)?;
        let predicted = predict(&plan(kind, bytes, &topo), &topo).as_secs_f64();
        rows.push((kind, measured, predicted));
    }
    drop(net);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{} MB model, {} senders -> {} receivers; slow link {} Mbit/s per stream, fast fabric {} Mbit/s (namespaces + tc tbf)",
        args.size_mb, args.train, args.rollout, args.slow_mbit, args.fast_mbit
    );
    let mut t = weave_io::table::new(&["plan", "measured s", "predicted s", "measured / predicted"]);
    for (kind, m, p) in rows {
        t.add_row(vec![format!("{kind:?}"), format!("{m:.2}"), format!("{p:.2}"), format!("{:.2}", m / p)]);
    }
    weave_io::table::align_numbers(&mut t);
    println!("{t}");
    Ok(())
}
