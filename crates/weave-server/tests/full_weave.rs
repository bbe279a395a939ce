//! The server's default placement is full Weave, as `weave simulate` measures it: a job that
//! runs alone co-located is moved into the group a new job opens, once the iteration it holds
//! is done (a move never throws a phase away), and its driver learns of the new admission
//! from its next grant and resumes from the iteration the move names.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn spec(id: &str) -> Value {
    json!({ "id": id, "type": "7B_8k", "iterations": 6, "slo": 1.5 })
}

fn job(s: &TestServer, name: &str) -> Value {
    let (st, v) = body(client().get(s.url(&format!("/v1/jobs/{name}"))).bearer_auth(ALICE).send().unwrap());
    assert_eq!(st, 200, "{v}");
    v
}

/// Asks for a phase until it is granted; the grant's admission.
fn granted(s: &TestServer, name: &str, phase: &str, k: u64) -> u64 {
    loop {
        let (st, v) = start_phase(s, ALICE, name, phase, k, 2.0);
        match st {
            200 => return v["uid"].as_u64().expect("a grant names its admission"),
            202 => continue,
            _ => panic!("{name} {phase} {k}: {st} {v}"),
        }
    }
}

fn finish(s: &TestServer, name: &str, phase: &str, k: u64, uid: u64) -> (u16, Value) {
    finish_phase_with(s, ALICE, name, phase, k, json!({ "duration_s": 100.0, "uid": uid }))
}

