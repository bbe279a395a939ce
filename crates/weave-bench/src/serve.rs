//! `weave bench serve`: submissions per second and phase-gate round trips against an
//! in-process `weave serve` on loopback. Bounded: a fixed number of requests.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weave_io::{json, write_output};
use weave_report::table;
use weave_server::state::SnapshotWindow;
use weave_server::{ServerConfig, Shared, Tenants};

#[derive(clap::Args)]
pub struct ServeBenchArgs {
    /// Jobs registered before the gate is measured.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Gate round trips (start + finish) measured.
    #[arg(long, default_value_t = 2000)]
    round_trips: usize,
    /// Export spans to this OTLP/HTTP URL while measuring (the cost of tracing on; off by
    /// default, as in `weave serve`).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Connections held open by slow clients (half a request header each) while measuring.
    #[arg(long, default_value_t = 0)]
    slow_connections: usize,
    /// Gate round trips run before measuring, to give the server a history to read.
    #[arg(long, default_value_t = 0)]
    history_round_trips: usize,
    /// Clients of another tenant (with no jobs) reading `--read-path` in a loop while the gate
    /// is measured: a tenant must not be able to slow another's gate with reads.
    #[arg(long, default_value_t = 0)]
    readers: usize,
    /// What the readers read.
    #[arg(long, default_value = "/v1/events?after=0")]
    read_path: String,
    /// All readers together send at most this many reads per second (0: as fast as they can),
    /// e.g. what a per-token rate limit lets through.
    #[arg(long, default_value_t = 0.0)]
    reads_per_second: f64,
    /// The server's `--snapshot-every` (records between snapshots): small enough that
    /// snapshots land among the measured round trips, to see whether they stall the gate.
    #[arg(long, default_value_t = weave_server::DEFAULT_SNAPSHOT_EVERY)]
    snapshot_every: u64,
    /// The server lends idle rollout blocks (`weave serve --lending`): each rollout grant
    /// looks for a block to borrow under the plane's lock.
    #[arg(long)]
    lending: bool,
    /// Keep the record log in this etcd cluster (`weave serve --etcd`: client URLs,
    /// comma-separated) instead of the embedded store; under a prefix of its own each run.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    #[arg(long)]
    json: bool,
}

/// The driver's and the readers' tokens (two tenants, neither an admin).
const DRIVER: &str = "bench-driver-token";
const READER: &str = "bench-reader-token";

fn bench_tenants() -> Result<Tenants> {
    let entry = |name: &str, token: &str| {
        let hash = weave_server::auth::hex(&weave_server::auth::sha256(token));
        format!("[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{hash}\"\n")
    };
    Ok(Tenants::from_toml(&(entry("driver", DRIVER) + &entry("reader", READER)))?)
}

/// Reader threads, stopped and joined on `finish`: each returns its read latencies (ms).
struct Readers {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<f64>>>,
}

impl Readers {
    fn start(url: &str, count: usize, path: &str, per_second: f64) -> Readers {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Each reader's pace: one read every `gap` at most.
        let gap = if per_second > 0.0 { Duration::from_secs_f64(count as f64 / per_second) } else { Duration::ZERO };
        let threads = (0..count)
            .map(|_| {
                let (stop, target) = (stop.clone(), format!("{url}{path}"));
                std::thread::spawn(move || {
                    let c = reqwest::blocking::Client::new();
                    let mut ms = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let t = Instant::now();
                        if c.get(&target).bearer_auth(READER).send().and_then(|r| r.bytes()).is_ok() {
                            ms.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                        std::thread::sleep(gap.saturating_sub(t.elapsed()));
                    }
                    ms
                })
            })
            .collect();
        Readers { stop, threads }
    }

    fn finish(self) -> Vec<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all: Vec<f64> = self.threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect();
        all.sort_by(f64::total_cmp);
        all
    }
}

