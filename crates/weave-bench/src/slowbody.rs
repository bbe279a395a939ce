//! `weave bench slow-bodies`: clients that send a request's headers and then its body a byte at
//! a time, reconnecting whenever the server cuts them, against `weave serve` as a process.
//! Measured: the server's resident memory before, at most during, and after they close; how
//! long the longest connection lived (the whole-body deadline must cut every one).

use crate::chaos::{client, start_with};
use crate::soak::rss_mb;
use anyhow::{bail, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weave_io::{json, write_output};

#[derive(clap::Args)]
pub struct SlowBodiesArgs {
    /// Slow clients at once.
    #[arg(long, default_value_t = 30)]
    connections: usize,
    /// How long they keep at it.
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// A body byte every this many milliseconds.
    #[arg(long, default_value_t = 200)]
    byte_every_ms: u64,
    /// The server's `--body-timeout-s` (its whole-body deadline).
    #[arg(long, default_value_t = 20.0)]
    body_timeout_s: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Report {
    connections: usize,
    minutes: f64,
    /// Connections the server cut (answered or closed) while their body was still coming.
    cut: u64,
    longest_connection_s: f64,
    body_timeout_s: f64,
    rss_mb_before: f64,
    rss_mb_max_during: f64,
    /// Ten seconds after the slow clients closed.
    rss_mb_after: f64,
}

/// One slow client: connects, sends headers declaring a 64 KiB body, then a byte every `gap`
/// until the server answers or closes; again until `stop`. Returns the longest connection.
fn slow_client(addr: String, gap: Duration, stop: Arc<AtomicBool>, cut: Arc<AtomicU64>) -> f64 {
    let mut longest = 0.0f64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(&addr) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let opened = Instant::now();
        let head = "POST /v1/jobs HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n\
                    Content-Length: 65536\r\n\r\n{";
        let _ = s.set_read_timeout(Some(Duration::from_millis(1)));
        let mut alive = s.write_all(head.as_bytes()).is_ok();
        while alive && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(gap);
            let mut buf = [0u8; 512];
            alive = match s.read(&mut buf) {
                // An answer (408) or a close: the server cut this body.
                Ok(_) => false,
                Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            } && s.write_all(b" ").is_ok();
        }
        if !alive {
            cut.fetch_add(1, Ordering::Relaxed);
            longest = longest.max(opened.elapsed().as_secs_f64());
        }
    }
    longest
}

pub fn run(args: SlowBodiesArgs) -> Result<()> {
    if args.connections == 0 || args.minutes <= 0.0 {
        bail!("--connections and --minutes must be positive");
    }
    let data = std::env::temp_dir().join(format!("weave-bench-slowbodies-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let timeout = args.body_timeout_s.to_string();
    let (server, _) = start_with(&data, &["--body-timeout-s", &timeout])?;
    let pid = server.0.id();
    let c = client()?;
    for i in 0..20 {
        let body = serde_json::json!({ "id": format!("warm-{i}"), "type": "3B_4k", "iterations": 1 });
        c.post(format!("{}/v1/jobs", server.1)).json(&body).send()?;
    }
    let mut r = Report {
        connections: args.connections,
        minutes: args.minutes,
        body_timeout_s: args.body_timeout_s,
        rss_mb_before: rss_mb(pid)?,
        ..Default::default()
    };
    let (stop, cut) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let addr = server.1.trim_start_matches("http://").to_string();
    let gap = Duration::from_millis(args.byte_every_ms);
    let clients: Vec<_> = (0..args.connections)
        .map(|_| {
            let (addr, stop, cut) = (addr.clone(), stop.clone(), cut.clone());
            std::thread::spawn(move || slow_client(addr, gap, stop, cut))
        })
        .collect();
    let end = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        r.rss_mb_max_during = r.rss_mb_max_during.max(rss_mb(pid)?);
    }
    stop.store(true, Ordering::Relaxed);
    for t in clients {
        r.longest_connection_s = r.longest_connection_s.max(t.join().unwrap_or(f64::INFINITY));
    }
    std::thread::sleep(Duration::from_secs(10));
    r.rss_mb_after = rss_mb(pid)?;
    r.cut = cut.load(Ordering::Relaxed);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    if args.json {
        return write_output(None, &json(&r)?);
    }
    write_output(
        None,
        &format!(
            "{} slow-body clients for {} min (a byte every {} ms, reconnecting when cut): {} connections cut, the \
             longest lived {:.1} s (body deadline {} s); server memory {:.1} MB before, {:.1} MB at most during, \
             {:.1} MB 10 s after they closed\n",
            r.connections,
            r.minutes,
            args.byte_every_ms,
            r.cut,
            r.longest_connection_s,
            r.body_timeout_s,
            r.rss_mb_before,
            r.rss_mb_max_during,
            r.rss_mb_after
        ),
    )
}
