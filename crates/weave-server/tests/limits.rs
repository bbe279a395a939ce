//! What one client may leave behind: every string and map a request keeps (a restart's reason,
//! a finish's metadata, a launch environment) is bounded where it is accepted, naming the
//! field and the bound, and the held history is bounded in bytes as well as in events.

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;
use weave_core::ClusterConfig;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{event_bytes, Plane, Record, Retention, SubmitSpec};

fn server(name: &str) -> TestServer {
    TestServer::start_with(temp_dir(name), Duration::from_secs(600), |cfg| cfg.max_body_bytes = 64 * 1024)
}

fn post(s: &TestServer, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    common::body(client().post(s.url(path)).bearer_auth(ALICE).json(&body).send().unwrap())
}

#[test]
fn a_restart_reason_is_bounded_and_nothing_is_recorded_past_it() {
    let s = server("limits-restart");
    assert_eq!(submit(&s, ALICE, json!({ "id": "j", "type": "3B_4k", "iterations": 3 })).0, 201);
    let before = get_events(&s).len();
    let (code, err) = post(&s, "/v1/jobs/j/restart", json!({ "reason": "x".repeat(201) }));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("at most 200 characters"), "{err}");
    let (code, err) = post(&s, "/v1/jobs/j/restart", json!({ "reason": "a\u{7}bell" }));
    assert_eq!(code, 400, "{err}");
    assert_eq!(get_events(&s).len(), before, "a refused restart leaves no event");
    assert_eq!(post(&s, "/v1/jobs/j/restart", json!({ "reason": "x".repeat(200) })).0, 200);
}

#[test]
fn a_finish_meta_is_a_bounded_object() {
    let s = server("limits-meta");
    assert_eq!(submit(&s, ALICE, json!({ "id": "j", "type": "3B_4k", "iterations": 3 })).0, 201);
    assert_eq!(start_phase(&s, ALICE, "j", "rollout", 0, 5.0).0, 200);
    let finish = |meta: serde_json::Value| {
        post(&s, "/v1/jobs/j/phases/rollout/0/finish", json!({ "duration_s": 1.0, "meta": meta }))
    };
    let (code, err) = finish(json!({ "blob": "y".repeat(5000) }));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("at most 4096"), "{err}");
    let (code, err) = finish(json!(["not", "an", "object"]));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("`meta`"), "{err}");
    // Refused finishes changed nothing: the phase is still open and finishes within the bound.
    assert_eq!(finish(json!({ "blob": "y".repeat(4000) })).0, 200);
}

#[test]
fn a_launch_environment_is_bounded() {
    let s = server("limits-env");
    let launch = |value: String| json!({ "entrypoint": "python3 train.py", "env": { "BIG": value } });
    let spec = |id: &str, value: String| json!({ "id": id, "type": "3B_4k", "iterations": 3, "launch": launch(value) });
    let (code, err) = submit(&s, ALICE, spec("big", "z".repeat(17_000)));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("`launch.env`"), "{err}");
    let (code, err) = submit(&s, ALICE, spec("nul", "a\u{0}b".into()));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("NUL"), "{err}");
    assert_eq!(submit(&s, ALICE, spec("fits", "z".repeat(16_000))).0, 201);
}

fn get_events(s: &TestServer) -> Vec<serde_json::Value> {
    let (code, v) = common::body(client().get(s.url("/v1/events")).bearer_auth(OPS).send().unwrap());
    assert_eq!(code, 200, "{v}");
    v.as_array().unwrap().clone()
}

/// The plane holds at most its byte budget of events, whatever their metadata, however many
/// fit the count: restarts with the longest allowed reason, forever, keep the held history
/// under the budget, and the newest events are the ones kept.
#[test]
fn held_events_stay_within_their_byte_budget() {
    let budget = 64 * 1024;
    let cluster = ClusterConfig::default();
    let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    let mut p = Plane::new(cluster, cfg).with_retention(Retention { events: 1_000_000, event_bytes: budget, jobs: 10 });
    let spec: SubmitSpec = serde_json::from_value(json!({ "id": "j", "type": "3B_4k", "iterations": 3 })).unwrap();
    p.apply(&Record::Submit { time_us: 0, tenant: "alice".into(), job: spec }).unwrap();
    let reason = "r".repeat(200);
    for t in 1..2000u64 {
        p.apply(&Record::Restart { time_us: t * 1000, job: "j".into(), reason: reason.clone() }).unwrap();
        let held: u64 = p.events().iter().map(|e| event_bytes(e)).sum();
        assert!(held <= budget, "after {t} restarts {held} bytes are held, over {budget}");
    }
    let newest = p.events().last().unwrap().seq;
    assert_eq!(newest + 1, p.next_event_seq(), "the newest event is always kept");
    assert!(p.events().len() > 50, "the budget holds what fits, not a handful");
}
