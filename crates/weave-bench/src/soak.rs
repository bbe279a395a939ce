//! `weave bench soak`: `weave serve` as a process under steady load for a long time, with
//! `/v1/events` polled (by cursor, and in full every few seconds), sampling the server's
//! resident memory. Memory should level off once the held history reaches its bounds.

use crate::chaos::{client, start_with, worker, Acked};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weave_io::{json, write_output};

#[derive(clap::Args)]
pub struct SoakArgs {
    /// How long the load runs.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Client threads submitting jobs and reporting phases.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 10.0)]
    sample_s: f64,
    /// Fraction of the run counted as warm-up: memory is compared with its level at the end
    /// of warm-up.
    #[arg(long, default_value_t = 0.2)]
    warmup: f64,
    /// Extra arguments for `weave serve` (e.g. "--keep-events 50000").
    #[arg(long, allow_hyphen_values = true)]
    serve_args: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    minutes: f64,
    acknowledged_jobs: usize,
    acknowledged_completions: usize,
    cursor_polls: u64,
    full_event_reads: u64,
    /// (seconds since start, resident MB) samples of the server.
    rss_mb: Vec<(f64, f64)>,
    rss_mb_at_warmup_end: f64,
    rss_mb_max_after_warmup: f64,
    rss_mb_at_end: f64,
    /// Max sample after warm-up over the level at its end (the target is at most 1.2).
    growth_after_warmup: f64,
    /// The kernel's high-water mark of resident memory from the end of warm-up on (VmHWM,
    /// reset then): catches the peaks that fall between samples. `None` where the reset is
    /// not allowed.
    peak_rss_mb_after_warmup: Option<f64>,
    /// That peak over the level at the end of warm-up.
    peak_growth_after_warmup: Option<f64>,
}

pub(crate) fn rss_mb(pid: u32) -> Result<f64> {
    status_mb(pid, "VmRSS:")
}

/// A memory figure from the server's `/proc/PID/status`, in MB.
fn status_mb(pid: u32, field: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading the server's memory")?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc status"))?;
    Ok(kb / 1024.0)
}

/// Starts the server's resident high-water mark again from its present size (Linux:
/// `clear_refs` with 5); false where that is not allowed.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Polls `/v1/events` like a dashboard (by cursor) and like a careless client (everything held,
/// page by page, every two seconds) until `stop`.
fn poller(url: String, stop: Arc<AtomicBool>, polls: Arc<AtomicU64>, full: Arc<AtomicU64>) {
    let Ok(c) = client() else { return };
    let mut cursor: Option<u64> = None;
    let mut last_full = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let after = cursor.map(|s| format!("&after={s}")).unwrap_or_default();
        if let Ok(r) = c.get(format!("{url}/v1/events?limit=2000{after}")).send() {
            if let Ok(page) = r.json::<Vec<serde_json::Value>>() {
                cursor = page.last().and_then(|e| e["seq"].as_u64()).or(cursor);
                polls.fetch_add(1, Ordering::Relaxed);
            }
        }
        if last_full.elapsed() >= Duration::from_secs(2) {
            if crate::chaos::all_events(&c, &url).is_ok() {
                full.fetch_add(1, Ordering::Relaxed);
            }
            last_full = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn run(args: SoakArgs) -> Result<()> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if args.workers == 0 || !positive(args.minutes) || !positive(args.sample_s) || !(0.0..1.0).contains(&args.warmup) {
        bail!("need --workers >= 1, --minutes > 0, --sample-s > 0 and --warmup in [0, 1)");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let extra: Vec<String> = args.serve_args.as_deref().unwrap_or("").split_whitespace().map(String::from).collect();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let (server, _) = start_with(&data, &extra)?;
    let pid = server.0.id();
    let acked: Acked = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let stop = Arc::new(AtomicBool::new(false));
    let (polls, full) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads: Vec<_> = (0..args.workers)
        .map(|w| {
            let (url, acked, stop) = (server.1.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || worker(url, format!("soak{w}"), acked, stop))
        })
        .collect();
    {
        let (url, stop, polls, full) = (server.1.clone(), stop.clone(), polls.clone(), full.clone());
        threads.push(std::thread::spawn(move || poller(url, stop, polls, full)));
    }
    let start = Instant::now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let warm = Duration::from_secs_f64(args.minutes * 60.0 * args.warmup);
    let mut samples = Vec::new();
    let (mut peak_from_warmup, mut warm_sample_s) = (None, None);
    while start.elapsed() < total {
        // The high-water mark starts again at the end of warm-up (a sample is taken then too).
        let until = if peak_from_warmup.is_none() && start.elapsed() < warm { warm } else { total };
        let next = Duration::from_secs_f64(args.sample_s).min(until.saturating_sub(start.elapsed()));
        std::thread::sleep(next);
        samples.push((start.elapsed().as_secs_f64(), rss_mb(pid)?));
        if peak_from_warmup.is_none() && start.elapsed() >= warm {
            peak_from_warmup = Some(reset_peak(pid));
            warm_sample_s = samples.last().map(|s| s.0);
        }
    }
    let peak = match peak_from_warmup {
        Some(true) => Some(status_mb(pid, "VmHWM:")?),
        _ => None,
    };
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    let warm_end = warm_sample_s.unwrap_or(args.minutes * 60.0 * args.warmup);
    let at_warmup = samples.iter().rev().find(|s| s.0 <= warm_end).or(samples.first()).map_or(0.0, |s| s.1);
    let max_after = samples.iter().filter(|s| s.0 > warm_end).map(|s| s.1).fold(0.0, f64::max);
    let (jobs, fins) = acked.lock().expect("acked").clone();
    let r = Report {
        minutes: args.minutes,
        acknowledged_jobs: jobs.len(),
        acknowledged_completions: fins.len(),
        cursor_polls: polls.load(Ordering::Relaxed),
        full_event_reads: full.load(Ordering::Relaxed),
        rss_mb_at_warmup_end: at_warmup,
        rss_mb_max_after_warmup: max_after,
        rss_mb_at_end: samples.last().map_or(0.0, |s| s.1),
        growth_after_warmup: if at_warmup > 0.0 { max_after / at_warmup } else { 0.0 },
        peak_rss_mb_after_warmup: peak,
        peak_growth_after_warmup: peak.filter(|_| at_warmup > 0.0).map(|p| p / at_warmup),
        rss_mb: samples,
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{:.1} min: {} jobs, {} phase completions acknowledged; /v1/events polled {} times by cursor, read in full {} times\n\
             server memory: {:.1} MB at the end of warm-up, at most {:.1} MB after ({:.2}x), {:.1} MB at the end\n\
             peak resident memory after warm-up (between samples too): {}\n",
            r.minutes,
            r.acknowledged_jobs,
            r.acknowledged_completions,
            r.cursor_polls,
            r.full_event_reads,
            r.rss_mb_at_warmup_end,
            r.rss_mb_max_after_warmup,
            r.growth_after_warmup,
            r.rss_mb_at_end,
            match (r.peak_rss_mb_after_warmup, r.peak_growth_after_warmup) {
                (Some(p), Some(g)) => format!("{p:.1} MB ({g:.2}x)"),
                _ => "not measured (the high-water mark could not be reset)".into(),
            }
        ),
    )
}
