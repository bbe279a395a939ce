//! `weave bench serve`: submissions per second and phase-gate round trips against an
//! in-process `weave serve` on loopback. Bounded: a fixed number of requests.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weave_core::ClusterConfig;
use weave_io::table;
use weave_io::{json, write_output};
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
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    jobs: usize,
    slow_connections: usize,
    submissions_per_second: f64,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    round_trips: usize,
    start_p50_ms: f64,
    start_p99_ms: f64,
    finish_p50_ms: f64,
    finish_p99_ms: f64,
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(0.0)
}

/// The server a benchmark runs in process: open access, the paper's testbed, elastic pools,
/// no heartbeat expiry within a run.
pub fn bench_config(data: std::path::PathBuf) -> ServerConfig {
    ServerConfig {
        data_dir: data,
        tenants: Tenants::open_access(),
        cluster: ClusterConfig::default(),
        capacity: weave_server::Capacity::Elastic,
        heartbeat_timeout: Duration::from_secs(3600),
        max_body_bytes: 64 * 1024,
        max_wait: Duration::from_secs(5),
        max_staleness: weave_core::MAX_STALENESS,
        placement: Default::default(),
        limits: Default::default(),
        snapshot_every: weave_server::DEFAULT_SNAPSHOT_EVERY,
        retention: Default::default(),
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
    let held: Vec<std::net::TcpStream> = (0..args.count)
        .map(|i| -> Result<std::net::TcpStream> {
            let mut s = std::net::TcpStream::connect(args.addr).with_context(|| format!("slow connection {i}"))?;
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

pub fn run(args: ServeBenchArgs) -> Result<()> {
    weave_server::raise_open_file_limit();
    if args.jobs == 0 || args.round_trips == 0 {
        bail!("--jobs and --round-trips must be at least 1");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut cfg = bench_config(data.clone());
    // Slow clients are held for the whole measurement, not cut.
    cfg.limits.header_timeout = Duration::from_secs(3600);
    let mut shared = Shared::open(cfg).context("cannot open the benchmark store")?;
    if let Some(url) = &args.otlp_endpoint {
        let telemetry = weave_server::telemetry::Telemetry::otlp(url, shared.now_us())?;
        shared = shared.with_telemetry(telemetry);
    }
    let shared = Arc::new(shared);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(weave_server::serve(listener, shared, async move {
        let _ = stopped.await;
    }));
    let url = format!("http://{addr}");
    let slow = slow_client_process(addr, args.slow_connections)?;
    let c = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let time = |f: &mut dyn FnMut() -> Result<u16>| -> Result<(u16, f64)> {
        let t = Instant::now();
        let s = f()?;
        Ok((s, t.elapsed().as_secs_f64() * 1e3))
    };
    // Register the jobs: a production-like mix, each with explicit durations.
    let mut submit_ms = Vec::with_capacity(args.jobs);
    let start_all = Instant::now();
    for i in 0..args.jobs {
        let ty = ["7B_8k", "14B_8k", "3B_4k", "8B_16k"][i % 4];
        let body = serde_json::json!({ "id": format!("j{i}"), "type": ty, "iterations": 1000, "slo": 1.5 });
        let (st, ms) = time(&mut || Ok(c.post(format!("{url}/v1/jobs")).json(&body).send()?.status().as_u16()))?;
        if st != 201 {
            bail!("submission {i} answered {st}");
        }
        submit_ms.push(ms);
    }
    let submit_rate = args.jobs as f64 / start_all.elapsed().as_secs_f64();
    // Round trips: every job whose rollout is granted right away runs rollout then training.
    let mut start_ms = Vec::new();
    let mut finish_ms = Vec::new();
    let mut k = vec![0u64; args.jobs];
    let mut phase = vec!["rollout"; args.jobs];
    'outer: while start_ms.len() < args.round_trips {
        let mut progressed = false;
        for i in 0..args.jobs {
            if start_ms.len() >= args.round_trips {
                break 'outer;
            }
            let p = phase[i];
            let (st, ms) = time(&mut || {
                Ok(c.post(format!("{url}/v1/jobs/j{i}/phases/{p}/{}/start?wait_s=0", k[i])).send()?.status().as_u16())
            })?;
            if st != 200 {
                continue;
            }
            start_ms.push(ms);
            let body = serde_json::json!({ "duration_s": 1.0 });
            let (st, ms) = time(&mut || {
                Ok(c.post(format!("{url}/v1/jobs/j{i}/phases/{p}/{}/finish", k[i]))
                    .json(&body)
                    .send()?
                    .status()
                    .as_u16())
            })?;
            if st != 200 {
                bail!("finish of j{i} answered {st}");
            }
            finish_ms.push(ms);
            progressed = true;
            if p == "rollout" {
                phase[i] = "train";
            } else {
                phase[i] = "rollout";
                k[i] += 1;
            }
        }
        if !progressed {
            bail!("no job could be granted a phase");
        }
    }
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
        slow_connections: args.slow_connections,
        submissions_per_second: submit_rate,
        submit_p50_ms: pct(&submit_ms, 0.5),
        submit_p99_ms: pct(&submit_ms, 0.99),
        round_trips: start_ms.len(),
        start_p50_ms: pct(&start_ms, 0.5),
        start_p99_ms: pct(&start_ms, 0.99),
        finish_p50_ms: pct(&finish_ms, 0.5),
        finish_p99_ms: pct(&finish_ms, 0.99),
    };
    if args.json {
        return write_output(None, &json(&r)?);
    }
    let mut t = table::new(&["measure", "p50 ms", "p99 ms", "rate"]);
    t.add_row(vec![
        "submit (durable)".into(),
        format!("{:.2}", r.submit_p50_ms),
        format!("{:.2}", r.submit_p99_ms),
        format!("{:.0}/s", r.submissions_per_second),
    ]);
    t.add_row(vec![
        "phase start (granted)".into(),
        format!("{:.2}", r.start_p50_ms),
        format!("{:.2}", r.start_p99_ms),
        String::new(),
    ]);
    t.add_row(vec![
        "phase finish (durable)".into(),
        format!("{:.2}", r.finish_p50_ms),
        format!("{:.2}", r.finish_p99_ms),
        String::new(),
    ]);
    table::align_numbers(&mut t);
    write_output(
        None,
        &format!(
            "{} jobs registered, {} gate round trips, loopback, one client, {} slow connections held open\n{t}\n",
            r.jobs, r.round_trips, r.slow_connections
        ),
    )
}
