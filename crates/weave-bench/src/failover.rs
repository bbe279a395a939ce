//! `weave bench failover`: `weave serve --etcd` replicas (real processes) on a local etcd
//! cluster, the active one SIGKILLed again and again under load. Workers submit jobs and report
//! phases to the active replica until it dies; the killed replica comes back as a standby.
//! Measured: how long after each kill some replica answers again (median, maximum). Checked at
//! the end: every acknowledged submission and phase completion is there, none twice (the
//! checks of `weave bench chaos`).

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
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    failovers: usize,
    replicas: usize,
    etcd_members: usize,
    lease_s: u32,
    acknowledged_jobs: usize,
    acknowledged_completions: usize,
    lost: usize,
    duplicated: usize,
    /// Seconds from each kill until a replica answered again.
    answered_again_s_median: f64,
    answered_again_s_max: f64,
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

/// The replica that answers, polled until one does (a minute at most).
fn active(replicas: &[Replica], c: &reqwest::blocking::Client) -> Result<usize> {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(i) = replicas.iter().position(|r| r.serves(c)) {
            return Ok(i);
        }
        if Instant::now() > end {
            bail!("no replica answered within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: FailoverArgs) -> Result<()> {
    if args.replicas < 2 || args.etcd_members == 0 || args.failovers == 0 {
        bail!("--replicas must be at least 2, --etcd-members and --failovers at least 1");
    }
    let etcd = LocalCluster::start("bench-failover", args.etcd_members).map_err(anyhow::Error::msg)?;
    let prefix = format!("/weave-bench-failover-{}", std::process::id());
    let root = std::env::temp_dir().join(format!("weave-bench-failover-{}", std::process::id()));
    let mut replicas: Vec<Replica> = (0..args.replicas)
        .map(|i| Replica { name: format!("r{i}"), data: root.join(format!("r{i}")), url: String::new(), child: None })
        .collect();
    for r in &mut replicas {
        r.run(&etcd, &prefix, args.lease_s)?;
    }
    let c = client()?;
    let mut now = active(&replicas, &c)?;
    let acked: Acked = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let mut rng = named_stream(args.seed, "failover-kills", 0);
    let mut gaps = Vec::new();
    for round in 0..args.failovers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..args.workers)
            .map(|w| {
                let (url, acked, stop) = (replicas[now].url.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || worker(url, format!("f{round}w{w}"), acked, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(args.load_ms / 2 + rng.random_range(0..=args.load_ms)));
        replicas[now].kill();
        let killed = Instant::now();
        let next = active(&replicas, &c)?;
        gaps.push(killed.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        replicas[now].run(&etcd, &prefix, args.lease_s)?;
        now = next;
    }
    let (jobs, fins) = acked.lock().map_err(|_| anyhow::anyhow!("a worker panicked"))?.clone();
    let (lost, duplicated) = verify(&replicas[now].url, &jobs, &fins)?;
    for r in &mut replicas {
        r.kill();
    }
    let _ = std::fs::remove_dir_all(&root);
    gaps.sort_by(f64::total_cmp);
    let r = Report {
        failovers: args.failovers,
        replicas: args.replicas,
        etcd_members: args.etcd_members,
        lease_s: args.lease_s,
        acknowledged_jobs: jobs.len(),
        acknowledged_completions: fins.len(),
        lost,
        duplicated,
        answered_again_s_median: gaps[gaps.len() / 2],
        answered_again_s_max: gaps[gaps.len() - 1],
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    println!(
        "{} failovers ({} replicas, {} etcd members, lease {} s): answered again after {:.2} s median, {:.2} s max; \
         {} jobs and {} phase completions acknowledged, {} lost, {} twice",
        r.failovers,
        r.replicas,
        r.etcd_members,
        r.lease_s,
        r.answered_again_s_median,
        r.answered_again_s_max,
        r.acknowledged_jobs,
        r.acknowledged_completions,
        r.lost,
        r.duplicated
    );
    Ok(())
}
