//! `weave bench chaos`: `weave serve` as a real process under hostile conditions, with every
//! outcome checked. SIGKILLs under concurrent load (every acknowledged submission and phase
//! completion must be there after the restart, none twice; restart time to the first answer
//! measured), then a seeded fuzz run of requests generated from the server's OpenAPI document
//! (no 5xx, no dropped connection, the process alive at the end). CI runs a short version
//! (`crates/weave-cli/tests/serve_process.rs`); the benchmark a long one.

use anyhow::{bail, Context, Result};
use rand::seq::IndexedRandom;
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weave_io::{json, write_output};
use weave_model::named_stream;

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// SIGKILLs, each after a stretch of load.
    #[arg(long, default_value_t = 50)]
    kills: usize,
    /// Client threads submitting jobs and reporting phases.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Load before each kill, milliseconds (jittered by the seed).
    #[arg(long, default_value_t = 400)]
    load_ms: u64,
    /// Generated API requests in the fuzz run.
    #[arg(long, default_value_t = 100_000)]
    fuzz_requests: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Slow clients (half a request header each, from another process) held open during the
    /// flood phase, while ordinary requests are timed.
    #[arg(long, default_value_t = 2000)]
    flood_connections: usize,
    /// The server's `--snapshot-every`: small, so that kills land before, during and after
    /// compactions.
    #[arg(long, default_value_t = 500)]
    snapshot_every: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Report {
    kills: usize,
    acknowledged_jobs: usize,
    acknowledged_completions: usize,
    lost: usize,
    duplicated: usize,
    restart_s_median: f64,
    restart_s_max: f64,
    events_at_end: usize,
    fuzz_requests: usize,
    fuzz_by_status: BTreeMap<u16, usize>,
    fuzz_server_errors: usize,
    fuzz_dropped_connections: usize,
    alive_after_fuzz: bool,
    /// Records the last snapshot covers (compactions happened under the kills).
    records_compacted: u64,
    flood_connections: usize,
    /// Ordinary requests answered while the slow clients were held, and their latency.
    flood_requests_answered: usize,
    flood_requests_failed: usize,
    flood_p50_ms: f64,
    flood_p99_ms: f64,
}

/// A server process, killed when dropped.
pub(crate) struct Server(pub(crate) Child, pub(crate) String);

