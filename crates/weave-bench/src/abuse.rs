//! `weave bench abuse`: one tenant using every endpoint it may, with the largest bodies it is
//! allowed, as fast as the default rate limit lets it, against `weave serve` with its default
//! limits; meanwhile another tenant drives a job through the phase gate. Reports the server's
//! memory, its store on disk, and the other tenant's gate latency with the abuse on and off.
//!
//! The gate's p99 is mostly the disk's fsync tail, which drifts by several times over minutes
//! on a shared machine (a 20-s baseline read 1.4 to 6.1 ms across runs). So the abuse runs in
//! alternating windows, on and off, and the gate's p99 in the on windows is compared with the
//! off windows of the same run: both halves see the same disk and the same grown state.

use crate::chaos::client;
use crate::soak::rss_mb;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weave_io::{json, write_output};

#[derive(clap::Args)]
pub struct AbuseArgs {
    /// How long the abuse runs, all its windows together (the run takes about twice that).
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Length of each window: the abuse is on for one, off for the next, in turn.
    #[arg(long, default_value_t = 15.0)]
    window_s: f64,
    /// Seconds of the other tenant's gate alone, before the abuse starts.
    #[arg(long, default_value_t = 20.0)]
    baseline_s: f64,
    /// Client threads of the abusing tenant (they share its one token and its rate limit).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Requests per second the abusing tenant sends, all threads together (the server's
    /// default limit is 200; 0: as fast as it can, which measures the load generator's own
    /// CPU on a small machine as much as the server).
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Extra arguments for `weave serve` (its defaults otherwise).
    #[arg(long, allow_hyphen_values = true)]
    serve_args: Option<String>,
    /// The requests it sends, in turn (default: all eight: submit, restart, heartbeat, start,
    /// finish, events, status, jobs), to find which one costs what.
    #[arg(long, value_delimiter = ',', default_value = "submit,restart,heartbeat,start,finish,events,status,jobs")]
    requests: Vec<String>,
    /// Seconds between memory and disk samples.
    #[arg(long, default_value_t = 10.0)]
    sample_s: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Report {
    minutes: f64,
    rate: f64,
    abuse_requests: u64,
    abuse_accepted: u64,
    abuse_rate_limited: u64,
    abuse_refused_other: u64,
    /// (seconds since the abuse began, resident MB, store MB) samples.
    samples: Vec<(f64, f64, f64)>,
    rss_mb_before: f64,
    rss_mb_max: f64,
    rss_mb_growth: f64,
    store_mb_max: f64,
    /// The gate alone, before any abuse (for reference: a short, unpaired sample).
    gate_p50_ms_before: f64,
    gate_p99_ms_before: f64,
    /// Windows with the abuse off (after the first second of each, while the last abusing
    /// requests drain).
    gate_p50_ms_off: f64,
    gate_p99_ms_off: f64,
    gate_requests_off: usize,
    /// Windows with the abuse on.
    gate_p50_ms_on: f64,
    gate_p99_ms_on: f64,
    gate_requests_on: usize,
    /// p99 with the abuse on over p99 with it off, in the same run.
    gate_p99_ratio: f64,
}

const MALLORY: &str = "mallory-token-abuse";
const VICTOR: &str = "victor-token-abuse";

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `weave serve` with its defaults (rate limit, input limits, retention) and two tenants.
fn start(dir: &Path, extra: &[&str]) -> Result<Server> {
    let hash = |t: &str| weave_server::auth::hex(&weave_server::auth::sha256(t));
    let tenants = format!(
        "[[tenant]]\nname = \"mallory\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"victor\"\ntoken_sha256 = \"{}\"\n",
        hash(MALLORY),
        hash(VICTOR)
    );
    std::fs::write(dir.join("tenants.toml"), tenants)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", "--addr", "127.0.0.1:0", "--disagg-only"])
        .args(extra)
        .arg("--tenants")
        .arg(dir.join("tenants.toml"))
        .arg("--data")
        .arg(dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start weave serve")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("server stdout")?).read_line(&mut line)?;
    let Some(addr) = line.trim().strip_prefix("listening ") else {
        let _ = child.kill();
        bail!("weave serve did not start: `{}`", line.trim());
    };
    Ok(Server(child, format!("http://{addr}")))
}

fn dir_mb(dir: &Path) -> f64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
    }
    walk(dir) as f64 / 1e6
}