#[test]
fn a_lone_job_is_paired_on_arrival_and_its_driver_resumes_where_the_move_says() {
    // The server's own default placement (the shared test setup pins the paper's).
    let s = TestServer::start_with(temp_dir("full-weave"), Duration::from_secs(600), |cfg| {
        cfg.placement = Default::default();
    });
    let (st, v) = submit(&s, ALICE, spec("a"));
    assert_eq!((st, &v["decision"]["kind"]), (201, &json!("colocated")), "alone, co-located is cheapest: {v}");
    // Three iterations of 100 s phases bank SLO slack for a move.
    for k in 0..3 {
        for phase in ["rollout", "train"] {
            let uid = granted(&s, "a", phase, k);
            assert_eq!(finish(&s, "a", phase, k, uid).0, 200);
        }
    }
    // a's driver holds rollout 3 when b (another tenant's, say) arrives: the probe's sequence.
    let old_uid = granted(&s, "a", "rollout", 3);
    let (st, v) = submit(&s, ALICE, spec("b"));
    assert_eq!((st, &v["decision"]["kind"]), (201, &json!("isolated")), "b opens a group: {v}");
    let b_group = v["job"]["group"].clone();
    let a = job(&s, "a");
    assert_eq!(a["job"]["uid"].as_u64(), Some(old_uid), "a keeps its admission while it holds a phase: {a}");
    assert!(a["history"].as_array().unwrap().iter().any(|e| e["kind"] == "move-deferred"), "{a}");
    // Its rollout and then its training finish under the admission they were granted in.
    assert_eq!(finish(&s, "a", "rollout", 3, old_uid).0, 200);
    let uid = granted(&s, "a", "train", 3);
    assert_eq!(uid, old_uid);
    assert_eq!(finish(&s, "a", "train", 3, old_uid).0, 200, "the training in flight is kept");
    // Then it moves, from the iteration after the one it finished.
    let a = job(&s, "a");
    assert_eq!(a["job"]["group"], b_group, "a moved into b's group: {a}");
    assert_ne!(a["job"]["uid"].as_u64(), Some(old_uid), "a new admission");
    let moved = a["history"].as_array().unwrap().iter().find(|e| e["kind"] == "moved").expect("a moved");
    assert_eq!(moved["meta"]["resume_from"], 4, "{moved}");
    // A report under the old admission is refused, naming where to resume.
    let (st, v) = finish(&s, "a", "rollout", 4, old_uid);
    let reason = v["error"].as_str().unwrap_or_default();
    assert_eq!(st, 409, "{v}");
    assert!(reason.contains("has ended"), "{reason}");
    // The driver resumes at iteration 4 and both jobs run to the end in one group, each
    // driver in its own thread (the group's cyclic order decides who goes first).
    std::thread::scope(|scope| {
        for (name, first) in [("a", 4), ("b", 0)] {
            let s = &s;
            scope.spawn(move || {
                for k in first..6 {
                    for phase in ["rollout", "train"] {
                        let uid = granted(s, name, phase, k);
                        assert_eq!(finish(s, name, phase, k, uid).0, 200, "{name} {phase} {k}");
                    }
                }
            });
        }
    });
    let a = job(&s, "a");
    assert_eq!(a["job"]["completed_iterations"], 6, "{a}");
    let train_3 = a["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "finish" && e["phase"] == "train" && e["iteration"] == 3)
        .count();
    assert_eq!(train_3, 1, "no iteration is done twice");
    let rollouts = |k: u64| {
        a["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "grant" && e["phase"] == "rollout" && e["iteration"] == k)
            .count()
    };
    assert!((0..6).all(|k| rollouts(k) == 1), "every rollout granted once: no phase thrown away: {a}");
    s.stop();
}

fn config(dir: &std::path::Path, consolidate: bool, chosen: bool) -> weave_server::ServerConfig {
    let mut cfg = common::config(dir.to_path_buf(), Duration::from_secs(60));
    cfg.placement = weave_server::state::PlacementConfig { consolidate, chosen, ..Default::default() };
    cfg
}

/// A store's records mean the placements they were decided under: the placement is recorded
/// beside a new store, and a restart under the other placement is refused naming the flag,
/// before anything is replayed; a store older than the record opens only once the operator
/// names its placement.
#[test]
fn a_store_opens_only_under_the_placement_it_was_written_with() {
    use weave_server::plane::{Record, SubmitSpec};
    use weave_server::{ServeError, Shared};
    let dir = temp_dir("placement-marker");
    let job: SubmitSpec = serde_json::from_value(spec("kept")).unwrap();
    let s = Shared::open(config(&dir, true, false)).unwrap();
    s.commit(|time_us| Record::Submit { time_us, tenant: "alice".into(), job }).unwrap();
    drop(s);
    assert_eq!(std::fs::read_to_string(dir.join("placement")).unwrap().trim(), "full-weave");
    let refused = Shared::open(config(&dir, false, true)).err().expect("refused");
    assert!(matches!(&refused, ServeError::Placement { .. }), "{refused}");
    assert!(refused.to_string().contains("without --disagg-only"), "{refused}");
    let again = Shared::open(config(&dir, true, false)).unwrap();
    assert!(again.lock().plane.job("kept").is_some(), "reopened under its own placement");
    // A periodic consolidation pass: a record only full Weave writes.
    again.commit(|time_us| Record::Consolidate { time_us }).unwrap();
    drop(again);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("placement")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the placement record has the store's mode");

    // A store written before the placement was recorded: refused until the operator says,
    // naming the flag the old default was.
    std::fs::remove_file(dir.join("placement")).unwrap();
    let unknown = Shared::open(config(&dir, true, false)).err().expect("refused");
    assert!(unknown.to_string().contains("start with --disagg-only"), "{unknown}");
    // A wrong guess whose replay fails records nothing, and names the other flag.
    let wrong = Shared::open(config(&dir, false, true)).err().expect("refused");
    assert!(wrong.to_string().contains("start with --consolidate"), "{wrong}");
    assert!(!dir.join("placement").exists(), "a failed replay recorded its guess");
    let named = Shared::open(config(&dir, true, true)).unwrap();
    assert!(named.lock().plane.job("kept").is_some());
    assert_eq!(std::fs::read_to_string(dir.join("placement")).unwrap().trim(), "full-weave");
}