#[derive(Serialize)]
struct Report {
    jobs: usize,
    /// Loans made while measuring (`--lending`).
    loans: u64,
    slow_connections: usize,
    submissions_per_second: f64,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    round_trips: usize,
    history_events: u64,
    readers: usize,
    reads_per_second: f64,
    read_p50_ms: f64,
    start_p50_ms: f64,
    start_p99_ms: f64,
    start_max_ms: f64,
    finish_p50_ms: f64,
    finish_p99_ms: f64,
    finish_max_ms: f64,
    /// Snapshots committed while the gate was measured.
    snapshots: u64,
    /// Gate requests that overlapped a snapshot being written, and the longest of them; the
    /// longest of the others (the machine's own noise).
    requests_during_snapshots: usize,
    max_during_snapshots_ms: f64,
    max_outside_snapshots_ms: f64,
    /// The same apart: phase starts (answered under the lock, no disk) and finishes (durable:
    /// an append synced to disk), during snapshots and at other times; max and p99.
    start_during_snapshots: Spread,
    start_outside_snapshots: Spread,
    finish_during_snapshots: Spread,
    finish_outside_snapshots: Spread,
    /// The longest the plane's lock was held to take a snapshot's frozen copy.
    snapshot_copy_max_ms: f64,
    /// The longest a record took to apply (CPU under the lock, no disk), while a snapshot was
    /// being written and at other times.
    apply_max_during_snapshots_ms: f64,
    apply_max_outside_snapshots_ms: f64,
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(0.0)
}

/// The server a benchmark runs in process: open access, the paper's testbed, elastic pools,
/// no heartbeat expiry within a run.
pub fn bench_config(data: std::path::PathBuf) -> ServerConfig {
    ServerConfig {
        heartbeat_timeout: Duration::from_secs(3600),
        max_wait: Duration::from_secs(5),
        ..ServerConfig::new(data)
    }
}

#[derive(clap::Args)]
pub struct SlowClientsArgs {
    #[arg(long)]
    addr: std::net::SocketAddr,
    #[arg(long)]
    count: usize,
}

/// Opens `count` connections that each send half a request header, says `ready`, and holds
/// them until stdin closes.
pub fn slow_clients(args: SlowClientsArgs) -> Result<()> {
    use std::io::{Read, Write};
    weave_server::raise_open_file_limit();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let held: Vec<std::net::TcpStream> = (0..args.count)
        .map(|i| -> Result<std::net::TcpStream> {
            let mut s =
                rt.block_on(connect_from_another_address(args.addr)).with_context(|| format!("slow connection {i}"))?;
            s.write_all(b"GET /v1/jobs HTTP/1.1\r\nx-slow: ")?;
            Ok(s)
        })
        .collect::<Result<_>>()?;
    println!("ready {}", held.len());
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
    Ok(())
}

/// A connection to `addr` from an address of its own where the server is on loopback
/// (127.0.0.2): the server's per-address limit then counts the slow clients apart from the
/// ordinary ones measured beside them, as it would on a network.
async fn connect_from_another_address(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    if addr.ip().is_loopback() {
        socket.bind("127.0.0.2:0".parse().expect("an address"))?;
    }
    let stream = socket.connect(addr).await?.into_std()?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The slow clients, in a process of their own (the server here needs its descriptors).
pub(crate) fn slow_client_process(addr: std::net::SocketAddr, count: usize) -> Result<Option<std::process::Child>> {
    use std::io::BufRead;
    if count == 0 {
        return Ok(None);
    }
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", "slow-clients", "--addr", &addr.to_string(), "--count", &count.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start the slow clients")?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("slow clients' stdout")?).read_line(&mut line)?;
    if !line.starts_with("ready") {
        let _ = child.kill();
        bail!("the slow clients did not all connect (see above)");
    }
    Ok(Some(child))
}