/// What the abuse is doing when a gate request begins.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Window {
    Before = 0,
    On = 1,
    /// The first second after the abuse stops: its last requests are still being answered.
    Draining = 2,
    Off = 3,
}

impl Window {
    fn load(w: &AtomicU8) -> Window {
        match w.load(Ordering::Relaxed) {
            0 => Window::Before,
            1 => Window::On,
            2 => Window::Draining,
            _ => Window::Off,
        }
    }
}

type Latencies = Arc<Mutex<Vec<(Window, f64)>>>;

/// The other tenant's job through the gate at a driver's pace (about 150 requests a second,
/// inside its own rate limit), its start and finish latencies (ms) recorded into `lat`, each
/// with the window it began in, until `stop`.
fn gate_driver(url: String, lat: Latencies, window: Arc<AtomicU8>, stop: Arc<AtomicBool>) -> Result<()> {
    let c = client()?;
    let spec = json!({ "id": "victim", "type": "3B_4k", "iterations": 1_000_000, "rollout_s": 50, "train_s": 50 });
    let r = c.post(format!("{url}/v1/jobs")).bearer_auth(VICTOR).json(&spec).send()?;
    if !r.status().is_success() {
        bail!("the victim's job was not admitted: {}", r.text()?);
    }
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for phase in ["rollout", "train"] {
            let (w, t) = (Window::load(&window), Instant::now());
            let r =
                c.post(format!("{url}/v1/jobs/victim/phases/{phase}/{k}/start?wait_s=5")).bearer_auth(VICTOR).send()?;
            if r.status().as_u16() != 200 {
                bail!("the victim's {phase} {k} was not granted: {} {}", r.status(), r.text()?);
            }
            lat.lock().unwrap().push((w, t.elapsed().as_secs_f64() * 1e3));
            let (w, t) = (Window::load(&window), Instant::now());
            let body = json!({ "duration_s": 0.01 });
            let r = c
                .post(format!("{url}/v1/jobs/victim/phases/{phase}/{k}/finish"))
                .bearer_auth(VICTOR)
                .json(&body)
                .send()?;
            if !r.status().is_success() {
                bail!("the victim's finish was refused: {}", r.text()?);
            }
            lat.lock().unwrap().push((w, t.elapsed().as_secs_f64() * 1e3));
            // A driver's pace, well inside its own rate limit (phases of 10 ms).
            std::thread::sleep(Duration::from_millis(10));
        }
        if k.is_multiple_of(20) {
            let _ = c.post(format!("{url}/v1/jobs/victim/heartbeat")).bearer_auth(VICTOR).send();
        }
        k += 1;
    }
    Ok(())
}

/// One of the abusing tenant's threads: every endpoint in turn, largest bodies allowed.
/// The requests `abuser` knows, in its order.
const REQUESTS: [&str; 8] = ["submit", "restart", "heartbeat", "start", "finish", "events", "status", "jobs"];