impl Drop for Server {
    fn drop(&mut self) {
        // Under a wrapper (a profiler) the server is the wrapper's child: the wrapper leads a
        // process group of its own, and the whole group goes (killing the wrapper alone left
        // the server running after the benchmark).
        let group = format!("-{}", self.0.id());
        let wrapped = std::env::var_os(WRAPPER).is_some();
        if !wrapped || !Command::new("kill").args(["-KILL", "--", &group]).status().is_ok_and(|s| s.success()) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Runs the benchmark's server under a tool, e.g. "heaptrack -o FILE".
const WRAPPER: &str = "WEAVE_BENCH_SERVER_WRAPPER";

/// Starts `weave serve` on `data` with `extra` arguments; returns it once it answers, and how
/// long that took.
pub(crate) fn start_with(data: &Path, extra: &[&str]) -> Result<(Server, f64)> {
    let t = Instant::now();
    let wrapper: Vec<String> =
        std::env::var(WRAPPER).map(|w| w.split_whitespace().map(String::from).collect()).unwrap_or_default();
    let exe = std::env::current_exe()?;
    let (program, pre): (std::ffi::OsString, Vec<std::ffi::OsString>) = match wrapper.split_first() {
        Some((tool, rest)) => (tool.into(), rest.iter().map(Into::into).chain([exe.into_os_string()]).collect()),
        None => (exe.into_os_string(), Vec::new()),
    };
    let mut command = Command::new(program);
    if !wrapper.is_empty() {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let mut child = command
        .args(pre)
        .args([
            "serve",
            "--insecure-no-auth",
            "--addr",
            "127.0.0.1:0",
            "--rate-limit-per-s",
            "0",
            "--read-rate-limit-per-s",
            "0",
        ])
        .args(["--heartbeat-timeout-s", "3600"])
        .args(extra)
        .arg("--data")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start weave serve")?;
    // A wrapper may print its own lines first.
    let mut out = BufReader::new(child.stdout.take().context("server stdout")?);
    let mut line = String::new();
    for _ in 0..if wrapper.is_empty() { 1 } else { 20 } {
        line.clear();
        if out.read_line(&mut line)? == 0 || line.starts_with("listening ") {
            break;
        }
    }
    let Some(addr) = line.trim().strip_prefix("listening ") else {
        let _ = child.kill();
        bail!("weave serve did not start: `{}`", line.trim());
    };
    let url = format!("http://{addr}");
    Ok((Server(child, url), t.elapsed().as_secs_f64()))
}

/// The chaos run's server: it holds all history, so that every acknowledged operation can be
/// checked at the end, and compacts often.
fn start(data: &Path, snapshot_every: u64) -> Result<(Server, f64)> {
    let every = snapshot_every.to_string();
    start_with(data, &["--keep-events", "100000000", "--keep-ended-jobs", "100000000", "--snapshot-every", &every])
}

pub(crate) fn client() -> Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build()?)
}

/// Every job the server lists (following its pages), as `token` (none: an open server) sees.
pub(crate) fn all_jobs(
    c: &reqwest::blocking::Client,
    url: &str,
    token: Option<&str>,
) -> Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    let mut path = Some("/v1/jobs".to_string());
    while let Some(p) = path {
        let req = c.get(format!("{url}{p}"));
        let resp = match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
        .send()?
        .error_for_status()?;
        let link = resp.headers().get(reqwest::header::LINK).and_then(|v| v.to_str().ok()).map(String::from);
        let page: Vec<serde_json::Value> = resp.json()?;
        out.extend(page);
        path = weave_server::http::next_page(link.as_deref()).map(String::from);
    }
    Ok(out)
}

pub(crate) type Acked = Arc<Mutex<(Vec<String>, Vec<(String, String, u64)>)>>;

/// One worker: submits jobs and drives their phases until `stop`; records what the server
/// acknowledged.
pub(crate) fn worker(url: String, prefix: String, acked: Acked, stop: Arc<AtomicBool>) {
    let Ok(c) = client() else { return };
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let id = format!("{prefix}-{n}");
        let spec = serde_json::json!({ "id": id, "type": "3B_4k", "iterations": 3, "rollout_s": 50, "train_s": 60, "slo": 2.0 });
        let Ok(r) = c.post(format!("{url}/v1/jobs")).json(&spec).send() else { return };
        if r.status() != 201 {
            continue;
        }
        acked.lock().expect("acked").0.push(id.clone());
        for k in 0..3u64 {
            for phase in ["rollout", "train"] {
                // Wait for the grant as a real driver does (202: not yet, a group partner is in
                // the phase). A job left half-way would stay admitted, and its memory is live
                // state, not history the retention bounds.
                let start = format!("{url}/v1/jobs/{id}/phases/{phase}/{k}/start");
                let mut granted = false;
                for attempt in 0..100 {
                    let wait_s = if attempt == 0 { 0 } else { 5 };
                    let Ok(r) = c.post(format!("{start}?wait_s={wait_s}")).send() else { return };
                    if r.status() != 202 {
                        granted = r.status() == 200;
                        break;
                    }
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                }
                if !granted {
                    break;
                }
                let body = serde_json::json!({ "duration_s": 1.0 });
                let Ok(r) = c.post(format!("{url}/v1/jobs/{id}/phases/{phase}/{k}/finish")).json(&body).send() else {
                    return;
                };
                if r.status() == 200 {
                    acked.lock().expect("acked").1.push((id.clone(), phase.to_string(), k));
                }
            }
        }
    }
}