/// The server's state as the benchmark runs it: its tenants, slow clients held rather than
/// cut, the snapshot interval and lending asked for, and tracing if asked.
fn open_shared(args: &ServeBenchArgs, data: &std::path::Path) -> Result<Arc<Shared>> {
    let mut cfg = bench_config(data.to_path_buf());
    cfg.tenants = bench_tenants()?;
    // Slow clients are held for the whole measurement, not cut, and all come from loopback.
    cfg.limits.header_timeout = Duration::from_secs(3600);
    cfg.limits.max_connections_per_address = None;
    // Every job is the driver's: the per-tenant cap (100 by default) would refuse the 101st
    // with 429, as it did `weave bench serve` at its default of 1,000 jobs.
    cfg.max_jobs_per_tenant = cfg.max_jobs_per_tenant.max(args.jobs);
    cfg.snapshot_every = args.snapshot_every;
    cfg.placement.lending = args.lending;
    if !args.etcd.is_empty() {
        let prefix = format!("/weave-bench-{}", std::process::id());
        let e = weave_server::state::replicated::EtcdConfig::new(&args.etcd, &prefix, Some("bench".into()), 30);
        cfg.etcd = Some(e.map_err(|e| anyhow::anyhow!(e))?);
    }
    let mut shared = Shared::open(cfg).context("cannot open the benchmark store")?;
    if let Some(url) = &args.otlp_endpoint {
        let telemetry = weave_server::telemetry::Telemetry::otlp(url, shared.now_us())?;
        shared = shared.with_telemetry(telemetry);
    }
    Ok(Arc::new(shared))
}

pub fn run(args: ServeBenchArgs) -> Result<()> {
    weave_server::raise_open_file_limit();
    if args.jobs == 0 || args.round_trips == 0 {
        bail!("--jobs and --round-trips must be at least 1");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let shared = open_shared(&args, &data)?;
    let history = shared.clone();
    // Two workers, as `weave serve` has on this machine's two cores.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(weave_server::serve(listener, shared, async move {
        let _ = stopped.await;
    }));
    let url = format!("http://{addr}");
    let slow = slow_client_process(addr, args.slow_connections)?;
    let c = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let (mut submit_ms, submit_rate) = submit_all(&c, &url, args.jobs)?;
    // Round trips: every job whose rollout is granted right away runs rollout then training.
    let mut gate = Gate { c: &c, url: &url, k: vec![0; args.jobs], phase: vec!["rollout"; args.jobs] };
    gate.round_trips(args.history_round_trips, &mut Vec::new(), &mut Vec::new())?;
    history.lock().apply_max = Default::default();
    let (history_events, snapshots_before, loans_before) = {
        let mut g = history.lock();
        (g.plane.next_event_seq(), g.snapshots_taken(), g.plane.stats.loans)
    };
    let readers = Readers::start(&url, args.readers, &args.read_path, args.reads_per_second);
    let t_read = Instant::now();
    let (mut starts, mut finishes) = (Vec::new(), Vec::new());
    gate.round_trips(args.round_trips, &mut starts, &mut finishes)?;
    let read_ms = readers.finish();
    let (snapshots, windows, apply_max, loans) = {
        let mut g = history.lock();
        let loans = g.plane.stats.loans - loans_before;
        (g.snapshots_taken() - snapshots_before, g.snapshot_windows(), g.apply_max, loans)
    };
    let (start_during, start_outside) = split_by_windows(&starts, &windows);
    let (finish_during, finish_outside) = split_by_windows(&finishes, &windows);
    let [start_during, start_outside, finish_during, finish_outside] =
        [&start_during, &start_outside, &finish_during, &finish_outside].map(|ms| Spread::of(ms));
    let during_n = start_during.n + finish_during.n;
    let during_max = start_during.max.max(finish_during.max);
    let outside_max = start_outside.max.max(finish_outside.max);
    let copy_max_ms = windows.iter().map(|w| w.copy.as_secs_f64() * 1e3).fold(0.0, f64::max);
    let (mut start_ms, mut finish_ms): (Vec<f64>, Vec<f64>) =
        (starts.iter().map(|t| t.1).collect(), finishes.iter().map(|t| t.1).collect());
    let reads_per_second = read_ms.len() as f64 / t_read.elapsed().as_secs_f64();
    if let Some(mut child) = slow {
        drop(child.stdin.take());
        let _ = child.wait();
    }
    let _ = stop.send(());
    let _ = rt.block_on(server);
    let _ = std::fs::remove_dir_all(&data);
    for v in [&mut submit_ms, &mut start_ms, &mut finish_ms] {
        v.sort_by(f64::total_cmp);
    }
    let r = Report {
        jobs: args.jobs,
        loans,
        slow_connections: args.slow_connections,
        submissions_per_second: submit_rate,
        submit_p50_ms: pct(&submit_ms, 0.5),
        submit_p99_ms: pct(&submit_ms, 0.99),
        round_trips: start_ms.len(),
        history_events,
        readers: args.readers,
        reads_per_second,
        read_p50_ms: pct(&read_ms, 0.5),
        start_p50_ms: pct(&start_ms, 0.5),
        start_p99_ms: pct(&start_ms, 0.99),
        start_max_ms: pct(&start_ms, 1.0),
        finish_p50_ms: pct(&finish_ms, 0.5),
        finish_p99_ms: pct(&finish_ms, 0.99),
        finish_max_ms: pct(&finish_ms, 1.0),
        snapshots,
        requests_during_snapshots: during_n,
        max_during_snapshots_ms: during_max,
        max_outside_snapshots_ms: outside_max,
        start_during_snapshots: start_during,
        start_outside_snapshots: start_outside,
        finish_during_snapshots: finish_during,
        finish_outside_snapshots: finish_outside,
        snapshot_copy_max_ms: copy_max_ms,
        apply_max_during_snapshots_ms: apply_max.during_snapshots.as_secs_f64() * 1e3,
        apply_max_outside_snapshots_ms: apply_max.at_other_times.as_secs_f64() * 1e3,
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(None, &render(&r, &args))
}

