#![allow(dead_code)]

use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weave_server::auth::{hex, sha256};
use weave_server::state::PlacementConfig;
use weave_server::{ServerConfig, Shared, Tenants};

pub const ALICE: &str = "alice-token";
pub const BOB: &str = "bob-token";
pub const OPS: &str = "ops-token";

pub fn tenants() -> Tenants {
    let text = format!(
        "[[tenant]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
        hex(&sha256(ALICE)),
        hex(&sha256(BOB)),
        hex(&sha256(OPS))
    );
    Tenants::from_toml(&text).unwrap()
}

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weave-server-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct TestServer {
    pub addr: SocketAddr,
    /// The server's state, for tests that look under the HTTP API (snapshots in flight).
    pub shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The tests' server configuration on `dir`. The gate's, the API's and durability's tests
/// expect the paper's placements (a second job joins the first's group); full Weave, the
/// server's default, has tests of its own (`consolidation.rs`, `full_weave.rs`).
pub fn config(dir: PathBuf, heartbeat: Duration) -> ServerConfig {
    ServerConfig {
        tenants: tenants(),
        heartbeat_timeout: heartbeat,
        max_body_bytes: 16 * 1024,
        max_wait: Duration::from_secs(5),
        placement: PlacementConfig { consolidate: false, ..Default::default() },
        ..ServerConfig::new(dir)
    }
}

impl TestServer {
    pub fn start(dir: PathBuf, heartbeat: Duration) -> TestServer {
        Self::start_with(dir, heartbeat, |_| {})
    }

    /// [`TestServer::start`] with the configuration changed by `change` first.
    pub fn start_with(dir: PathBuf, heartbeat: Duration, change: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let mut cfg = config(dir, heartbeat);
        change(&mut cfg);
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let shared = Arc::new(Shared::open(cfg).unwrap());
                tx.send((listener.local_addr().unwrap(), shared.clone())).unwrap();
                weave_server::serve(listener, shared, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let (addr, shared) = rx.recv_timeout(Duration::from_secs(20)).expect("server starts");
        TestServer { addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub fn client() -> Client {
    Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

pub fn body(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let v = r.json().unwrap_or(Value::Null);
    (status, v)
}

pub fn submit(s: &TestServer, token: &str, spec: Value) -> (u16, Value) {
    body(client().post(s.url("/v1/jobs")).bearer_auth(token).json(&spec).send().unwrap())
}

pub fn start_phase(s: &TestServer, token: &str, job: &str, phase: &str, it: u64, wait_s: f64) -> (u16, Value) {
    body(
        client()
            .post(s.url(&format!("/v1/jobs/{job}/phases/{phase}/{it}/start?wait_s={wait_s}")))
            .bearer_auth(token)
            .send()
            .unwrap(),
    )
}

pub fn finish_phase(s: &TestServer, token: &str, job: &str, phase: &str, it: u64, secs: f64) -> (u16, Value) {
    finish_phase_with(s, token, job, phase, it, json!({ "duration_s": secs }))
}

/// A phase's finish with the whole body given (metadata, the admission's uid).
pub fn finish_phase_with(s: &TestServer, token: &str, job: &str, phase: &str, it: u64, finish: Value) -> (u16, Value) {
    body(
        client()
            .post(s.url(&format!("/v1/jobs/{job}/phases/{phase}/{it}/finish")))
            .bearer_auth(token)
            .json(&finish)
            .send()
            .unwrap(),
    )
}

/// Runs `iterations` of a job through the gate: ask, wait until granted, finish.
pub fn run_job(s: &TestServer, token: &str, job: &str, iterations: u64) {
    for k in 0..iterations {
        for phase in ["rollout", "train"] {
            loop {
                let (st, v) = start_phase(s, token, job, phase, k, 2.0);
                match st {
                    200 => break,
                    202 => continue,
                    _ => panic!("{job} {phase} {k}: {st} {v}"),
                }
            }
            let (st, v) = finish_phase(s, token, job, phase, k, 0.01);
            assert_eq!(st, 200, "{job} {phase} {k}: {v}");
        }
    }
}

/// Polls `ready` until it gives a value or `deadline` passes (then panics naming `what`).
/// The deadline only bounds a hang on a loaded 2-core CI machine.
pub fn wait_until<T>(what: &str, deadline: Duration, mut ready: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + deadline;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(std::time::Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Phase-start long-polls parked in the server now (admin `/metrics`).
pub fn parked(s: &TestServer) -> Option<u64> {
    let text = client().get(s.url("/metrics")).bearer_auth(OPS).send().ok()?.text().ok()?;
    text.lines().find_map(|l| l.strip_prefix("weave_parked_phase_requests ")?.trim().parse().ok())
}

/// An agentic declaration (a few turns, normal environment steps of `env_mean_s`, 1-core
/// sandboxes of 2 GiB).
pub fn agentic(env_mean_s: f64) -> Value {
    json!({ "turns": { "short_mean": 2, "long_mean": 8, "long_share": 0.3, "max": 16 }, "gen_s_per_turn": 2,
            "env": { "dist": "normal", "mean_s": env_mean_s, "sigma_s": 1 },
            "startup": { "cold_s": 5, "cached_s": 0.5, "cached_share": 0.9 }, "sandbox": { "cores": 1, "mem_gib": 2 } })
}