/// Every event, page by page.
pub(crate) fn all_events(c: &reqwest::blocking::Client, url: &str) -> Result<Vec<serde_json::Value>> {
    let mut out: Vec<serde_json::Value> = Vec::new();
    loop {
        let after = out.last().and_then(|e| e["seq"].as_u64()).map(|s| format!("&after={s}")).unwrap_or_default();
        let page: Vec<serde_json::Value> = c.get(format!("{url}/v1/events?limit=5000{after}")).send()?.json()?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

/// Checks that everything acknowledged is there exactly once; returns (lost, duplicated).
pub(crate) fn verify(url: &str, jobs: &[String], finishes: &[(String, String, u64)]) -> Result<(usize, usize)> {
    let c = client()?;
    let listed = all_jobs(&c, url, None)?;
    let mut ids: Vec<&str> = listed.iter().filter_map(|j| j["id"].as_str()).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    let mut duplicated = before - ids.len();
    let mut lost = jobs.iter().filter(|j| ids.binary_search(&j.as_str()).is_err()).count();
    let mut seen: BTreeMap<(String, String, u64), usize> = BTreeMap::new();
    for e in all_events(&c, url)?.iter().filter(|e| e["kind"] == "finish") {
        let key = (
            e["job"].as_str().unwrap_or_default().to_string(),
            e["phase"].as_str().unwrap_or_default().to_string(),
            e["iteration"].as_u64().unwrap_or(u64::MAX),
        );
        *seen.entry(key).or_insert(0) += 1;
    }
    duplicated += seen.values().filter(|n| **n > 1).count();
    lost += finishes.iter().filter(|f| !seen.contains_key(f)).count();
    Ok((lost, duplicated))
}

fn kill_loop(args: &ChaosArgs, data: &Path, r: &mut Report) -> Result<()> {
    let acked: Acked = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let mut rng = named_stream(args.seed, "chaos-kills", 0);
    let mut restarts = Vec::new();
    for round in 0..args.kills {
        let (mut server, took) = start(data, args.snapshot_every)?;
        if round > 0 {
            restarts.push(took);
        }
        let (lost, dup) = {
            let (jobs, fins) = acked.lock().expect("acked").clone();
            verify(&server.1, &jobs, &fins)?
        };
        r.lost += lost;
        r.duplicated += dup;
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..args.workers)
            .map(|w| {
                let (url, acked, stop) = (server.1.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || worker(url, format!("k{round}w{w}"), acked, stop))
            })
            .collect();
        let ms = args.load_ms / 2 + rng.random_range(0..=args.load_ms);
        std::thread::sleep(Duration::from_millis(ms));
        server.0.kill().context("SIGKILL")?;
        let _ = server.0.wait();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        r.kills += 1;
    }
    // The last kill's survivors, checked once more.
    let (server, took) = start(data, args.snapshot_every)?;
    restarts.push(took);
    let (jobs, fins) = acked.lock().expect("acked").clone();
    let (lost, dup) = verify(&server.1, &jobs, &fins)?;
    r.lost += lost;
    r.duplicated += dup;
    r.acknowledged_jobs = jobs.len();
    r.acknowledged_completions = fins.len();
    r.events_at_end = all_events(&client()?, &server.1)?.len();
    drop(server);
    let store = weave_store::verify::<weave_server::plane::Record>(&data.join("weave.redb"))?;
    r.records_compacted = store.snapshot_at.unwrap_or(0);
    restarts.sort_by(f64::total_cmp);
    r.restart_s_median = restarts.get(restarts.len() / 2).copied().unwrap_or(0.0);
    r.restart_s_max = restarts.last().copied().unwrap_or(0.0);
    Ok(())
}

/// The API's operations from its OpenAPI document: (method, path template).
fn operations(c: &reqwest::blocking::Client, url: &str) -> Result<Vec<(String, String)>> {
    let doc: serde_json::Value = c.get(format!("{url}/openapi.json")).send()?.json()?;
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().context("openapi: no paths")? {
        for method in item.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            ops.push((method.to_uppercase(), path.clone()));
        }
    }
    ops.sort();
    Ok(ops)
}

const IDS: [&str; 10] =
    ["fz-0", "fz-1", "", ".", "..", "%2e%2e", "a%00b", "ü", "x-very-long-id-000000000000000000000", "fz-0%2Fx"];
