//! Every endpoint over real HTTP on 127.0.0.1 with an ephemeral port.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn spec(id: &str, iterations: u64) -> serde_json::Value {
    json!({ "id": id, "type": "7B_8k", "iterations": iterations, "rollout_s": 100, "train_s": 100, "slo": 2.0 })
}

#[test]
fn health_and_openapi_need_no_token_and_metrics_are_per_tenant() {
    let s = TestServer::start(temp_dir("open"), Duration::from_secs(60));
    let c = client();
    assert_eq!(c.get(s.url("/healthz")).send().unwrap().status(), 200);
    // /metrics needs a token: an admin sees the cluster, a tenant only its own jobs.
    assert_eq!(c.get(s.url("/metrics")).send().unwrap().status(), 401);
    assert_eq!(submit(&s, ALICE, spec("m1", 2)).0, 201);
    let m = c.get(s.url("/metrics")).bearer_auth(OPS).send().unwrap().text().unwrap();
    assert!(m.contains("weave_jobs{state=\"running\"} 1") && m.contains("weave_hourly_cost_dollars"), "{m}");
    let bob = c.get(s.url("/metrics")).bearer_auth(BOB).send().unwrap().text().unwrap();
    assert!(bob.contains("weave_jobs{state=\"running\"} 0"), "{bob}");
    assert!(!bob.contains("weave_hourly_cost_dollars") && !bob.contains("weave_nodes_in_use"), "{bob}");
    let alice = c.get(s.url("/metrics")).bearer_auth(ALICE).send().unwrap().text().unwrap();
    assert!(alice.contains("weave_jobs{state=\"running\"} 1"), "{alice}");
    let (st, doc) = body(c.get(s.url("/openapi.json")).send().unwrap());
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    for path in [
        "/v1/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/phases/{phase}/{iteration}/start",
        "/v1/groups",
        "/v1/nodes",
        "/v1/cluster",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing from OpenAPI");
    }
}

#[test]
fn auth_and_tenant_isolation() {
    let s = TestServer::start(temp_dir("auth"), Duration::from_secs(60));
    let c = client();
    assert_eq!(c.get(s.url("/v1/jobs")).send().unwrap().status(), 401);
    assert_eq!(c.get(s.url("/v1/jobs")).bearer_auth("wrong").send().unwrap().status(), 401);
    assert_eq!(submit(&s, ALICE, spec("a1", 2)).0, 201);
    assert_eq!(submit(&s, BOB, spec("b1", 2)).0, 201);
    // Bob cannot see, drive or cancel Alice's job: 404, as if it did not exist.
    assert_eq!(c.get(s.url("/v1/jobs/a1")).bearer_auth(BOB).send().unwrap().status(), 404);
    assert_eq!(c.delete(s.url("/v1/jobs/a1")).bearer_auth(BOB).send().unwrap().status(), 404);
    assert_eq!(start_phase(&s, BOB, "a1", "rollout", 0, 0.0).0, 404);
    // Job names are per tenant: Bob may have an `a1` of his own, and each sees only his.
    assert_eq!(submit(&s, BOB, spec("a1", 2)).0, 201);
    let get = |token: &str, path: &str| body(c.get(s.url(path)).bearer_auth(token).send().unwrap()).1;
    let (bobs, alices) = (get(BOB, "/v1/jobs/a1"), get(ALICE, "/v1/jobs/a1"));
    assert_eq!((&bobs["job"]["id"], &bobs["job"]["tenant"]), (&json!("a1"), &json!("bob")), "{bobs}");
    assert_eq!((&alices["job"]["id"], &alices["job"]["tenant"]), (&json!("a1"), &json!("alice")), "{alices}");
    assert_ne!(bobs["job"]["uid"], alices["job"]["uid"]);
    let ids = |v: serde_json::Value| {
        let mut ids: Vec<String> =
            v.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(get(BOB, "/v1/jobs")), ["a1", "b1"]);
    assert_eq!(ids(get(ALICE, "/v1/jobs")), ["a1"]);
    // An admin sees every job by its key: the second tenant's `a1` is `a1~bob`.
    assert_eq!(ids(get(OPS, "/v1/jobs")), ["a1", "a1~bob", "b1"]);
    // Bob's events name his jobs as he knows them; Alice's admission is not among them.
    let admitted: Vec<serde_json::Value> =
        get(BOB, "/v1/events").as_array().unwrap().iter().filter(|e| e["kind"] == "admitted").cloned().collect();
    assert_eq!(admitted.iter().map(|e| e["job"].as_str().unwrap()).collect::<Vec<_>>(), ["b1", "a1"]);
    // Alice cannot address Bob's job by its key either.
    assert_eq!(c.get(s.url("/v1/jobs/a1~bob")).bearer_auth(ALICE).send().unwrap().status(), 404);
    // Groups show other tenants' members anonymously; nodes are admin-only.
    let (_, groups) = body(c.get(s.url("/v1/groups")).bearer_auth(BOB).send().unwrap());
    assert!(!groups.to_string().contains("~"), "{groups}");
    let named_a1 = groups.to_string().matches("\"job\":\"a1\"").count();
    assert!(named_a1 <= 1, "only Bob's own a1 is named: {groups}");
    assert_eq!(c.get(s.url("/v1/nodes")).bearer_auth(BOB).send().unwrap().status(), 403);
    let (st, nodes) = body(c.get(s.url("/v1/nodes")).bearer_auth(OPS).send().unwrap());
    assert_eq!(st, 200);
    assert!(!nodes.as_array().unwrap().is_empty());
    let (st, cluster) = body(c.get(s.url("/v1/cluster")).bearer_auth(BOB).send().unwrap());
    assert_eq!(st, 200);
    assert_eq!(cluster["config"]["rollout"]["nodes"], 41);
    // The status page takes the token as a query parameter too.
    let page = c.get(s.url(&format!("/status?token={OPS}"))).send().unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().unwrap();
    assert!(html.contains("a1") && html.contains("b1"));
    assert_eq!(c.get(s.url("/status")).send().unwrap().status(), 401);
}

