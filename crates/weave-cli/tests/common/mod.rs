//! Helpers for tests that run the `weave` binary: one-shot commands, and `weave serve` as a
//! real process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const TOKEN: &str = "e2e-admin-token";

/// Runs `weave` with `args` to the end.
pub fn weave(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weave")).args(args).output().expect("weave runs")
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes `contents` to a file named `name` in this test process's own directory.
pub fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weave-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p
}

pub fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weave-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn tenants(d: &Path) -> PathBuf {
    let hash = Command::new(env!("CARGO_BIN_EXE_weave")).args(["token", "hash", TOKEN]).output().unwrap();
    let p = d.join("tenants.toml");
    std::fs::write(
        &p,
        format!(
            "[[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
            String::from_utf8_lossy(&hash.stdout).trim()
        ),
    )
    .unwrap();
    p
}

/// A server process that is killed when the test ends, even by a panic.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Server {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Starts the server placing as the paper's Weave (`--disagg-only`: the process tests check
/// two jobs sharing a group from their admissions); returns the child and its address.
pub fn serve(d: &Path) -> (Server, String) {
    serve_with(d, &[])
}

/// [`serve`] with extra arguments.
pub fn serve_with(d: &Path, extra: &[&str]) -> (Server, String) {
    serve_placing(d, &[&["--disagg-only"], extra].concat())
}

/// The server with its default placement (full Weave) and `extra` arguments.
pub fn serve_placing(d: &Path, extra: &[&str]) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weave"))
        .args(["serve", "--addr", "127.0.0.1:0", "--heartbeat-timeout-s", "120"])
        .args(extra)
        .arg("--data")
        .arg(d.join("data"))
        .arg("--tenants")
        .arg(tenants(d))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("weave serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr =
        line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("unexpected first line `{line}`")).to_string();
    (Server(child), format!("http://{addr}"))
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// Polls `ready` until it gives a value or `deadline` passes (then panics naming `what`).
/// Deadlines are generous: they only bound a hang on a loaded 2-core CI machine, and a
/// passing run returns as soon as the event happens.
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

/// The iterations whose training the server credited to `job`, in event order (the admin
/// token is sent; an open server ignores it).
pub fn trained_iterations(url: &str, job: &str) -> Vec<u64> {
    let events: serde_json::Value =
        client().get(format!("{url}/v1/events?after=0")).bearer_auth(TOKEN).send().unwrap().json().unwrap();
    let events = events.as_array().cloned().unwrap_or_default();
    events
        .iter()
        .filter(|e| e["job"] == job && e["kind"] == "finish" && e["phase"] == "train")
        .filter_map(|e| e["iteration"].as_u64())
        .collect()
}

/// One gauge or counter from the admin `/metrics` text, if the server answers.
pub fn metric(url: &str, name: &str) -> Option<f64> {
    let text = client().get(format!("{url}/metrics")).bearer_auth(TOKEN).send().ok()?.text().ok()?;
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