const NUMBERS: [&str; 9] = ["0", "1", "-1", "1e300", "NaN", "inf", "18446744073709551615", "0.5", "x"];

/// A random JSON value, up to `depth` deep, with the API's field names mixed in.
fn value<R: Rng>(rng: &mut R, depth: u32) -> serde_json::Value {
    const FIELDS: [&str; 12] = [
        "id",
        "type",
        "iterations",
        "slo",
        "rollout_s",
        "train_s",
        "resume_from",
        "duration_s",
        "meta",
        "model",
        "max_tokens",
        "launch",
    ];
    match rng.random_range(0..8) {
        0 => serde_json::Value::Null,
        1 => serde_json::json!(rng.random_bool(0.5)),
        2 => serde_json::json!(rng.random_range(-1e12..1e12)),
        3 => serde_json::json!(rng.random_range(0u64..u64::MAX)),
        4 => serde_json::json!(["7B_8k", "3B_4k", "", "32B_8k", "fz-0", "\u{0}"][rng.random_range(0..6)]),
        5 if depth > 0 => {
            serde_json::Value::Array((0..rng.random_range(0..4)).map(|_| value(rng, depth - 1)).collect())
        }
        _ if depth > 0 => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.random_range(0..6) {
                let key = FIELDS.choose(rng).copied().unwrap_or("id");
                m.insert(key.to_string(), value(rng, depth - 1));
            }
            serde_json::Value::Object(m)
        }
        _ => serde_json::json!("fz-0"),
    }
}