#[test]
fn malformed_and_oversized_bodies_are_refused_clearly() {
    let s = TestServer::start(temp_dir("bad"), Duration::from_secs(60));
    let c = client();
    let post = |body: String| {
        body_of(
            c.post(s.url("/v1/jobs"))
                .bearer_auth(ALICE)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .unwrap(),
        )
    };
    fn body_of(r: reqwest::blocking::Response) -> (u16, String) {
        (r.status().as_u16(), r.text().unwrap())
    }
    let (st, msg) = post("{not json".into());
    assert_eq!(st, 400, "{msg}");
    let (st, msg) = post(json!({ "id": "x", "type": "7B_8k", "colour": 1 }).to_string());
    assert!(st == 400 && msg.contains("colour"), "{st} {msg}");
    let (st, msg) = post(json!({ "id": "x", "type": "7X_8k" }).to_string());
    assert!(st == 400 && msg.contains("type"), "{st} {msg}");
    let (st, msg) = post(json!({ "id": "x", "type": "7B_8k", "slo": 0.2 }).to_string());
    assert!(st == 400 && msg.contains("slo"), "{st} {msg}");
    let (st, msg) = post(json!({ "id": "bad id!", "type": "7B_8k" }).to_string());
    assert!(st == 400 && msg.contains("`id`"), "{st} {msg}");
    let (st, msg) = post(json!({ "id": "x", "type": "7B_8k", "iterations": 3, "resume_from": 3 }).to_string());
    assert!(st == 400 && msg.contains("resume_from"), "{st} {msg}");
    // Limits on new submissions, each naming its field: `.` and `..` are not ids, a checkpoint
    // near 2^64 does not wrap, phase times and SLOs stay plausible.
    for (bad, field) in [
        (json!({ "id": ".", "type": "7B_8k" }), "`id`"),
        (json!({ "id": "..", "type": "7B_8k" }), "`id`"),
        (json!({ "id": "x", "type": "7B_8k", "resume_from": u64::MAX - 1 }), "`resume_from`"),
        (json!({ "id": "x", "type": "7B_8k", "iterations": 2_000_000_000u64 }), "`iterations`"),
        (json!({ "id": "x", "type": "7B_8k", "rollout_s": 1e12, "train_s": 10.0 }), "`rollout_s`"),
        (json!({ "id": "x", "type": "7B_8k", "rollout_s": 10.0, "train_s": 0.0 }), "`train_s`"),
        (json!({ "id": "x", "type": "7B_8k", "slo": 1e9 }), "`slo`"),
        // An agentic job on a cluster without an environment pool, or declaring a negative
        // latency (the trace reader's rule).
        (json!({ "id": "x", "type": "7B_8k", "agentic": agentic(1.0) }), "`agentic`"),
        (json!({ "id": "x", "type": "7B_8k", "agentic": agentic(-1.0) }), "`agentic.env.mean_s`"),
        // A LoRA adapter of an unknown base, of a base of another size, or of a rank above the
        // targeted modules' smaller side; an off-policy one (a pack pipelines its members).
        (json!({ "id": "x", "type": "7B_8k", "lora": { "base": "gpt-9", "rank": 8 } }), "`lora.base`"),
        (json!({ "id": "x", "type": "8B_8k", "lora": { "base": "qwen2.5-7b", "rank": 8 } }), "`lora.base`"),
        (json!({ "id": "x", "type": "7B_8k", "lora": { "base": "qwen2.5-7b", "rank": 600 } }), "`lora.rank`"),
        (json!({ "id": "x", "type": "7B_8k", "lora": { "base": "qwen2.5-7b", "rank": 8, "alpha": 16 } }), "alpha"),
        (
            json!({ "id": "x", "type": "7B_8k", "staleness": 1, "lora": { "base": "qwen2.5-7b", "rank": 8 } }),
            "`staleness`",
        ),
    ] {
        let (st, msg) = post(bad.to_string());
        assert!(st == 400 && msg.contains(field), "{bad}: {st} {msg}");
    }
    let huge = json!({ "id": "x", "type": "7B_8k", "algorithm": "a".repeat(40_000) }).to_string();
    let (st, _) = post(huge);
    assert_eq!(st, 413);
    // A job too big for any node is refused with the reason.
    let (st, msg) = post(json!({ "id": "huge", "model": "2000B", "max_tokens": 8192 }).to_string());
    assert!(st == 409 && msg.contains("host DRAM"), "{st} {msg}");
    assert_eq!(submit(&s, ALICE, spec("x", 2)).0, 201);
    let (st, _) = body(
        c.post(s.url("/v1/jobs/x/phases/rollout/0/finish"))
            .bearer_auth(ALICE)
            .json(&json!({ "duration_s": -1 }))
            .send()
            .unwrap(),
    );
    assert_eq!(st, 400);
    let (st, _) = body(c.post(s.url("/v1/jobs/x/phases/dance/0/start")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(st, 400);
    assert_eq!(submit(&s, ALICE, spec("x", 2)).0, 409, "duplicate active id");
}

#[test]
fn the_gate_enforces_the_barrier_and_interleaves_two_jobs() {
    // Long-polls may wait up to 60 s: the one below is answered by g1's finish, not its bound.
    let s = TestServer::start_with(temp_dir("gate"), Duration::from_secs(60), |c| c.max_wait = Duration::from_secs(60));
    let (st, a) = submit(&s, ALICE, spec("g1", 2));
    assert_eq!(st, 201);
    assert_eq!(a["decision"]["kind"], "isolated");
    let (st, b) = submit(&s, ALICE, spec("g2", 2));
    assert_eq!(st, 201);
    assert_eq!(b["decision"]["kind"], "direct", "{b}");
    // The decision shows only the submitter's own predicted slowdown, not its partners'.
    let lines = b["decision"]["slowdowns"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{b}");
    assert_eq!(lines[0][0], b["job"]["uid"], "{b}");
    // Training before rollout breaks the barrier: 409 with the reason.
    let (st, v) = start_phase(&s, ALICE, "g1", "train", 0, 0.0);
    assert_eq!(st, 409);
    assert!(v["error"].as_str().unwrap().contains("on-policy barrier"), "{v}");
    // A later iteration too; and finishing what was not granted.
    assert_eq!(start_phase(&s, ALICE, "g1", "rollout", 1, 0.0).0, 409);
    // A wait that is not a number of seconds is refused, not a dropped connection.
    for bad in ["NaN", "inf", "-inf"] {
        let url = s.url(&format!("/v1/jobs/g1/phases/rollout/0/start?wait_s={bad}"));
        let (st, v) = body(client().post(url).bearer_auth(ALICE).send().unwrap());
        assert_eq!(st, 400, "{bad}: {v}");
        assert!(v["error"].as_str().unwrap().contains("wait_s"), "{v}");
    }
    assert_eq!(finish_phase(&s, ALICE, "g2", "rollout", 0, 1.0).0, 409);
    // g1 holds the shared rollout node; g2 waits (202), then gets it when g1's rollout ends.
    assert_eq!(start_phase(&s, ALICE, "g1", "rollout", 0, 0.0).0, 200);
    assert_eq!(start_phase(&s, ALICE, "g2", "rollout", 0, 0.2).0, 202);
    let waiter = {
        let url = s.url("/v1/jobs/g2/phases/rollout/0/start?wait_s=60");
        let patient = reqwest::blocking::Client::builder().timeout(Duration::from_secs(90)).build().unwrap();
        std::thread::spawn(move || body(patient.post(url).bearer_auth(ALICE).send().unwrap()).0)
    };
    // g1's rollout ends only once g2's long-poll is parked, so the wake-up path is what runs.
    wait_until("g2's long-poll to park", Duration::from_secs(50), || (parked(&s) == Some(1)).then_some(()));
    assert_eq!(finish_phase(&s, ALICE, "g1", "rollout", 0, 95.0).0, 200);
    assert_eq!(waiter.join().unwrap(), 200, "the long-poll is answered when the node frees");
    run_rest(&s);
    let (_, events) = body(client().get(s.url("/v1/events")).bearer_auth(ALICE).send().unwrap());
    let grants: Vec<String> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "grant" && e["phase"] == "rollout")
        .map(|e| e["job"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(grants, ["g1", "g2", "g1", "g2"], "rollouts alternate on the shared node");
    let (_, j) = body(client().get(s.url("/v1/jobs/g1")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(j["job"]["state"], "completed");
    assert_eq!(j["job"]["completed_iterations"], 2);
    // Measured durations re-estimate the job (median of what was reported).
    assert!(j["job"]["estimate_rollout_s"].as_f64().unwrap() < 100.0, "{j}");
}

/// Both jobs to the end, concurrently: g1 from its training 0, g2 from its granted rollout 0.
fn run_rest(s: &TestServer) {
    std::thread::scope(|scope| {
        let h1 = scope.spawn(|| {
            for (phase, k) in [("train", 0), ("rollout", 1), ("train", 1)] {
                wait_and_finish(s, "g1", phase, k);
            }
        });
        let h2 = scope.spawn(|| {
            let (st, _) = finish_phase(s, ALICE, "g2", "rollout", 0, 80.0);
            assert_eq!(st, 200);
            for (phase, k) in [("train", 0), ("rollout", 1), ("train", 1)] {
                wait_and_finish(s, "g2", phase, k);
            }
        });
        h1.join().unwrap();
        h2.join().unwrap();
    });
}

fn wait_and_finish(s: &TestServer, job: &str, phase: &str, k: u64) {
    loop {
        let (st, v) = start_phase(s, ALICE, job, phase, k, 2.0);
        match st {
            200 => break,
            202 => continue,
            _ => panic!("{job} {phase} {k}: {st} {v}"),
        }
    }
    assert_eq!(finish_phase(s, ALICE, job, phase, k, 90.0).0, 200);
}

#[test]
fn cancel_and_heartbeat_failure_and_readmission() {
    // A 3 s timeout: h2's beats, 0.25 s apart, stay well inside it on a loaded machine.
    let s = TestServer::start(temp_dir("fail"), Duration::from_secs(3));
    let c = client();
    assert_eq!(submit(&s, ALICE, spec("h1", 10)).0, 201);
    assert_eq!(submit(&s, ALICE, spec("h2", 10)).0, 201);
    // h2 keeps beating; h1 goes silent and is failed; the group keeps h2.
    let h1 = wait_until("h1 to be failed for silence", Duration::from_secs(60), || {
        assert_eq!(c.post(s.url("/v1/jobs/h2/heartbeat")).bearer_auth(ALICE).send().unwrap().status(), 200);
        std::thread::sleep(Duration::from_millis(250));
        let (_, h1) = body(c.get(s.url("/v1/jobs/h1")).bearer_auth(ALICE).send().unwrap());
        (h1["job"]["state"] == "failed").then_some(h1)
    });
    assert!(h1["job"]["failure"].as_str().unwrap().contains("heartbeat"));
    let (_, h2) = body(c.get(s.url("/v1/jobs/h2")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(h2["job"]["state"], "running");
    // h2 now has the node alone: its rollout is granted at once.
    assert_eq!(start_phase(&s, ALICE, "h2", "rollout", 0, 1.0).0, 200);
    // h1 comes back from its checkpoint (iteration 4).
    let mut again = spec("h1", 10);
    again["resume_from"] = 4.into();
    assert_eq!(submit(&s, ALICE, again).0, 201);
    assert_eq!(start_phase(&s, ALICE, "h1", "rollout", 0, 0.0).0, 409, "iteration 0 is before the checkpoint");
    let (_, v) = body(c.get(s.url("/v1/jobs/h1")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["next"], "rollout 4");
    // Cancel.
    let (st, v) = body(c.delete(s.url("/v1/jobs/h2")).bearer_auth(ALICE).send().unwrap());
    assert_eq!((st, v["state"].as_str().unwrap()), (200, "cancelled"));
    assert_eq!(c.delete(s.url("/v1/jobs/h2")).bearer_auth(ALICE).send().unwrap().status(), 409);
    assert_eq!(c.post(s.url("/v1/jobs/h2/heartbeat")).bearer_auth(ALICE).send().unwrap().status(), 409);
}

#[test]
fn restart_recovers_jobs_groups_and_dispatch_position() {
    let dir = temp_dir("restart");
    let before;
    {
        let s = TestServer::start(dir.clone(), Duration::from_secs(60));
        for i in 0..3 {
            assert_eq!(submit(&s, ALICE, spec(&format!("r{i}"), 5)).0, 201);
        }
        run_job(&s, ALICE, "r0", 1);
        before = body(client().get(s.url("/v1/jobs")).bearer_auth(OPS).send().unwrap()).1;
        s.stop();
    }
    let s = TestServer::start(dir, Duration::from_secs(60));
    let after = body(client().get(s.url("/v1/jobs")).bearer_auth(OPS).send().unwrap()).1;
    assert_eq!(before, after, "jobs, placements, grants and positions survive a restart");
    // The gate continues where it was: r0 and r1 share a rollout node (r2, arriving at a
    // saturated group, got its own); r1 still holds the node, r0 waits for it, and gets it
    // when r1's rollout ends.
    assert_eq!(after.as_array().unwrap().iter().filter(|j| j["group"] == 0).count(), 2);
    assert_eq!(start_phase(&s, ALICE, "r1", "rollout", 0, 0.0).0, 200);
    assert_eq!(start_phase(&s, ALICE, "r0", "rollout", 1, 0.0).0, 202);
    assert_eq!(finish_phase(&s, ALICE, "r1", "rollout", 0, 50.0).0, 200);
    assert_eq!(start_phase(&s, ALICE, "r0", "rollout", 1, 2.0).0, 200);
}

#[test]
fn concurrent_clients() {
    let s = TestServer::start(temp_dir("concurrent"), Duration::from_secs(60));
    std::thread::scope(|scope| {
        for t in 0..6 {
            let s = &s;
            scope.spawn(move || {
                let id = format!("c{t}");
                assert_eq!(submit(s, ALICE, spec(&id, 3)).0, 201);
                run_job(s, ALICE, &id, 3);
            });
        }
    });
    let (_, jobs) = body(client().get(s.url("/v1/jobs")).bearer_auth(ALICE).send().unwrap());
    assert!(jobs.as_array().unwrap().iter().all(|j| j["state"] == "completed"), "{jobs}");
}

/// Every query of the Grafana dashboard under `deploy/` names a metric the server exports.
#[test]
fn the_grafana_dashboard_queries_only_exported_metrics() {
    let s = TestServer::start(temp_dir("grafana"), Duration::from_secs(60));
    assert_eq!(submit(&s, ALICE, spec("d1", 1)).0, 201);
    assert_eq!(start_phase(&s, ALICE, "d1", "rollout", 0, 0.0).0, 200);
    assert_eq!(finish_phase(&s, ALICE, "d1", "rollout", 0, 1.0).0, 200);
    let metrics = client().get(s.url("/metrics")).bearer_auth(OPS).send().unwrap().text().unwrap();
    let exported: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana/weave.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("weave_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for n in names {
                assert!(
                    exported.contains(n),
                    "the dashboard queries `{n}`, which /metrics does not export: {exported:?}"
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 8);
    // The phase-wait summary counts the grant it just made.
    assert!(metrics.contains("weave_phase_wait_seconds_count{phase=\"rollout\"} 1"), "{metrics}");
}

/// A job token sees only its own admission's history; `/v1/events` pages by cursor.
#[test]
fn job_tokens_see_their_admission_and_events_page_by_cursor() {
    let dir = temp_dir("history");
    let s = TestServer::start(dir.clone(), Duration::from_secs(60));
    let c = client();
    assert_eq!(submit(&s, ALICE, spec("r1", 4)).0, 201);
    assert_eq!(start_phase(&s, ALICE, "r1", "rollout", 0, 0.0).0, 200);
    assert_eq!(finish_phase(&s, ALICE, "r1", "rollout", 0, 1.0).0, 200);
    assert_eq!(c.delete(s.url("/v1/jobs/r1")).bearer_auth(ALICE).send().unwrap().status(), 200);
    let (st, again) = submit(&s, ALICE, spec("r1", 4));
    assert_eq!(st, 201);
    let uid = again["job"]["uid"].as_u64().unwrap() as u32;
    let tokens = weave_server::auth::JobTokens::load_or_create(&dir.join("job-token.key")).unwrap();
    let token = tokens.token("alice", "r1", uid);
    let (_, tenant_view) = body(c.get(s.url("/v1/jobs/r1")).bearer_auth(ALICE).send().unwrap());
    let (st, job_view) = body(c.get(s.url("/v1/jobs/r1")).bearer_auth(&token).send().unwrap());
    assert_eq!(st, 200, "{job_view}");
    let kinds = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(kinds(&tenant_view["history"]).iter().filter(|k| *k == "admitted").count(), 2);
    assert_eq!(kinds(&job_view["history"]).first().map(String::as_str), Some("admitted"));
    assert!(!kinds(&job_view["history"]).contains(&"cancelled".to_string()), "{job_view}");
    let (_, events) = body(c.get(s.url("/v1/events")).bearer_auth(&token).send().unwrap());
    assert_eq!(kinds(&events), kinds(&job_view["history"]));
    // Pages: after a cursor, at most `limit`.
    let (_, all) = body(c.get(s.url("/v1/events")).bearer_auth(ALICE).send().unwrap());
    let all = all.as_array().unwrap().clone();
    let first = all[0]["seq"].as_u64().unwrap();
    let (_, page) = body(c.get(s.url(&format!("/v1/events?after={first}&limit=2"))).bearer_auth(ALICE).send().unwrap());
    let page = page.as_array().unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0], all[1]);
    assert_eq!(page[1], all[2]);
}

/// The ownership check runs under the same lock as the write: a record naming another
/// tenant's job is refused there, whatever a handler saw before.
#[test]
fn commits_check_ownership_under_the_write_lock() {
    use weave_server::plane::{PlaneError, Record, SubmitSpec};
    use weave_server::{Caller, ServeError, Shared};
    let mut cfg = common::config(temp_dir("owner"), Duration::from_secs(60));
    cfg.placement = Default::default();
    let s = Shared::open(cfg).unwrap();
    let who = |tenant: &str| Caller { tenant: tenant.into(), admin: false, job: None };
    let job: SubmitSpec = serde_json::from_value(spec("own", 2)).unwrap();
    let submit =
        |job: SubmitSpec, tenant: &'static str| move |time_us| Record::Submit { time_us, tenant: tenant.into(), job };
    s.commit_as(&who("alice"), submit(job.clone(), "alice")).unwrap();
    // Bob may not cancel or report on alice's job, nor take its name once it has ended.
    let cancel = |time_us| Record::Cancel { time_us, job: "own".into() };
    assert!(matches!(s.commit_as(&who("bob"), cancel), Err(ServeError::Plane(PlaneError::NotFound(_)))));
    s.commit_as(&who("alice"), cancel).unwrap();
    let taken = s.commit_as(&who("bob"), submit(job.clone(), "bob"));
    assert!(matches!(taken, Err(ServeError::Plane(PlaneError::Conflict { .. }))), "{taken:?}");
    // Alice may submit it again.
    s.commit_as(&who("alice"), submit(job, "alice")).unwrap();
}

/// Sends `request` as raw bytes; returns the status line and body of the answer.
fn raw(s: &TestServer, request: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    (status, text)
}

/// Framing a proxy could read differently (smuggling) and bodies not in UTF-8 are refused
/// with a JSON error that names the header; plain chunked and UTF-8 bodies still work.
#[test]
fn ambiguous_framing_and_other_charsets_are_refused() {
    let s = TestServer::start(temp_dir("framing"), Duration::from_secs(600));
    let job = r#"{"id":"f","type":"7B_8k","iterations":2}"#;
    let auth = format!("Authorization: Bearer {ALICE}");
    let chunked = |te: &str, extra: &str| {
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: {te}\r\n{extra}Connection: close\r\n\r\n{:x}\r\n{job}\r\n0\r\n\r\n",
            job.len()
        )
    };
    let (status, body) = raw(&s, &chunked("gzip, chunked", ""));
    assert!(status.contains(" 400 ") && body.contains("only `chunked`"), "{body}");
    let utf16 = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json; charset=utf-16\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{job}",
        job.len()
    );
    let (status, body) = raw(&s, &utf16);
    assert!(status.contains(" 415 ") && body.contains("charset `utf-16`"), "{body}");
    let (status, body) = raw(&s, &chunked("chunked", ""));
    assert!(status.contains(" 201 "), "plain chunked is fine: {body}");
    let utf8 = utf16.replace("utf-16", "UTF-8").replace(r#""id":"f""#, r#""id":"g""#);
    let (status, body) = raw(&s, &utf8);
    assert!(status.contains(" 201 "), "UTF-8 named is fine: {body}");
}

/// RFC 9112 6.3: a request with both Transfer-Encoding and Content-Length is read as chunked
/// and its connection MUST be closed after the answer, so that what the Content-Length would
/// have framed (a smuggled request, here a second submission pipelined behind it) is never
/// read as a request.
#[test]
fn a_request_with_chunked_and_content_length_closes_its_connection() {
    let s = TestServer::start(temp_dir("te-cl"), Duration::from_secs(600));
    let job = r#"{"id":"tc","type":"7B_8k","iterations":2}"#;
    let auth = format!("Authorization: Bearer {ALICE}");
    let smuggled = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        job.len(),
        job.replace("tc", "td")
    );
    let first = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{:x}\r\n{job}\r\n0\r\n\r\n{smuggled}",
        job.len()
    );
    let (status, text) = raw(&s, &first);
    assert!(status.contains(" 201 "), "the chunked body is the request: {text}");
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "one answer, then the connection closed: {text}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
    let c = client();
    let jobs: Vec<serde_json::Value> = c.get(s.url("/v1/jobs")).bearer_auth(ALICE).send().unwrap().json().unwrap();
    let ids: Vec<&str> = jobs.iter().filter_map(|j| j["id"].as_str()).collect();
    assert!(ids.contains(&"tc") && !ids.contains(&"td"), "the pipelined request was never read: {ids:?}");
}

/// A body over the limit is answered with a JSON 413 the client can read (the server reads and
/// throws away what it sent rather than resetting the connection under it); a body declared
/// far too large is answered before it is sent.
#[test]
fn an_over_long_body_gets_a_readable_413() {
    let s = TestServer::start(temp_dir("too-large"), Duration::from_secs(600));
    let body = format!(r#"{{"id":"x","type":"7B_8k","iterations":2,"pad":"{}"}}"#, "p".repeat(40_000));
    let request = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..5 {
        let (status, answer) = raw(&s, &request);
        assert!(status.contains(" 413 ") && answer.contains("the request body is over 16384 bytes"), "{answer}");
    }
    let huge = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
    );
    let (status, answer) = raw(&s, &huge);
    assert!(status.contains(" 413 "), "{answer}");
}
