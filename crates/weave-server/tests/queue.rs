//! Fixed pools: a job that does not fit now waits in the queue (202) instead of being refused,
//! starts when room is freed, and the queue survives a restart in the same order; a job that
//! can never fit is still refused (409).

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;

/// One rollout and one training node; SLO 1.0 keeps jobs from sharing them.
fn server(dir: std::path::PathBuf) -> TestServer {
    TestServer::start_with(dir, Duration::from_secs(600), |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = 1;
        cfg.cluster.training.nodes = 1;
    })
}

fn spec(id: &str) -> serde_json::Value {
    json!({ "id": id, "type": "3B_4k", "iterations": 2, "rollout_s": 50, "train_s": 60, "slo": 1.0 })
}

fn queue(s: &TestServer, token: &str) -> Vec<String> {
    let (st, v) = body(client().get(s.url("/v1/queue")).bearer_auth(token).send().unwrap());
    assert_eq!(st, 200, "{v}");
    v.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_job_that_does_not_fit_waits_and_starts_when_room_is_freed() {
    let dir = temp_dir("queue");
    let s = server(dir.clone());
    assert_eq!(submit(&s, ALICE, spec("first")).0, 201);
    let (st, v) = submit(&s, ALICE, spec("second"));
    assert_eq!(st, 202, "{v}");
    assert_eq!(v["job"]["state"], "queued");
    assert_eq!(v["job"]["queue_position"], 0);
    // Bob's first waiting job: first among his own (alice's waiting job is not his to count).
    let (st, v) = submit(&s, BOB, spec("third"));
    assert_eq!((st, &v["job"]["queue_position"]), (202, &json!(0)), "{v}");
    let third = v["job"]["estimated_start_s"].as_f64().unwrap();
    let (_, v) = body(client().get(s.url("/v1/jobs/third")).bearer_auth(OPS).send().unwrap());
    assert_eq!((&v["job"]["queue_position"], v["job"]["estimated_start_s"].as_f64()), (&json!(1), Some(third)), "{v}");
    // Each tenant sees its own waiting jobs; an admin sees all, in order.
    assert_eq!(queue(&s, ALICE), ["second"]);
    assert_eq!(queue(&s, OPS), ["second", "third"]);
    // Projected starts: second when first has run its two iterations (at its SLO, on its
    // declared phases: 2 x 110 s), third after second.
    let (_, v) = body(client().get(s.url("/v1/queue")).bearer_auth(OPS).send().unwrap());
    let starts: Vec<f64> = v.as_array().unwrap().iter().map(|j| j["estimated_start_s"].as_f64().unwrap()).collect();
    assert!((200.0..=220.0).contains(&starts[0]) && (starts[1] - starts[0] - 220.0).abs() < 1.0, "{starts:?}");
    // A queued job asking for its first phase is told to wait, not refused.
    assert_eq!(start_phase(&s, ALICE, "second", "rollout", 0, 0.0).0, 202);
    assert_eq!(start_phase(&s, ALICE, "second", "train", 0, 0.0).0, 409);
    // A job wider than the pools can never fit: refused as before.
    let wide = json!({ "id": "wide", "type": "3B_4k", "iterations": 2, "rollout_nodes": 2, "train_nodes": 1 });
    let (st, v) = submit(&s, ALICE, wide);
    assert_eq!(st, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("can never fit"), "{v}");

    // The queue survives a restart in the same order.
    s.stop();
    let s = server(dir);
    assert_eq!(queue(&s, OPS), ["second", "third"]);
    // first finishes: second starts (its long-poll is granted), third moves up.
    run_job(&s, ALICE, "first", 2);
    let (st, v) = body(client().get(s.url("/v1/jobs/second")).bearer_auth(ALICE).send().unwrap());
    assert_eq!((st, &v["job"]["state"]), (200, &json!("running")), "{v}");
    assert_eq!(queue(&s, OPS), ["third"]);
    // A queued job can be cancelled.
    let (st, v) = body(client().delete(s.url("/v1/jobs/third")).bearer_auth(BOB).send().unwrap());
    assert_eq!(st, 200, "{v}");
    assert!(queue(&s, OPS).is_empty());
    run_job(&s, ALICE, "second", 2);
}

/// Alice and Bob are entitled to one node of each pool of two: a tenant borrows what the other
/// leaves unused, a job over its tenant's quota waits without holding up the other tenant, and
/// a tenant's high-priority job goes before its normal ones.
#[test]
fn quotas_order_the_queue_per_tenant() {
    use weave_server::auth::{hex, sha256};
    let toml = format!(
        "[[tenant]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\nrollout_nodes = 1\ntraining_nodes = 1\n\
         [[tenant]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\nrollout_nodes = 1\ntraining_nodes = 1\n\
         [[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
        hex(&sha256(ALICE)),
        hex(&sha256(BOB)),
        hex(&sha256(OPS))
    );
    let s = TestServer::start_with(temp_dir("quotas"), Duration::from_secs(600), move |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = 2;
        cfg.cluster.training.nodes = 2;
        cfg.tenants = weave_server::Tenants::from_toml(&toml).unwrap();
    });
    assert_eq!(submit(&s, ALICE, spec("a1")).0, 201);
    assert_eq!(submit(&s, ALICE, spec("a2")).0, 201, "alice borrows bob's unused node");
    assert_eq!(submit(&s, ALICE, spec("a3")).0, 202);
    let mut high = spec("a4");
    high["priority"] = json!("high");
    assert_eq!(submit(&s, ALICE, high).0, 202);
    assert_eq!(submit(&s, BOB, spec("b1")).0, 202, "no room until alice's borrowed node is free");
    // Alice's high job is ahead of her normal one; Bob, least served, is ahead of both.
    assert_eq!(queue(&s, OPS), ["b1", "a4", "a3"], "the listing is in the order they will start");
    // Positions: the admin's in the whole queue, a tenant's among its own waiting jobs (how
    // many of bob's jobs wait is not alice's to learn).
    let (_, v) = body(client().get(s.url("/v1/jobs/a3")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["queue_position"], 1, "{v}");
    let (_, v) = body(client().get(s.url("/v1/jobs/a3")).bearer_auth(OPS).send().unwrap());
    assert_eq!(v["job"]["queue_position"], 2, "{v}");
    // a2 (the borrowed node) finishes: Bob's job starts, not Alice's earlier ones.
    run_job(&s, ALICE, "a2", 2);
    let (_, v) = body(client().get(s.url("/v1/jobs/b1")).bearer_auth(BOB).send().unwrap());
    assert_eq!(v["job"]["state"], "running", "{v}");
    assert_eq!(queue(&s, OPS), ["a4", "a3"]);
    // a1 finishes: within her quota again, Alice's high job goes first.
    run_job(&s, ALICE, "a1", 2);
    let (_, v) = body(client().get(s.url("/v1/jobs/a4")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["state"], "running", "{v}");
    let (_, v) = body(client().get(s.url("/v1/jobs/a3")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(
        (&v["job"]["state"], &v["job"]["queue_reason"]),
        (&json!("queued"), &json!("its tenant's quota is in use")),
        "{v}"
    );
    let bad = json!({ "id": "x", "type": "3B_4k", "priority": "urgent" });
    let (st, v) = submit(&s, ALICE, bad);
    assert_eq!(st, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("priority"), "{v}");
}

/// Run `job` from iteration `from` to `to` through the gate.
fn run_from(s: &TestServer, token: &str, job: &str, from: u64, to: u64) {
    for k in from..to {
        for phase in ["rollout", "train"] {
            while start_phase(s, token, job, phase, k, 2.0).0 == 202 {}
            let (st, v) = finish_phase(s, token, job, phase, k, 0.01);
            assert_eq!(st, 200, "{job} {phase} {k}: {v}");
        }
    }
}

/// With `[sharing] preemption = true`, Bob's job takes back the node Alice borrowed: one of
/// Alice's jobs is preempted (its job token stops working, its phases are refused), waits in
/// the queue across a restart and resumes from its last completed iteration when room frees.
#[test]
fn preemption_ends_the_victims_admission_and_it_resumes_after_a_restart() {
    use weave_server::auth::{hex, sha256, JobTokens};
    let toml = format!(
        "[sharing]\npreemption = true\nmin_run_s = 0\n\
         [[tenant]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\nrollout_nodes = 1\ntraining_nodes = 1\n\
         [[tenant]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\nrollout_nodes = 1\ntraining_nodes = 1\n\
         [[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
        hex(&sha256(ALICE)),
        hex(&sha256(BOB)),
        hex(&sha256(OPS))
    );
    let dir = temp_dir("preemption");
    let start = |dir: std::path::PathBuf| {
        let toml = toml.clone();
        TestServer::start_with(dir, Duration::from_secs(600), move |cfg| {
            cfg.capacity = weave_server::Capacity::Fixed;
            cfg.cluster.rollout.nodes = 2;
            cfg.cluster.training.nodes = 2;
            cfg.tenants = weave_server::Tenants::from_toml(&toml).unwrap();
        })
    };
    let s = start(dir.clone());
    assert_eq!(submit(&s, ALICE, spec("a1")).0, 201);
    run_from(&s, ALICE, "a1", 0, 1);
    assert_eq!(submit(&s, ALICE, spec("a2")).0, 201, "alice borrows bob's unused nodes");
    let job = |token: &str, name: &str| {
        body(client().get(s.url(&format!("/v1/jobs/{name}"))).bearer_auth(token).send().unwrap())
    };
    let uid = job(ALICE, "a1").1["job"]["uid"].as_u64().unwrap() as u32;
    let a1_token = JobTokens::load_or_create(&dir.join("job-token.key")).unwrap().token("alice", "a1", uid);
    assert_eq!(job(&a1_token, "a1").0, 200);
    // a1 is granted rollout 1 when bob arrives: both of alice's jobs have work in progress and
    // the earlier admission is the victim.
    assert_eq!(start_phase(&s, ALICE, "a1", "rollout", 1, 0.0).0, 200);
    let (st, v) = submit(&s, BOB, spec("b1"));
    assert_eq!((st, &v["job"]["state"]), (201, &json!("running")), "{v}");
    let (st, v) = job(ALICE, "a1");
    assert_eq!((st, &v["job"]["state"], &v["job"]["next"]), (200, &json!("queued"), &json!("rollout 1")), "{v}");
    assert_eq!(v["job"]["queue_reason"], "its tenant's quota is in use", "{v}");
    let preempted = v["history"].as_array().unwrap().iter().find(|e| e["kind"] == "preempted").unwrap();
    assert!(preempted["meta"]["reason"].as_str().unwrap().contains("reclaimed"), "{v}");
    assert_eq!(job(&a1_token, "a1").0, 401, "the preempted admission's token stops working");
    assert_eq!(finish_phase(&s, ALICE, "a1", "rollout", 1, 1.0).0, 409, "its phase in progress is refused");
    assert_eq!(start_phase(&s, ALICE, "a1", "rollout", 1, 0.0).0, 202, "it waits to resume");
    let (_, events) = body(client().get(s.url("/v1/events")).bearer_auth(ALICE).send().unwrap());
    assert!(events.as_array().unwrap().iter().any(|e| e["job"] == "a1" && e["kind"] == "preempted"), "{events}");

    // A restart keeps the queue, the victim's checkpoint and who holds the quota.
    s.stop();
    let s = start(dir);
    assert_eq!(queue(&s, OPS), ["a1"]);
    let job = |token: &str, name: &str| {
        body(client().get(s.url(&format!("/v1/jobs/{name}"))).bearer_auth(token).send().unwrap())
    };
    assert_eq!(job(BOB, "b1").1["job"]["state"], "running");
    assert_eq!(job(ALICE, "a2").1["job"]["state"], "running");
    let metrics = |token: &str| client().get(s.url("/metrics")).bearer_auth(token).send().unwrap().text().unwrap();
    let all = metrics(OPS);
    for line in [
        "weave_tenant_preemptions_total{tenant=\"alice\"} 1",
        "weave_tenant_preemptions_total{tenant=\"bob\"} 0",
        "weave_tenant_queued_jobs{tenant=\"alice\"} 1",
        "weave_tenant_nodes_in_use{tenant=\"alice\",pool=\"training\"} 1.000000",
        "weave_tenant_nodes_in_use{tenant=\"bob\",pool=\"rollout\"} 1.000000",
        "weave_tenant_quota_nodes{tenant=\"bob\",pool=\"training\"} 1",
    ] {
        assert!(all.contains(line), "missing {line}:\n{all}");
    }
    let own = metrics(ALICE);
    assert!(own.contains("weave_tenant_preemptions_total{tenant=\"alice\"} 1"), "{own}");
    assert!(!own.contains("bob"), "alice sees bob's lines:\n{own}");
    // Bob's job ends: alice borrows again and a1 resumes from iteration 1.
    run_from(&s, BOB, "b1", 0, 2);
    let (_, v) = job(ALICE, "a1");
    assert_eq!((&v["job"]["state"], &v["job"]["next"]), (&json!("running"), &json!("rollout 1")), "{v}");
    run_from(&s, ALICE, "a1", 1, 2);
    assert_eq!(job(ALICE, "a1").1["job"]["state"], "completed");
    run_from(&s, ALICE, "a2", 0, 2);
}

fn events(s: &TestServer, token: &str) -> Vec<serde_json::Value> {
    let (st, v) = body(client().get(s.url("/v1/events")).bearer_auth(token).send().unwrap());
    assert_eq!(st, 200, "{v}");
    v.as_array().unwrap().clone()
}

/// A job queued and cancelled before it ever started stays in its tenant's and the admins'
/// event log; a name let go and taken by another tenant never shows it the first one's events.
#[test]
fn events_belong_to_the_tenant_whose_job_it_was() {
    let s = TestServer::start_with(temp_dir("queue-events"), Duration::from_secs(600), |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = 1;
        cfg.cluster.training.nodes = 1;
        // Ended jobs are let go at once: their names may be taken again.
        cfg.retention = weave_server::plane::Retention { events: 1000, jobs: 0, ..Default::default() };
    });
    assert_eq!(submit(&s, ALICE, spec("first")).0, 201);
    assert_eq!(submit(&s, ALICE, spec("waits")).0, 202);
    let (st, v) = body(client().delete(s.url("/v1/jobs/waits")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(st, 200, "{v}");
    for token in [ALICE, OPS] {
        let kinds: Vec<String> = events(&s, token)
            .iter()
            .filter(|e| e["job"] == "waits")
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["queued", "cancelled"], "{token}");
    }
    assert!(events(&s, BOB).iter().all(|e| e["job"] != "waits"), "not bob's");

    // alice's `first` ends and is let go; bob takes the name.
    let (st, v) = body(client().delete(s.url("/v1/jobs/first")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(st, 200, "{v}");
    let (st, v) = submit(&s, BOB, spec("first"));
    assert_eq!(st, 201, "{v}");
    let (_, all) = body(client().get(s.url("/v1/jobs")).bearer_auth(OPS).send().unwrap());
    let (st, v) = body(client().get(s.url("/v1/jobs/first")).bearer_auth(BOB).send().unwrap());
    assert_eq!(st, 200, "{v} {all}");
    assert_eq!(st, 200, "{v}");
    let history = v["history"].as_array().unwrap();
    assert_eq!(history.iter().filter(|e| e["kind"] == "admitted").count(), 1, "only bob's admission: {v}");
    assert!(history.iter().all(|e| e["kind"] != "cancelled"), "not alice's cancel: {v}");
    let bobs: Vec<_> = events(&s, BOB).into_iter().filter(|e| e["job"] == "first").collect();
    assert_eq!(bobs.iter().filter(|e| e["kind"] == "admitted").count(), 1, "{bobs:?}");
    assert!(bobs.iter().all(|e| e["kind"] != "cancelled"), "{bobs:?}");
    // alice still sees her own job's events under its name.
    let alices = events(&s, ALICE).into_iter().filter(|e| e["job"] == "first").count();
    assert!(alices >= 2, "alice's admitted and cancelled");
}