/// Registers `jobs` jobs (a production-like mix, each with explicit durations): each
/// submission's latency (ms), and submissions per second.
fn submit_all(c: &reqwest::blocking::Client, url: &str, jobs: usize) -> Result<(Vec<f64>, f64)> {
    let mut submit_ms = Vec::with_capacity(jobs);
    let start_all = Instant::now();
    for i in 0..jobs {
        let ty = ["7B_8k", "14B_8k", "3B_4k", "8B_16k"][i % 4];
        let body = serde_json::json!({ "id": format!("j{i}"), "type": ty, "iterations": 1000, "slo": 1.5 });
        let t = Instant::now();
        let st = c.post(format!("{url}/v1/jobs")).bearer_auth(DRIVER).json(&body).send()?.status().as_u16();
        if st != 201 {
            bail!("submission {i} answered {st}");
        }
        submit_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((submit_ms, jobs as f64 / start_all.elapsed().as_secs_f64()))
}

/// The report as a table.
fn render(r: &Report, args: &ServeBenchArgs) -> String {
    let mut t = table::new(&["measure", "p50 ms", "p99 ms", "max ms", "rate"]);
    t.add_row(vec![
        "submit (durable)".into(),
        format!("{:.2}", r.submit_p50_ms),
        format!("{:.2}", r.submit_p99_ms),
        String::new(),
        format!("{:.0}/s", r.submissions_per_second),
    ]);
    t.add_row(vec![
        "phase start (granted)".into(),
        format!("{:.2}", r.start_p50_ms),
        format!("{:.2}", r.start_p99_ms),
        format!("{:.2}", r.start_max_ms),
        String::new(),
    ]);
    t.add_row(vec![
        "phase finish (durable)".into(),
        format!("{:.2}", r.finish_p50_ms),
        format!("{:.2}", r.finish_p99_ms),
        format!("{:.2}", r.finish_max_ms),
        String::new(),
    ]);
    if r.readers > 0 {
        t.add_row(vec![
            format!("read {} (another tenant)", args.read_path),
            format!("{:.2}", r.read_p50_ms),
            String::new(),
            String::new(),
            format!("{:.0}/s", r.reads_per_second),
        ]);
    }
    if r.snapshots > 0 {
        t.add_row(vec![
            format!("gate while a snapshot was written ({} requests)", r.requests_during_snapshots),
            String::new(),
            String::new(),
            format!("{:.2}", r.max_during_snapshots_ms),
            String::new(),
        ]);
        for (what, during, outside) in [
            ("phase start (lock, no disk)", r.start_during_snapshots, r.start_outside_snapshots),
            ("phase finish (durable)", r.finish_during_snapshots, r.finish_outside_snapshots),
        ] {
            t.add_row(vec![
                format!("  {what}: during snapshots / other times"),
                String::new(),
                format!("{:.2} / {:.2}", during.p99, outside.p99),
                format!("{:.2} / {:.2}", during.max, outside.max),
                String::new(),
            ]);
        }
        t.add_row(vec![
            "snapshot's frozen copy (lock held)".into(),
            String::new(),
            String::new(),
            format!("{:.2}", r.snapshot_copy_max_ms),
            String::new(),
        ]);
        t.add_row(vec![
            "gate at other times".into(),
            String::new(),
            String::new(),
            format!("{:.2}", r.max_outside_snapshots_ms),
            String::new(),
        ]);
        t.add_row(vec![
            "applying a record (lock held, no disk): during snapshots / other times".into(),
            String::new(),
            String::new(),
            format!("{:.2} / {:.2}", r.apply_max_during_snapshots_ms, r.apply_max_outside_snapshots_ms),
            String::new(),
        ]);
    }
    table::align_numbers(&mut t);
    format!(
        "{} jobs registered, {} events of history, {} gate round trips, loopback, one gate client, {} readers, \
         {} slow connections held open, {} snapshots taken while measuring{}\n{t}\n",
        r.jobs,
        r.history_events,
        r.round_trips,
        r.readers,
        r.slow_connections,
        r.snapshots,
        if args.lending { format!(", lending on ({} loans made while measuring)", r.loans) } else { String::new() }
    )
}

/// A request: when it was sent and how long its answer took (ms).
type Timed = (Instant, f64);

/// The times (ms) of `requests` that overlapped one of `windows`, and of the others.
fn split_by_windows(requests: &[Timed], windows: &[SnapshotWindow]) -> (Vec<f64>, Vec<f64>) {
    let (mut during, mut outside) = (Vec::new(), Vec::new());
    for &(sent, ms) in requests {
        let answered = sent + Duration::from_secs_f64(ms / 1e3);
        if windows.iter().any(|w| sent <= w.ended && answered >= w.began) {
            during.push(ms);
        } else {
            outside.push(ms);
        }
    }
    (during, outside)
}

/// A set of request times (ms): how many, its 99th percentile and its longest.
#[derive(Clone, Copy, Default, Serialize)]
struct Spread {
    n: usize,
    p99: f64,
    max: f64,
}

impl Spread {
    fn of(ms: &[f64]) -> Spread {
        let mut sorted = ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread { n: sorted.len(), p99: pct(&sorted, 0.99), max: sorted.last().copied().unwrap_or(0.0) }
    }
}

/// The gate's driver: every job whose phase is granted at once runs it and reports it.
struct Gate<'a> {
    c: &'a reqwest::blocking::Client,
    url: &'a str,
    k: Vec<u64>,
    phase: Vec<&'static str>,
}

