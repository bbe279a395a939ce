//! `weave bench failover`: `weave serve --etcd` replicas (real processes) on a local etcd
//! cluster, the active one SIGKILLed again and again under load. Workers submit jobs and report
//! phases to the active replica until it dies; the killed replica comes back as a standby.
//! Measured: how long after each kill some replica answers again (median, maximum). Checked at
//! the end: every acknowledged submission and phase completion is there, none twice (the
//! checks of `weave bench chaos`). With `--nodes-script scripts/replicas-local.sh` the replicas
//! and etcd members run on the nodes of a miniature cluster instead (network namespaces), and a
//! kill takes the active's whole node: its replica, its etcd member and its network.

use crate::chaos::{client, verify, worker, Acked};
use anyhow::{bail, Context, Result};
use rand::Rng;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weave_etcd::local::LocalCluster;
use weave_io::{json, write_output};
use weave_model::named_stream;

#[derive(clap::Args)]
pub struct FailoverArgs {
    /// SIGKILLs of the active replica, each after a stretch of load.
    #[arg(long, default_value_t = 50)]
    failovers: usize,
    /// `weave serve` replicas.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// etcd members.
    #[arg(long, default_value_t = 3)]
    etcd_members: usize,
    /// Client threads submitting jobs and reporting phases.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Load before each kill, milliseconds (jittered by the seed).
    #[arg(long, default_value_t = 1_000)]
    load_ms: u64,
    /// The replicas' leadership lease, seconds (`weave serve --lease-s`).
    #[arg(long, default_value_t = 2)]
    lease_s: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run on the nodes this script brings up (`scripts/replicas-local.sh`: three network
    /// namespaces, each an etcd member and a replica; needs root) instead of local processes.
    #[arg(long, value_name = "PATH")]
    nodes_script: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    failovers: usize,
    replicas: usize,
    etcd_members: usize,
    lease_s: u32,
    /// Where the replicas ran: `processes` or `nodes` (a kill takes the whole node).
    kill: &'static str,
    acknowledged_jobs: usize,
    acknowledged_completions: usize,
    lost: usize,
    duplicated: usize,
    /// Seconds from each kill until a replica answered again.
    answered_again_s_median: f64,
    answered_again_s_max: f64,
    /// Each failover's, in order.
    answered_again_s_all: Vec<f64>,
}

/// One replica: its name, data directory, address and process (none while killed).
struct Replica {
    name: String,
    data: PathBuf,
    url: String,
    child: Option<Child>,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Replica {
    /// Starts (or restarts) the replica's process, on a fresh port.
    fn run(&mut self, etcd: &LocalCluster, prefix: &str, lease_s: u32) -> Result<()> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve", "--insecure-no-auth", "--disagg-only", "--addr", &addr])
            .args(["--rate-limit-per-s", "0", "--read-rate-limit-per-s", "0", "--heartbeat-timeout-s", "3600"])
            .args(["--keep-events", "100000000", "--keep-ended-jobs", "100000000"])
            .args(["--etcd", &etcd.endpoints().join(","), "--etcd-prefix", prefix, "--replica", &self.name])
            .args(["--lease-s", &lease_s.to_string()])
            .arg("--data")
            .arg(&self.data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start weave serve")?;
        let out = BufReader::new(child.stdout.take().context("replica stdout")?);
        std::thread::spawn(move || out.lines().for_each(drop));
        self.url = format!("http://{addr}");
        self.child = Some(child);
        Ok(())
    }

    fn serves(&self, c: &reqwest::blocking::Client) -> bool {
        self.child.is_some() && c.get(format!("{}/v1/jobs?limit=1", self.url)).send().is_ok_and(|r| r.status() == 200)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Replicas to kill and bring back: local processes, or the nodes of a miniature cluster.
trait Replicas {
    fn count(&self) -> usize;
    fn url(&self, i: usize) -> String;
    fn serves(&self, i: usize, c: &reqwest::blocking::Client) -> bool;
    fn kill(&mut self, i: usize) -> Result<()>;
    fn restart(&mut self, i: usize) -> Result<()>;
}

struct Processes {
    etcd: LocalCluster,
    prefix: String,
    lease_s: u32,
    replicas: Vec<Replica>,
}

impl Replicas for Processes {
    fn count(&self) -> usize {
        self.replicas.len()
    }
    fn url(&self, i: usize) -> String {
        self.replicas[i].url.clone()
    }
    fn serves(&self, i: usize, c: &reqwest::blocking::Client) -> bool {
        self.replicas[i].serves(c)
    }
    fn kill(&mut self, i: usize) -> Result<()> {
        self.replicas[i].kill();
        Ok(())
    }
    fn restart(&mut self, i: usize) -> Result<()> {
        self.replicas[i].run(&self.etcd, &self.prefix, self.lease_s)
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.replicas.iter_mut().for_each(Replica::kill);
    }
}

/// The nodes `scripts/replicas-local.sh` brings up (and takes down when dropped).
struct Nodes {
    script: PathBuf,
    urls: Vec<String>,
    lease_s: u32,
}

impl Nodes {
    fn up(script: PathBuf, lease_s: u32) -> Result<Nodes> {
        let mut nodes = Nodes { script, urls: Vec::new(), lease_s };
        nodes.run(&["up"])?;
        nodes.urls = nodes.run(&["urls"])?.split(',').map(str::to_string).collect();
        Ok(nodes)
    }

    /// Runs the nodes' script with `args` (replicas it starts get the bench's lease): what it
    /// printed.
    fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.script)
            .args(args)
            .env("WEAVE_BIN", std::env::current_exe()?)
            .env("WEAVE_REPLICAS_LEASE_S", self.lease_s.to_string())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", self.script.display()))?;
        if !out.status.success() {
            bail!("{} {}: {}", self.script.display(), args.join(" "), out.status);
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Replicas for Nodes {
    fn count(&self) -> usize {
        self.urls.len()
    }
    fn url(&self, i: usize) -> String {
        self.urls[i].clone()
    }
    fn serves(&self, i: usize, c: &reqwest::blocking::Client) -> bool {
        c.get(format!("{}/v1/jobs?limit=1", self.urls[i]))
            .timeout(Duration::from_millis(500))
            .send()
            .is_ok_and(|r| r.status() == 200)
    }
    fn kill(&mut self, i: usize) -> Result<()> {
        self.run(&["kill-node", &i.to_string()]).map(drop)
    }
    fn restart(&mut self, i: usize) -> Result<()> {
        self.run(&["start-node", &i.to_string()]).map(drop)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
    }
}

/// The replica that answers, polled until one does (a minute at most).
fn active(replicas: &dyn Replicas, c: &reqwest::blocking::Client) -> Result<usize> {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(i) = (0..replicas.count()).find(|&i| replicas.serves(i, c)) {
            return Ok(i);
        }
        if Instant::now() > end {
            bail!("no replica answered within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Replicas as local processes on a local etcd cluster.
fn processes(args: &FailoverArgs, root: &std::path::Path) -> Result<Processes> {
    let etcd = LocalCluster::start("bench-failover", args.etcd_members).map_err(anyhow::Error::msg)?;
    let prefix = format!("/weave-bench-failover-{}", std::process::id());
    let replicas = (0..args.replicas)
        .map(|i| Replica { name: format!("r{i}"), data: root.join(format!("r{i}")), url: String::new(), child: None })
        .collect();
    let mut p = Processes { etcd, prefix, lease_s: args.lease_s, replicas };
    for i in 0..p.replicas.len() {
        p.restart(i)?;
    }
    Ok(p)
}

pub fn run(args: FailoverArgs) -> Result<()> {
    if args.replicas < 2 || args.etcd_members == 0 || args.failovers == 0 {
        bail!("--replicas must be at least 2, --etcd-members and --failovers at least 1");
    }
    let root = std::env::temp_dir().join(format!("weave-bench-failover-{}", std::process::id()));
    let mut replicas: Box<dyn Replicas> = match &args.nodes_script {
        Some(script) => Box::new(Nodes::up(script.clone(), args.lease_s)?),
        None => Box::new(processes(&args, &root)?),
    };
    let c = client()?;
    let mut now = active(replicas.as_ref(), &c)?;
    let acked: Acked = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let mut rng = named_stream(args.seed, "failover-kills", 0);
    let mut gaps = Vec::new();
    for round in 0..args.failovers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..args.workers)
            .map(|w| {
                let (url, acked, stop) = (replicas.url(now), acked.clone(), stop.clone());
                std::thread::spawn(move || worker(url, format!("f{round}w{w}"), acked, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(args.load_ms / 2 + rng.random_range(0..=args.load_ms)));
        replicas.kill(now)?;
        let killed = Instant::now();
        let next = active(replicas.as_ref(), &c)?;
        gaps.push(killed.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        replicas.restart(now)?;
        now = next;
    }
    let (jobs, fins) = acked.lock().map_err(|_| anyhow::anyhow!("a worker panicked"))?.clone();
    let (lost, duplicated) = verify(&replicas.url(now), &jobs, &fins)?;
    let count = replicas.count();
    drop(replicas);
    let _ = std::fs::remove_dir_all(&root);
    let all = gaps.clone();
    gaps.sort_by(f64::total_cmp);
    let r = Report {
        failovers: args.failovers,
        replicas: count,
        etcd_members: if args.nodes_script.is_some() { count } else { args.etcd_members },
        kill: if args.nodes_script.is_some() { "nodes" } else { "processes" },
        lease_s: args.lease_s,
        acknowledged_jobs: jobs.len(),
        acknowledged_completions: fins.len(),
        lost,
        duplicated,
        answered_again_s_median: gaps[gaps.len() / 2],
        answered_again_s_max: gaps[gaps.len() - 1],
        answered_again_s_all: all,
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    println!(
        "{} failovers ({} replicas, {} etcd members, lease {} s, killing {}): answered again after {:.2} s median, {:.2} s max; \
         {} jobs and {} phase completions acknowledged, {} lost, {} twice",
        r.failovers,
        r.replicas,
        r.etcd_members,
        r.lease_s,
        r.kill,
        r.answered_again_s_median,
        r.answered_again_s_max,
        r.acknowledged_jobs,
        r.acknowledged_completions,
        r.lost,
        r.duplicated
    );
    Ok(())
}
