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
    let (code, err) = submit(&s, ALICE, spec("big", "z".repeat(4_100)));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("`launch.env`"), "{err}");
    let (code, err) = submit(&s, ALICE, spec("nul", "a\u{0}b".into()));
    assert_eq!(code, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("NUL"), "{err}");
    assert_eq!(submit(&s, ALICE, spec("fits", "z".repeat(4_000))).0, 201);
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

/// A server that admitted many jobs holds the names of the ones it still runs or retains,
/// not one per admission ever made (the 60-minute soak's memory crept by about 25 bytes per
/// admission).
#[test]
fn names_of_admissions_let_go_are_not_held() {
    let cluster = ClusterConfig::default();
    let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    let mut p = Plane::new(cluster, cfg).with_retention(Retention { jobs: 10, ..Retention::default() });
    for i in 0..500u64 {
        let spec: SubmitSpec =
            serde_json::from_value(json!({ "id": format!("j{i}"), "type": "3B_4k", "iterations": 3 })).unwrap();
        p.apply(&Record::Submit { time_us: i * 10, tenant: "alice".into(), job: spec }).unwrap();
        p.apply(&Record::Cancel { time_us: i * 10 + 5, job: format!("j{i}") }).unwrap();
    }
    assert!(p.held_names() <= 10, "{} names held after 500 admissions, 10 retained", p.held_names());
    // Numbers keep counting: the next admission is not given an old one.
    let spec: SubmitSpec = serde_json::from_value(json!({ "id": "last", "type": "3B_4k", "iterations": 3 })).unwrap();
    p.apply(&Record::Submit { time_us: 10_000, tenant: "alice".into(), job: spec }).unwrap();
    assert_eq!(p.job("last").map(|j| j.id.0), Some(500));
}

/// The smaller findings of the third hardening round, each refused as it should be.
#[test]
fn arrays_odd_node_names_and_extractor_refusals_get_json_errors() {
    let s = server("limits-small");
    // A JSON array where an object is meant: serde would read the fields in order.
    let r = client().post(s.url("/v1/jobs")).bearer_auth(ALICE).json(&json!(["x", "3B_4k", 3])).send().unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().unwrap();
    assert!(v["error"].as_str().unwrap().contains("expected a JSON object"), "{v}");
    // `r00` is not another name of `r0`.
    let r = client().post(s.url("/v1/nodes/r00/down")).bearer_auth(OPS).send().unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().unwrap();
    assert!(v["error"].as_str().unwrap().contains("`r0`"), "{v}");
    // A path the extractor refuses (an iteration that is not a number), and a bad query.
    for path in ["/v1/jobs/j/phases/rollout/first/start", "/v1/events?after=soon"] {
        let method = if path.ends_with("start") { reqwest::Method::POST } else { reqwest::Method::GET };
        let r = client().request(method, s.url(path)).bearer_auth(ALICE).send().unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let ct = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
        assert_eq!(ct.as_deref(), Some("application/json"), "{path}");
        let v: serde_json::Value = r.json().unwrap();
        assert!(v["error"].is_string(), "{path}: {v}");
    }
}

/// `/status` is rate-limited per token like every other authenticated endpoint, with the
/// token in its query as a browser sends it.
#[test]
fn the_status_page_is_rate_limited() {
    let s = TestServer::start_with(temp_dir("limits-status"), Duration::from_secs(600), |cfg| {
        cfg.limits.rate = Some((1, 2));
    });
    let codes: Vec<u16> = (0..4)
        .map(|_| client().get(s.url(&format!("/status?token={ALICE}"))).send().unwrap().status().as_u16())
        .collect();
    assert_eq!(&codes[..2], &[200, 200], "{codes:?}");
    assert!(codes[2..].contains(&429), "the burst of 2 is spent: {codes:?}");
    // Another tenant's token is not slowed by it.
    assert_eq!(client().get(s.url(&format!("/status?token={BOB}"))).send().unwrap().status(), 200);
}

/// One tenant cannot fill the server with jobs: past its cap of running or queued jobs a
/// submission is refused (429), other tenants are not, and a finished slot is free again.
#[test]
fn a_tenants_jobs_are_capped() {
    let s =
        TestServer::start_with(temp_dir("limits-jobs"), Duration::from_secs(600), |cfg| cfg.max_jobs_per_tenant = 2);
    let spec = |id: &str| json!({ "id": id, "type": "3B_4k", "iterations": 3 });
    assert_eq!(submit(&s, ALICE, spec("a1")).0, 201);
    assert_eq!(submit(&s, ALICE, spec("a2")).0, 201);
    let (code, err) = submit(&s, ALICE, spec("a3"));
    assert_eq!(code, 429, "{err}");
    assert!(err["error"].as_str().unwrap().contains("--max-jobs-per-tenant"), "{err}");
    assert_eq!(submit(&s, BOB, spec("b1")).0, 201, "another tenant is not held to alice's cap");
    let r = client().delete(s.url("/v1/jobs/a1")).bearer_auth(ALICE).send().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(submit(&s, ALICE, spec("a3")).0, 201, "a cancelled job's slot is free again");
}

/// Reads whose answers grow with the plane are limited apart: a token out of its read budget
/// gets 429 on `/v1/events` and `/status` while its gate requests still go through.
#[test]
fn reads_that_grow_with_the_plane_have_a_budget_of_their_own() {
    let s = TestServer::start_with(temp_dir("limits-reads"), Duration::from_secs(600), |cfg| {
        cfg.limits.rate = Some((1000, 1000));
        cfg.limits.read_rate = Some((1, 2));
    });
    assert_eq!(submit(&s, ALICE, json!({ "id": "j", "type": "3B_4k", "iterations": 3 })).0, 201);
    let read = |path: &str| client().get(s.url(path)).bearer_auth(ALICE).send().unwrap().status().as_u16();
    let codes: Vec<u16> = ["/v1/events", "/v1/jobs", "/status", "/v1/events"].iter().map(|p| read(p)).collect();
    assert_eq!(&codes[..2], &[200, 200], "{codes:?}");
    assert!(codes[2..].iter().all(|c| *c == 429), "the burst of 2 is spent: {codes:?}");
    // The gate is not a read that grows with the plane.
    for _ in 0..5 {
        let r = client().post(s.url("/v1/jobs/j/heartbeat")).bearer_auth(ALICE).send().unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(start_phase(&s, ALICE, "j", "rollout", 0, 5.0).0, 200);
    // Another token's reads have their own budget.
    assert_eq!(client().get(s.url("/v1/events")).bearer_auth(BOB).send().unwrap().status(), 200);
}