fn abuser(
    url: String,
    kinds: Vec<usize>,
    thread: usize,
    every: Duration,
    counts: Arc<[AtomicU64; 4]>,
    window: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let c = client()?;
    let mut next = Instant::now();
    let (reason, blob, env) = ("r".repeat(200), "m".repeat(4000), "e".repeat(4000));
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if Window::load(&window) != Window::On {
            // Off: wait for the next window, and start it on schedule (no catching up).
            std::thread::sleep(Duration::from_millis(5));
            next = Instant::now();
            continue;
        }
        let job = format!("m{thread}-{}", n / kinds.len() as u64);
        let req = match kinds[(n % kinds.len() as u64) as usize] {
            0 => c.post(format!("{url}/v1/jobs")).json(&json!({ "id": job, "type": "3B_4k", "iterations": 1000,
                "launch": { "entrypoint": "x".repeat(4000), "env": { "E": env } } })),
            1 => c.post(format!("{url}/v1/jobs/{job}/restart")).json(&json!({ "reason": reason })),
            2 => c.post(format!("{url}/v1/jobs/{job}/heartbeat")),
            3 => c.post(format!("{url}/v1/jobs/{job}/phases/rollout/0/start?wait_s=0")),
            4 => c
                .post(format!("{url}/v1/jobs/{job}/phases/rollout/0/finish"))
                .json(&json!({ "duration_s": 1.0, "meta": { "blob": blob } })),
            5 => c.get(format!("{url}/v1/events")),
            6 => c.get(format!("{url}/status")),
            _ => c.get(format!("{url}/v1/jobs")),
        };
        n += 1;
        next += every;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let Ok(r) = req.bearer_auth(MALLORY).send() else { continue };
        let code = r.status().as_u16();
        let _ = r.bytes();
        let i = match code {
            200..=299 => 1,
            429 => 2,
            _ => 3,
        };
        counts[0].fetch_add(1, Ordering::Relaxed);
        counts[i].fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The abuse's windows, in turn, until it has been on for `on_total`; the server's memory and
/// store sampled every `sample` meanwhile (seconds since the abuse began).
fn alternate(
    window: &AtomicU8,
    on_total: Duration,
    length: Duration,
    sample: Duration,
    mut sample_now: impl FnMut(f64) -> Result<()>,
) -> Result<()> {
    let began = Instant::now();
    let (mut on_for, mut next_sample) = (Duration::ZERO, began + sample);
    while on_for < on_total {
        let this = length.min(on_total - on_for);
        for (state, span) in [(Window::On, this), (Window::Draining, Duration::from_secs(1)), (Window::Off, this)] {
            window.store(state as u8, Ordering::Relaxed);
            let end = Instant::now()
                + span.saturating_sub(if state == Window::Off { Duration::from_secs(1) } else { Duration::ZERO });
            while Instant::now() < end {
                std::thread::sleep(end.min(next_sample).saturating_duration_since(Instant::now()));
                if Instant::now() >= next_sample {
                    sample_now(began.elapsed().as_secs_f64())?;
                    next_sample += sample;
                }
            }
        }
        on_for += this;
    }
    sample_now(began.elapsed().as_secs_f64())
}

fn abuse_kinds(requests: &[String]) -> Result<Vec<usize>> {
    requests
        .iter()
        .map(|r| {
            REQUESTS
                .iter()
                .position(|k| k == r)
                .with_context(|| format!("--requests: `{r}` is not one of {}", REQUESTS.join(", ")))
        })
        .collect()
}

/// p50 and p99 of the latencies taken in the windows `of`, and how many there were.
fn window_percentiles(lat: &[(Window, f64)], of: Window) -> (f64, f64, usize) {
    let v: Vec<f64> = lat.iter().filter(|(w, _)| *w == of).map(|(_, ms)| *ms).collect();
    (percentile(v.clone(), 0.5), percentile(v.clone(), 0.99), v.len())
}

pub fn run(args: AbuseArgs) -> Result<()> {
    if !(args.minutes > 0.0 && args.sample_s > 0.0 && args.baseline_s > 0.0 && args.window_s >= 2.0)
        || args.threads == 0
    {
        bail!("--minutes, --sample-s, --baseline-s and --threads must be positive, --window-s at least 2");
    }
    let kinds = abuse_kinds(&args.requests)?;
    let dir = std::env::temp_dir().join(format!("weave-bench-abuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let extra: Vec<&str> = args.serve_args.as_deref().unwrap_or_default().split_whitespace().collect();
    let server = start(&dir, &extra)?;
    let pid = server.0.id();
    let lat: Latencies = Arc::new(Mutex::new(Vec::new()));
    let (window, stop) = (Arc::new(AtomicU8::new(Window::Before as u8)), Arc::new(AtomicBool::new(false)));
    let gate = {
        let (url, lat, window, stop) = (server.1.clone(), lat.clone(), window.clone(), stop.clone());
        std::thread::spawn(move || gate_driver(url, lat, window, stop))
    };
    std::thread::sleep(Duration::from_secs_f64(args.baseline_s));
    let mut r = Report { minutes: args.minutes, rate: args.rate, rss_mb_before: rss_mb(pid)?, ..Default::default() };
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let abusers: Vec<_> = (0..args.threads)
        .map(|i| {
            let (url, counts, stop, kinds) = (server.1.clone(), counts.clone(), stop.clone(), kinds.clone());
            let window = window.clone();
            let every =
                if args.rate > 0.0 { Duration::from_secs_f64(args.threads as f64 / args.rate) } else { Duration::ZERO };
            std::thread::spawn(move || abuser(url, kinds, i, every, counts, window, stop))
        })
        .collect();
    let sampled = alternate(
        &window,
        Duration::from_secs_f64(args.minutes * 60.0),
        Duration::from_secs_f64(args.window_s),
        Duration::from_secs_f64(args.sample_s),
        |at| {
            let (rss, store) = (rss_mb(pid)?, dir_mb(&dir.join("data")));
            r.samples.push((at, rss, store));
            r.rss_mb_max = r.rss_mb_max.max(rss);
            r.store_mb_max = r.store_mb_max.max(store);
            Ok(())
        },
    );
    stop.store(true, Ordering::Relaxed);
    for a in abusers {
        a.join().map_err(|_| anyhow::anyhow!("an abusing thread panicked"))??;
    }
    gate.join().map_err(|_| anyhow::anyhow!("the gate driver panicked"))??;
    sampled?;
    let lat: Vec<(Window, f64)> = std::mem::take(&mut *lat.lock().unwrap());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    r.rss_mb_growth = r.rss_mb_max - r.rss_mb_before;
    [r.abuse_requests, r.abuse_accepted, r.abuse_rate_limited, r.abuse_refused_other] =
        [0, 1, 2, 3].map(|i| counts[i].load(Ordering::Relaxed));
    (r.gate_p50_ms_before, r.gate_p99_ms_before, _) = window_percentiles(&lat, Window::Before);
    (r.gate_p50_ms_off, r.gate_p99_ms_off, r.gate_requests_off) = window_percentiles(&lat, Window::Off);
    (r.gate_p50_ms_on, r.gate_p99_ms_on, r.gate_requests_on) = window_percentiles(&lat, Window::On);
    r.gate_p99_ratio = r.gate_p99_ms_on / r.gate_p99_ms_off.max(1e-9);
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{:.1} min of one tenant sending {} requests/s with the largest bodies allowed (in {:.0}-s windows, \
             on and off in turn): {} requests ({} accepted, {} rate-limited, {} refused otherwise); server memory \
             {:.1} MB before, at most {:.1} MB (+{:.1} MB); store at most {:.1} MB; the other tenant's gate \
             p50/p99 {:.2}/{:.2} ms before, {:.2}/{:.2} ms with the abuse off ({} requests), {:.2}/{:.2} ms with \
             it on ({} requests): p99 on/off {:.2}x\n",
            r.minutes,
            r.rate,
            args.window_s,
            r.abuse_requests,
            r.abuse_accepted,
            r.abuse_rate_limited,
            r.abuse_refused_other,
            r.rss_mb_before,
            r.rss_mb_max,
            r.rss_mb_growth,
            r.store_mb_max,
            r.gate_p50_ms_before,
            r.gate_p99_ms_before,
            r.gate_p50_ms_off,
            r.gate_p99_ms_off,
            r.gate_requests_off,
            r.gate_p50_ms_on,
            r.gate_p99_ms_on,
            r.gate_requests_on,
            r.gate_p99_ratio
        ),
    )
}