fn fuzz(args: &ChaosArgs, data: &Path, r: &mut Report) -> Result<()> {
    if args.fuzz_requests == 0 {
        return Ok(());
    }
    let (mut server, _) = start(data, args.snapshot_every)?;
    let c = client()?;
    let ops = operations(&c, &server.1)?;
    for id in ["fz-0", "fz-1"] {
        let spec = serde_json::json!({ "id": id, "type": "3B_4k", "rollout_s": 5, "train_s": 5 });
        let _ = c.post(format!("{}/v1/jobs", server.1)).json(&spec).send();
    }
    let threads = 4;
    let per = args.fuzz_requests.div_ceil(threads);
    let results: Vec<(BTreeMap<u16, usize>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (ops, url) = (&ops, server.1.clone());
                s.spawn(move || fuzz_thread(args.seed, t, per, ops, &url))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for (by, dropped) in results {
        for (k, v) in by {
            *r.fuzz_by_status.entry(k).or_insert(0) += v;
        }
        r.fuzz_dropped_connections += dropped;
    }
    r.fuzz_requests = r.fuzz_by_status.values().sum::<usize>() + r.fuzz_dropped_connections;
    r.fuzz_server_errors = r.fuzz_by_status.iter().filter(|(k, _)| **k >= 500).map(|(_, v)| v).sum();
    let alive = server.0.try_wait().ok().flatten().is_none();
    r.alive_after_fuzz = alive && c.get(format!("{}/healthz", server.1)).send().is_ok_and(|x| x.status() == 200);
    Ok(())
}

/// `n` generated requests; (responses by status, requests that got no answer).
fn fuzz_thread(
    seed: u64,
    thread: usize,
    n: usize,
    ops: &[(String, String)],
    url: &str,
) -> (BTreeMap<u16, usize>, usize) {
    let mut rng = named_stream(seed, "chaos-fuzz", thread as u64);
    let mut by = BTreeMap::new();
    let mut dropped = 0;
    let Ok(c) = client() else { return (by, n) };
    for _ in 0..n {
        let Some((method, template)) = ops.choose(&mut rng) else { break };
        let mut path = template.clone();
        path = path.replace("{id}", IDS.choose(&mut rng).copied().unwrap_or("fz-0"));
        path = path.replace("{phase}", ["rollout", "train", "Rollout", "x", ""][rng.random_range(0..5)]);
        path = path.replace("{iteration}", NUMBERS.choose(&mut rng).copied().unwrap_or("0"));
        let query = match rng.random_range(0..4) {
            0 => format!("?wait_s={}", NUMBERS.choose(&mut rng).copied().unwrap_or("0")),
            1 => format!(
                "?after={}&limit={}",
                NUMBERS.choose(&mut rng).copied().unwrap_or("0"),
                NUMBERS.choose(&mut rng).copied().unwrap_or("0")
            ),
            2 => "?token=x".to_string(),
            _ => String::new(),
        };
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut req = c.request(method, format!("{url}{path}{query}"));
        req = match rng.random_range(0..4) {
            0 => req.body(value(&mut rng, 3).to_string()).header("content-type", "application/json"),
            1 => req.body("{\"id\": ").header("content-type", "application/json"),
            2 => req.header("authorization", "Bearer not-a-token"),
            _ => req,
        };
        // With wait_s the gate may park a request for its whole wait: keep runs short.
        match req.timeout(Duration::from_secs(40)).send() {
            Ok(resp) => *by.entry(resp.status().as_u16()).or_insert(0) += 1,
            Err(_) => dropped += 1,
        }
    }
    (by, dropped)
}

/// Holds `--flood-connections` slow clients open against a fresh server and times 500
/// ordinary requests meanwhile.
fn flood(args: &ChaosArgs, data: &Path, r: &mut Report) -> Result<()> {
    if args.flood_connections == 0 {
        return Ok(());
    }
    // Slow clients are held, not cut, for the whole measurement.
    let (server, _) = start_with(data, &["--header-timeout-s", "3600"])?;
    let addr: std::net::SocketAddr = server.1.trim_start_matches("http://").parse().context("server address")?;
    let mut slow = crate::serve::slow_client_process(addr, args.flood_connections)?;
    let c = client()?;
    let mut ms = Vec::new();
    for i in 0..500 {
        let path = if i % 2 == 0 { "/v1/jobs" } else { "/v1/events?limit=100" };
        let t = Instant::now();
        match c.get(format!("{}{path}", server.1)).send() {
            Ok(resp) if resp.status().is_success() => ms.push(t.elapsed().as_secs_f64() * 1e3),
            _ => r.flood_requests_failed += 1,
        }
    }
    if let Some(child) = slow.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    ms.sort_by(f64::total_cmp);
    let q = |x: f64| ms.get(((ms.len().max(1) - 1) as f64 * x).round() as usize).copied().unwrap_or(0.0);
    r.flood_connections = args.flood_connections;
    r.flood_requests_answered = ms.len();
    (r.flood_p50_ms, r.flood_p99_ms) = (q(0.5), q(0.99));
    Ok(())
}

pub fn run(args: ChaosArgs) -> Result<()> {
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-chaos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut r = Report::default();
    kill_loop(&args, &data, &mut r)?;
    fuzz(&args, &data, &mut r)?;
    flood(&args, &data, &mut r)?;
    let _ = std::fs::remove_dir_all(&data);
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{} SIGKILLs under load: {} acknowledged jobs and {} phase completions, {} lost, {} duplicated; \
             restart to first answer {:.2} s median, {:.2} s max ({} plane events at the end; the last \
             snapshot covers {} records)\n\
             fuzz: {} generated requests, by status {:?}; {} 5xx, {} without an answer; server alive after: {}\n\
             flood: {} slow connections opened from another address (the server holds at most {} of them, its \
             per-address limit); {} requests answered meanwhile ({} failed), p50 {:.2} ms, p99 {:.2} ms\n",
            r.kills,
            r.acknowledged_jobs,
            r.acknowledged_completions,
            r.lost,
            r.duplicated,
            r.restart_s_median,
            r.restart_s_max,
            r.events_at_end,
            r.records_compacted,
            r.fuzz_requests,
            r.fuzz_by_status,
            r.fuzz_server_errors,
            r.fuzz_dropped_connections,
            r.alive_after_fuzz,
            r.flood_connections,
            weave_server::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            r.flood_requests_answered,
            r.flood_requests_failed,
            r.flood_p50_ms,
            r.flood_p99_ms
        ),
    )
}
