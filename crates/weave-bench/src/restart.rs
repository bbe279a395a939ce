//! `weave bench restart`: how long `weave serve` takes to come back, by records in its store.
//! Builds a store through the real commit path (two-phase gate reports of many jobs), then
//! times opening it (replay) several times.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::time::Instant;
use weave_dispatch::Phase;
use weave_io::{json, write_output};
use weave_server::plane::{Record, SubmitSpec};
use weave_server::state::replicated::{seed_from_store, EtcdConfig};
use weave_server::Shared;

/// Deletes what the benchmark wrote under its prefix.
fn remove_prefix(e: &EtcdConfig) -> Result<()> {
    let etcd = weave_etcd::Etcd::new(&e.endpoints, std::time::Duration::from_secs(30))?;
    let from = format!("{}/", e.prefix).into_bytes();
    let to = weave_etcd::prefix_end(&from);
    etcd.txn(&[], &[weave_etcd::Op::DeleteRange(from, to)])?;
    Ok(())
}

#[derive(clap::Args)]
pub struct RestartArgs {
    /// Jobs submitted (they then report phases round-robin).
    #[arg(long, default_value_t = 200)]
    jobs: usize,
    /// Records in the store when it is reopened.
    #[arg(long, default_value_t = 20_000)]
    records: usize,
    /// Times the store is reopened (the median is reported).
    #[arg(long, default_value_t = 3)]
    opens: usize,
    /// Iterations per job: a job that completes is replaced by a new submission (churn:
    /// placement and departures in the log). 0: jobs run until the store is full.
    #[arg(long, default_value_t = 0)]
    iterations: u64,
    /// The server's `--snapshot-every` (0: never snapshot: restart replays every record;
    /// default: the server's, with --etcd or without).
    #[arg(long)]
    snapshot_every: Option<u64>,
    /// Time a replica on this etcd cluster instead (client URLs): the store built is moved
    /// into it as `weave store to-etcd` does, and a replica opens from its snapshot and the
    /// records after it until it leads.
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    etcd: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    /// Where the replica opened from: `embedded` or `etcd`.
    store: &'static str,
    records: u64,
    snapshot_every: u64,
    /// Records replayed after the snapshot at reopening.
    records_replayed: u64,
    /// The plane's snapshot at the end: its size and the time to encode it.
    snapshot_bytes: usize,
    snapshot_encode_s: f64,
    /// The store file's size at the end.
    store_file_bytes: u64,
    open_s_median: f64,
    open_s_all: Vec<f64>,
    per_record_us: f64,
}

pub fn run(args: RestartArgs) -> Result<()> {
    let default = if args.etcd.is_empty() {
        weave_server::DEFAULT_SNAPSHOT_EVERY
    } else {
        weave_server::DEFAULT_SNAPSHOT_EVERY_ETCD
    };
    let every = args.snapshot_every.unwrap_or(default);
    if args.jobs == 0 || args.records < args.jobs || args.opens == 0 {
        bail!("need --jobs >= 1, --records >= --jobs and --opens >= 1");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let config = || {
        let mut cfg = crate::serve::bench_config(data.clone());
        cfg.snapshot_every = every;
        cfg
    };
    let records = build(config(), &args)?;
    let prefix = format!("/weave-bench-restart-{}", std::process::id());
    let etcd = if args.etcd.is_empty() {
        None
    } else {
        let e = EtcdConfig::new(&args.etcd, &prefix, Some("bench".into()), 10).map_err(anyhow::Error::msg)?;
        let seeded = seed_from_store(&data, &e).context("moving the store into etcd")?;
        eprintln!("moved {} records after a snapshot at {:?} into etcd", seeded.records, seeded.snapshot_at);
        Some(e)
    };
    let mut times = Vec::new();
    let (mut snapshot_bytes, mut snapshot_encode_s) = (0, 0.0);
    for _ in 0..args.opens {
        let mut cfg = config();
        cfg.etcd = etcd.clone();
        let t = Instant::now();
        let shared = Shared::open(cfg).context("cannot reopen the store")?;
        times.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        snapshot_bytes = shared.lock().plane.snapshot().len();
        snapshot_encode_s = t.elapsed().as_secs_f64();
        // The next open leads at once instead of waiting out this one's lease.
        let durable = shared.lock().durable();
        durable.lock().unwrap_or_else(|p| p.into_inner()).resign();
        drop(shared);
    }
    if let Some(e) = &etcd {
        remove_prefix(e)?;
    }
    let store_file_bytes = std::fs::metadata(data.join("weave.redb")).map_or(0, |m| m.len());
    let records_replayed = {
        let store = weave_store::Store::open(&data.join("weave.redb"))?;
        store.records_since_snapshot()
    };
    let _ = std::fs::remove_dir_all(&data);
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let r = Report {
        store: if etcd.is_some() { "etcd" } else { "embedded" },
        records,
        snapshot_every: every,
        records_replayed,
        snapshot_bytes,
        snapshot_encode_s,
        store_file_bytes,
        open_s_median: median,
        open_s_all: times,
        per_record_us: median * 1e6 / records as f64,
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{} records ({} after the last snapshot), {}: reopening takes {:.3} s median of {} ({:.1} us per \
             record); a snapshot is {} bytes, {:.3} s to encode\n",
            r.records,
            r.records_replayed,
            r.store,
            r.open_s_median,
            args.opens,
            r.per_record_us,
            r.snapshot_bytes,
            r.snapshot_encode_s
        ),
    )
}

/// Submits the jobs and reports their phases until the store holds `records` records.
fn build(config: weave_server::ServerConfig, args: &RestartArgs) -> Result<u64> {
    let shared = Shared::open(config).context("cannot create the benchmark store")?;
    let mut next_id = 0usize;
    let submit = |slot: usize, next_id: &mut usize| -> Result<String> {
        let ty = ["7B_8k", "14B_8k", "3B_4k", "8B_16k"][slot % 4];
        let name = format!("j{}", *next_id);
        *next_id += 1;
        let mut spec = serde_json::json!({ "id": name, "type": ty, "slo": 1.5 });
        if args.iterations > 0 {
            spec["iterations"] = serde_json::json!(args.iterations);
        }
        let spec: SubmitSpec = serde_json::from_value(spec)?;
        shared.commit(|time_us| Record::Submit { time_us, tenant: "default".into(), job: spec })?;
        Ok(name)
    };
    let mut slots: Vec<String> = (0..args.jobs).map(|i| submit(i, &mut next_id)).collect::<Result<_>>()?;
    let mut n = args.jobs;
    while n < args.records {
        let before = n;
        for (i, slot) in slots.iter_mut().enumerate() {
            let job = slot.clone();
            let (state, granted) = match shared.lock().plane.job(&job) {
                Some(j) => (j.state, j.granted()),
                None => continue,
            };
            if state != weave_server::plane::JobState::Running {
                *slot = submit(i, &mut next_id)?;
                n += 1;
                continue;
            }
            let Some((phase, iteration)) = granted else { continue };
            let duration_us = if phase == Phase::Rollout { 60_000_000 } else { 40_000_000 };
            shared.commit(|time_us| Record::Finish {
                time_us,
                job,
                phase,
                iteration,
                duration_us,
                meta: None,
                admission: None,
            })?;
            n += 1;
            if n >= args.records {
                break;
            }
        }
        if n == before {
            bail!("no job was granted a phase");
        }
    }
    Ok(n as u64)
}
