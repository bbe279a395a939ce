//! `weave serve --otlp-endpoint`: a small OTLP/HTTP receiver started by the test gets the
//! spans of a two-job run, with parent/child links and the attributes the issue names.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{client, dir, serve_with, TOKEN};

type Spans = Arc<Mutex<Vec<Span>>>;

/// Accepts OTLP/HTTP protobuf exports on a loopback port; returns its traces URL.
fn receiver(spans: Spans) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let spans = spans.clone();
            std::thread::spawn(move || serve_exports(conn, spans));
        }
    });
    url
}

/// One keep-alive connection: each request body is an `ExportTraceServiceRequest`.
fn serve_exports(conn: TcpStream, spans: Spans) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0u8; length];
        r.read_exact(&mut body).unwrap();
        let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf export");
        for rs in req.resource_spans {
            for ss in rs.scope_spans {
                spans.lock().unwrap().extend(ss.spans);
            }
        }
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if w.write_all(ok.as_bytes()).is_err() {
            return;
        }
    }
}

fn attr(s: &Span, key: &str) -> Option<Value> {
    s.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
}

fn text(s: &Span, key: &str) -> String {
    match attr(s, key) {
        Some(Value::StringValue(v)) => v,
        other => panic!("{key}: {other:?} in span {}", s.name),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Drives two jobs that share a rollout node through their iterations with short polls;
/// returns every grant's `traceparent` by (job, phase, iteration).
fn run_two_jobs(url: &str) -> BTreeMap<(String, String, u64), String> {
    let c = client();
    for id in ["a", "b"] {
        let spec = serde_json::json!({ "id": id, "type": "3B_4k", "iterations": 2, "rollout_s": 50, "train_s": 200, "slo": 2.0 });
        assert_eq!(c.post(format!("{url}/v1/jobs")).bearer_auth(TOKEN).json(&spec).send().unwrap().status(), 201);
    }
    let mut next: BTreeMap<&str, (&str, u64)> = [("a", ("rollout", 0)), ("b", ("rollout", 0))].into();
    let mut parents = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !next.is_empty() {
        assert!(Instant::now() < deadline, "the two jobs did not finish: {next:?}");
        for (job, (phase, k)) in next.clone() {
            let start = format!("{url}/v1/jobs/{job}/phases/{phase}/{k}/start?wait_s=0.05");
            let r = c.post(start).bearer_auth(TOKEN).send().unwrap();
            if r.status() != 200 {
                continue;
            }
            let body: serde_json::Value = r.json().unwrap();
            let tp = body["traceparent"].as_str().expect("a traceparent with tracing on").to_string();
            parents.insert((job.to_string(), phase.to_string(), k), tp);
            std::thread::sleep(Duration::from_millis(20));
            let finish = format!("{url}/v1/jobs/{job}/phases/{phase}/{k}/finish");
            let d = if phase == "rollout" { 50.0 } else { 200.0 };
            let r = c.post(finish).bearer_auth(TOKEN).json(&serde_json::json!({ "duration_s": d })).send().unwrap();
            assert_eq!(r.status(), 200);
            match (phase, k) {
                ("rollout", k) => next.insert(job, ("train", k)),
                (_, 0) => next.insert(job, ("rollout", 1)),
                _ => next.remove(job),
            };
        }
    }
    parents
}

#[test]
fn a_two_job_run_exports_linked_phase_spans() {
    let spans: Spans = Arc::new(Mutex::new(Vec::new()));
    let endpoint = receiver(spans.clone());
    let d = dir("otlp");
    let (mut server, url) = serve_with(&d, &["--otlp-endpoint", &endpoint]);
    let parents = run_two_jobs(&url);
    // A clean shutdown flushes what the batch exporter still holds.
    assert!(Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap().success());
    assert!(server.0.wait().unwrap().success());
    let spans = spans.lock().unwrap().clone();

    let roots: Vec<&Span> = spans.iter().filter(|s| s.name == "weave.job").collect();
    assert_eq!(roots.len(), 2, "one span per admission: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    assert_ne!(roots[0].trace_id, roots[1].trace_id, "a trace per admission");
    for r in &roots {
        assert!(r.parent_span_id.is_empty());
        assert_eq!(text(r, "weave.outcome"), "completed");
        assert_eq!(text(r, "weave.tenant"), "ops");
    }
    let phases: Vec<&Span> = spans.iter().filter(|s| s.name == "weave.phase").collect();
    assert_eq!(phases.len(), 8, "2 jobs x 2 iterations x 2 phases");
    for p in &phases {
        let job = text(p, "weave.job");
        let root = roots.iter().find(|r| text(r, "weave.job") == job).unwrap();
        assert_eq!(
            (&p.trace_id, &p.parent_span_id),
            (&root.trace_id, &root.span_id),
            "a phase is its admission's child"
        );
        let phase = text(p, "weave.phase");
        let Some(Value::IntValue(k)) = attr(p, "weave.iteration") else { panic!("weave.iteration") };
        for key in ["weave.wait_s", "weave.duration_s"] {
            assert!(matches!(attr(p, key), Some(Value::DoubleValue(v)) if v >= 0.0), "{key}");
        }
        assert!(matches!(attr(p, "weave.group"), Some(Value::IntValue(g)) if g >= 0));
        assert!(!text(p, "weave.rollout_nodes").is_empty() && !text(p, "weave.training_nodes").is_empty());
        // The grant told the job this span's context.
        let tp = &parents[&(job.clone(), phase.clone(), k as u64)];
        assert_eq!(tp, &format!("00-{}-{}-01", hex(&p.trace_id), hex(&p.span_id)));
        assert!(p.end_time_unix_nano >= p.start_time_unix_nano);
    }
    // The two share a rollout node: one of them waited for a grant.
    let waited = phases.iter().any(|p| matches!(attr(p, "weave.wait_s"), Some(Value::DoubleValue(v)) if v > 0.0));
    assert!(waited, "some phase waited for its grant");
    // Switches (each job's first rollout loads cold) and syncs nest under their phase.
    let children = |name: &str| spans.iter().filter(move |s| s.name == name).collect::<Vec<_>>();
    let switches = children("weave.switch");
    assert!(switches.iter().any(|s| text(s, "weave.switch") == "cold"), "first starts are cold");
    for s in switches.iter().chain(children("weave.sync").iter()) {
        assert!(phases.iter().any(|p| p.span_id == s.parent_span_id && p.trace_id == s.trace_id), "{}", s.name);
    }
    assert_eq!(children("weave.sync").len(), 4, "a weight sync after each disaggregated training");
}

#[test]
fn without_the_flag_grants_carry_no_trace_context() {
    let d = dir("otlp-off");
    let (_server, url) = serve_with(&d, &[]);
    let c = client();
    let spec = serde_json::json!({ "id": "solo", "type": "3B_4k", "iterations": 1, "rollout_s": 5, "train_s": 5 });
    assert_eq!(c.post(format!("{url}/v1/jobs")).bearer_auth(TOKEN).json(&spec).send().unwrap().status(), 201);
    let r = c.post(format!("{url}/v1/jobs/solo/phases/rollout/0/start?wait_s=1")).bearer_auth(TOKEN).send().unwrap();
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["status"], "granted");
    assert!(body.get("traceparent").is_none(), "{body}");
}

#[test]
fn a_bad_endpoint_is_refused_at_start() {
    let o = Command::new(env!("CARGO_BIN_EXE_weave"))
        .args(["serve", "--insecure-no-auth", "--addr", "127.0.0.1:0", "--otlp-endpoint", "collector:4318"])
        .arg("--data")
        .arg(dir("otlp-bad").join("data"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--otlp-endpoint collector:4318") && err.contains("http://"), "{err}");
}
