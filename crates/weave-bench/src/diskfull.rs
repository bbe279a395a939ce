//! `weave bench disk-full`: `weave serve` on a small file system that is filled up and freed
//! again, round after round. Checked: a write the server refused is never durable (not there
//! while it runs, nor after a restart), every acknowledged one is; measured: how long after
//! the space is freed `/readyz` turns ready and a write goes through, with nobody writing and
//! no restart. Needs root (it mounts a tmpfs).

use crate::chaos::{all_jobs, client, start_with, Server};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use weave_io::{json, write_output};

#[derive(clap::Args)]
pub struct DiskFullArgs {
    /// Times the disk is filled and freed.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Size of the file system the server writes to, MiB.
    #[arg(long, default_value_t = 16)]
    size_mb: u64,
    /// The server's `--snapshot-every`: small, so that snapshots meet the full disk too.
    #[arg(long, default_value_t = 50)]
    snapshot_every: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Report {
    rounds: usize,
    acknowledged: usize,
    refused: usize,
    /// Refused submissions found in the job list while the server ran, or after a restart.
    refused_but_durable: usize,
    /// Acknowledged submissions missing after the restart.
    acknowledged_lost: usize,
    /// Seconds from freeing the space to `/readyz` answering 200 (nobody writing).
    ready_s_median: f64,
    ready_s_max: f64,
    /// Rounds whose first write after `/readyz` turned ready was refused anyway.
    writes_refused_after_ready: usize,
    /// Rounds where `/readyz` said ready while the disk was still full (after a refused
    /// write; a small probe may fit in the store's free pages while real writes do not).
    ready_while_full: usize,
}

/// A tmpfs mounted for the benchmark, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn new(dir: &Path, size_mb: u64) -> Result<Mount> {
        std::fs::create_dir_all(dir)?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("cannot mount a tmpfs at {} (the benchmark needs root)", dir.display());
        }
        Ok(Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let Ok(mut f) = std::fs::File::create(path) else { return };
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    // What the page cache still held finds no room either.
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

struct Client {
    c: reqwest::blocking::Client,
    url: String,
}

impl Client {
    /// Submits job `id`: its status.
    fn submit(&self, id: &str) -> Result<u16> {
        let body = serde_json::json!({ "id": id, "type": "3B_4k", "iterations": 2 });
        Ok(self.c.post(format!("{}/v1/jobs", self.url)).json(&body).send()?.status().as_u16())
    }

    fn ready(&self) -> bool {
        self.c.get(format!("{}/readyz", self.url)).send().is_ok_and(|r| r.status().is_success())
    }

    /// Every job the server lists.
    fn jobs(&self) -> Result<std::collections::BTreeSet<String>> {
        let jobs = all_jobs(&self.c, &self.url, None)?;
        Ok(jobs.iter().filter_map(|j| j["id"].as_str().map(String::from)).collect())
    }
}

fn start(data: &Path, snapshot_every: u64) -> Result<(Server, Client)> {
    let every = snapshot_every.to_string();
    let (server, _) = start_with(data, &["--snapshot-every", &every, "--keep-ended-jobs", "100000000"])?;
    let c = Client { c: client()?, url: server.1.clone() };
    Ok((server, c))
}

pub fn run(args: DiskFullArgs) -> Result<()> {
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let root = std::env::temp_dir().join(format!("weave-bench-diskfull-{}", std::process::id()));
    let mount = Mount::new(&root, args.size_mb)?;
    let (data, filler) = (mount.0.join("data"), mount.0.join("filler"));
    let (server, c) = start(&data, args.snapshot_every)?;
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    let mut r = Report { rounds: args.rounds, ..Default::default() };
    let mut ready_s = Vec::new();
    for round in 0..args.rounds {
        fill(&filler);
        // Submit until one is refused. Records still fit in the store file's free pages: after
        // a compaction those can hold hundreds (one CI round took 200 and refused none), so
        // the cap is far above what a full disk leaves room for.
        for k in 0..20_000 {
            let id = format!("r{round}-{k}");
            match c.submit(&id)? {
                201 | 202 => acked.push(id),
                _ => {
                    refused.push(id);
                    break;
                }
            }
        }
        let listed = c.jobs()?;
        r.refused_but_durable += refused.iter().filter(|id| listed.contains(*id)).count();
        r.ready_while_full += usize::from(c.ready());
        std::fs::remove_file(&filler)?;
        let freed = Instant::now();
        while !c.ready() {
            if freed.elapsed() > Duration::from_secs(30) {
                bail!("round {round}: /readyz not ready 30 s after the space was freed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        ready_s.push(freed.elapsed().as_secs_f64());
        let id = format!("r{round}-after");
        match c.submit(&id)? {
            201 | 202 => acked.push(id),
            _ => {
                r.writes_refused_after_ready += 1;
                refused.push(id);
            }
        }
    }
    drop(server);
    let (_server, c) = start(&data, args.snapshot_every)?;
    let listed = c.jobs()?;
    r.refused_but_durable += refused.iter().filter(|id| listed.contains(*id)).count();
    r.acknowledged_lost = acked.iter().filter(|id| !listed.contains(*id)).count();
    (r.acknowledged, r.refused) = (acked.len(), refused.len());
    ready_s.sort_by(f64::total_cmp);
    r.ready_s_median = ready_s[ready_s.len() / 2];
    r.ready_s_max = ready_s[ready_s.len() - 1];
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{} rounds of a full disk ({} MiB tmpfs): {} writes acknowledged, {} refused; {} refused writes durable, \
             {} acknowledged lost (checked live and after a restart); /readyz ready {:.2} s median, {:.2} s max \
             after the space was freed (nobody writing, no restart); {} first writes refused after ready; \
             ready while full in {} rounds\n",
            r.rounds,
            args.size_mb,
            r.acknowledged,
            r.refused,
            r.refused_but_durable,
            r.acknowledged_lost,
            r.ready_s_median,
            r.ready_s_max,
            r.writes_refused_after_ready,
            r.ready_while_full,
        ),
    )
}
