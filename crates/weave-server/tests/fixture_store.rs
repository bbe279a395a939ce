//! A store written by an earlier release opens and replays to the state that release held.
//! Each directory of `tests/fixtures/` was written by `write_the_fixture` (run it by hand with
//! `--ignored` when a release changes what it persists, into a new directory named in
//! `WRITTEN`, and keep the old ones): a snapshot and records after it, submissions of two
//! tenants, phases with metadata, a restart and a cancel. `expected.json` is what the writing
//! server answered, not what a replay computes. `store-0.1` holds snapshot format version 1,
//! `store-0.2` version 2.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every fixture kept, oldest first.
const FIXTURES: [&str; 2] = ["store-0.1", "store-0.2"];
/// Where `write_the_fixture` writes.
const WRITTEN: &str = "store-0.2";

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// What the test compares: each job's lasting fields, and the events' order and kinds.
fn summary(s: &TestServer) -> Value {
    let c = client();
    let (code, jobs) = body(c.get(s.url("/v1/jobs")).bearer_auth(OPS).send().unwrap());
    assert_eq!(code, 200, "{jobs}");
    let jobs: Vec<Value> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            json!({ "id": j["id"], "tenant": j["tenant"], "state": j["state"], "uid": j["uid"],
                    "completed_iterations": j["completed_iterations"], "group": j["group"] })
        })
        .collect();
    let (code, events) = body(c.get(s.url("/v1/events")).bearer_auth(OPS).send().unwrap());
    assert_eq!(code, 200, "{events}");
    let events: Vec<Value> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!([e["seq"], e["job"], e["kind"], e["phase"], e["iteration"]]))
        .collect();
    json!({ "jobs": jobs, "events": events })
}

/// Copies a data directory (with its snapshots' directory), all but `expected.json`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else if entry.file_name() != "expected.json" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn stores_written_by_earlier_releases_open_with_their_state() {
    for fixture in FIXTURES {
        let dir = temp_dir(&format!("fixture-{fixture}"));
        copy_dir(&fixture_dir(fixture), &dir);
        let expected = std::fs::read_to_string(fixture_dir(fixture).join("expected.json")).unwrap();
        let expected: Value = serde_json::from_str(&expected).unwrap();
        let s = TestServer::start_with(dir, Duration::from_secs(3600), |cfg| cfg.snapshot_every = 10);
        assert_eq!(summary(&s), expected, "{fixture}");
        // And it goes on: the running job takes its next phase.
        let (code, v) = start_phase(&s, ALICE, "a1", "rollout", 3, 5.0);
        assert_eq!(code, 200, "{fixture}: {v}");
        s.stop();
    }
}

fn phase(s: &TestServer, token: &str, job: &str, phase: &str, k: u64, meta: Value) {
    let (code, v) = start_phase(s, token, job, phase, k, 5.0);
    assert_eq!(code, 200, "{job} {phase} {k}: {v}");
    let (code, v) = finish_phase_with(s, token, job, phase, k, json!({ "duration_s": 2.0, "meta": meta }));
    assert_eq!(code, 200, "{job} {phase} {k} finish: {v}");
}

#[test]
#[ignore = "writes the fixture; run by hand when a release changes what it persists"]
fn write_the_fixture() {
    let dir = temp_dir("fixture-write");
    let s = TestServer::start_with(dir.clone(), Duration::from_secs(3600), |cfg| cfg.snapshot_every = 10);
    let spec =
        |id: &str| json!({ "id": id, "type": "7B_8k", "iterations": 50, "rollout_s": 100, "train_s": 100, "slo": 2.0 });
    assert_eq!(submit(&s, ALICE, spec("a1")).0, 201);
    assert_eq!(submit(&s, BOB, spec("b1")).0, 201);
    // The two share a group: their phases take turns.
    for k in 0..3 {
        phase(&s, ALICE, "a1", "rollout", k, json!({ "reward": k }));
        phase(&s, BOB, "b1", "rollout", k, json!({}));
        phase(&s, ALICE, "a1", "train", k, json!({ "switch": "warm", "switch_s": 0.5 }));
        phase(&s, BOB, "b1", "train", k, json!({}));
    }
    let r = client().post(s.url("/v1/jobs/b1/restart")).bearer_auth(BOB).json(&json!({ "reason": "died" })).send();
    assert_eq!(r.unwrap().status(), 200);
    assert_eq!(submit(&s, BOB, spec("b2")).0, 201);
    let r = client().delete(s.url("/v1/jobs/b2")).bearer_auth(BOB).send().unwrap();
    assert_eq!(r.status(), 200);
    // Wait for the snapshot writer, then leave records after the snapshot.
    while s.shared.lock().snapshot_in_flight() {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.shared.lock().snapshots_taken() > 0, "the fixture holds a snapshot");
    assert_eq!(submit(&s, ALICE, spec("a2")).0, 201);
    let expected = summary(&s);
    s.stop();
    let out = fixture_dir(WRITTEN);
    let _ = std::fs::remove_dir_all(&out);
    copy_dir(&dir, &out);
    std::fs::write(out.join("expected.json"), serde_json::to_string_pretty(&expected).unwrap() + "\n").unwrap();
}