impl Gate<'_> {
    /// `n` round trips (start + finish), each request's start and latency (ms) pushed.
    fn round_trips(&mut self, n: usize, starts: &mut Vec<Timed>, finishes: &mut Vec<Timed>) -> Result<()> {
        let (c, url) = (self.c, self.url);
        let mut done = 0;
        while done < n {
            let mut progressed = false;
            for i in 0..self.k.len() {
                if done >= n {
                    return Ok(());
                }
                let (p, k) = (self.phase[i], self.k[i]);
                let t = Instant::now();
                let st = c
                    .post(format!("{url}/v1/jobs/j{i}/phases/{p}/{k}/start?wait_s=0"))
                    .bearer_auth(DRIVER)
                    .send()?
                    .status()
                    .as_u16();
                if st != 200 {
                    continue;
                }
                starts.push((t, t.elapsed().as_secs_f64() * 1e3));
                let t = Instant::now();
                let body = serde_json::json!({ "duration_s": 1.0 });
                let r = c.post(format!("{url}/v1/jobs/j{i}/phases/{p}/{k}/finish")).bearer_auth(DRIVER).json(&body);
                let st = r.send()?.status().as_u16();
                if st != 200 {
                    bail!("finish of j{i} answered {st}");
                }
                finishes.push((t, t.elapsed().as_secs_f64() * 1e3));
                done += 1;
                progressed = true;
                (self.phase[i], self.k[i]) = if p == "rollout" { ("train", k) } else { ("rollout", k + 1) };
            }
            if !progressed {
                bail!("no job could be granted a phase");
            }
        }
        Ok(())
    }
}
