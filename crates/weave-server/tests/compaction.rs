//! The server compacts its store: after `snapshot_every` records it snapshots the plane and
//! drops the records the snapshot covers; a restart loads the snapshot and replays the rest,
//! and every job, queue entry and event is as before.

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;

fn server(dir: std::path::PathBuf, every: u64) -> TestServer {
    TestServer::start_with(dir, Duration::from_secs(600), move |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = 2;
        cfg.cluster.training.nodes = 2;
        cfg.snapshot_every = every;
    })
}

fn get(s: &TestServer, path: &str) -> serde_json::Value {
    let (st, v) = body(client().get(s.url(path)).bearer_auth(OPS).send().unwrap());
    assert_eq!(st, 200, "{path}: {v}");
    v
}

/// Three 3-iteration jobs of alice's (two fit the 2 + 2 nodes; c waits for a).
fn submit_a_b_c(s: &TestServer) {
    let spec =
        |id: &str| json!({ "id": id, "type": "3B_4k", "iterations": 3, "rollout_s": 50, "train_s": 60, "slo": 1.0 });
    for id in ["a", "b", "c"] {
        assert!(matches!(submit(s, ALICE, spec(id)).0, 201 | 202));
    }
}

/// Waits until no snapshot is being written in the background.
fn settle_snapshots(s: &TestServer) {
    wait_until("the snapshot writer to finish", Duration::from_secs(60), || {
        (!s.shared.lock().snapshot_in_flight()).then_some(())
    });
}

/// What a restart must find as it was: jobs, queue, events, groups.
fn everything(s: &TestServer) -> [serde_json::Value; 4] {
    ["/v1/jobs", "/v1/queue", "/v1/events", "/v1/groups"].map(|path| get(s, path))
}

#[test]
fn a_restart_after_compaction_finds_everything_as_it_was() {
    let dir = temp_dir("compaction");
    let s = server(dir.clone(), 7);
    submit_a_b_c(&s);
    run_job(&s, ALICE, "a", 3); // c starts when a is done
    run_job(&s, ALICE, "b", 1);
    // Compaction bounds the log's tail. A snapshot starts on the first record that finds at
    // least `every` records after the newest one and no snapshot being written; records that
    // land while one is written wait for the next record to be looked at. So once the writer
    // is idle and one more record has been applied, fewer than `every` records follow the
    // newest snapshot, however the writer's timing fell.
    settle_snapshots(&s);
    assert!(matches!(
        submit(&s, ALICE, json!({ "id": "d", "type": "3B_4k", "iterations": 1, "slo": 1.0 })).0,
        201 | 202
    ));
    settle_snapshots(&s);
    let tail = s.shared.lock().records_since_snapshot();
    assert!(tail < 7, "{tail} records after the newest snapshot");
    let before = everything(&s);
    s.stop();
    let v = weave_store::verify::<weave_server::plane::Record>(&dir.join("weave.redb")).unwrap();
    let at = v.snapshot_at.expect("the store was compacted");
    assert!(v.records < 7 && at >= 7, "{v:?}");
    assert_eq!(v.records, tail, "the store on disk is what the server counted");
    assert_eq!(v.first_bad, None);

    let s = server(dir.clone(), 7);
    let after = everything(&s);
    assert_eq!(before, after);
    // And it goes on: b and c run to the end.
    run_job(&s, ALICE, "c", 3);
    let (_, v) = body(client().get(s.url("/v1/jobs/b")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["next"], "rollout 1", "{v}");
    s.stop();
    // A server that never snapshots reads a compacted store all the same.
    let s = server(dir, 0);
    assert_eq!(get(&s, "/v1/jobs/c")["job"]["state"], "completed");
}

/// The newest snapshot damaged on disk: the server starts from the one before it (or from the
/// first record, if this was the first snapshot: snapshots are written in the background, so
/// how many were taken depends on timing) and the records kept after that, and every job,
/// queue entry and event is as before.
#[test]
fn a_damaged_newest_snapshot_is_passed_over_at_restart() {
    let dir = temp_dir("compaction-damaged");
    let s = server(dir.clone(), 5);
    submit_a_b_c(&s);
    run_job(&s, ALICE, "a", 3);
    run_job(&s, ALICE, "b", 2);
    let before = everything(&s);
    s.stop();
    let mut snaps: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join("weave.snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    snaps.sort();
    assert!((1..=2).contains(&snaps.len()), "the newest snapshot and at most the one before it: {snaps:?}");
    let newest = snaps.last().unwrap();
    let mut bytes = std::fs::read(newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(newest, &bytes).unwrap();
    let v = weave_store::verify::<weave_server::plane::Record>(&dir.join("weave.redb")).unwrap();
    assert!(v.passed_over.is_some() && v.first_bad.is_none(), "{v:?}");

    let s = server(dir, 5);
    let after = everything(&s);
    assert_eq!(before, after);
    run_job(&s, ALICE, "c", 3);
}
