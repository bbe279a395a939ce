//! Agentic jobs at the gate: planned from their trajectories, granted their sandboxes, and
//! what their drivers report of their environments.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// With an environment pool, an agentic job is admitted and planned with its declared
/// trajectories (sandboxes started during its previous training), not the profile's
/// single-turn rollout: the same model the replay plans with.
#[test]
fn an_agentic_job_is_planned_from_its_trajectories() {
    let s = TestServer::start_with(temp_dir("agentic"), Duration::from_secs(60), |cfg| {
        cfg.cluster.env = Some(weave_core::agentic::EnvPoolConfig::of_nodes(2));
    });
    let (plain, _) = submit(&s, ALICE, json!({ "id": "plain", "type": "7B_8k", "batch": 32 }));
    assert_eq!(plain, 201);
    let mut long = agentic(30.0);
    long["turns"] = json!({ "short_mean": 10, "long_mean": 10, "long_share": 0, "max": 16 });
    let (st, body) = submit(&s, ALICE, json!({ "id": "tools", "type": "7B_8k", "batch": 32, "agentic": long }));
    assert_eq!(st, 201, "{body}");
    let view = |id: &str| -> serde_json::Value {
        client().get(s.url(&format!("/v1/jobs/{id}"))).bearer_auth(ALICE).send().unwrap().json().unwrap()
    };
    let (plain, tools) = (view("plain")["job"].clone(), view("tools")["job"].clone());
    // About ten turns of 2 s generation and 30 s steps: minutes, where the profile's rollout
    // of a 7B job at this batch is far shorter.
    let r = tools["estimate_rollout_s"].as_f64().unwrap();
    assert!(r > 250.0 && r < 2_000.0, "{tools}");
    assert!(r > 2.0 * plain["estimate_rollout_s"].as_f64().unwrap(), "{plain} {tools}");
    assert_eq!(tools["estimate_train_s"], plain["estimate_train_s"]);

    // Durations given with the submission were measured: they place the job, not the plan.
    let measured =
        json!({ "id": "measured", "type": "7B_8k", "batch": 32, "agentic": long, "rollout_s": 40, "train_s": 30 });
    let (st, body) = submit(&s, ALICE, measured);
    assert_eq!(st, 201, "{body}");
    let job = view("measured")["job"].clone();
    assert_eq!(
        (job["estimate_rollout_s"].as_f64(), job["estimate_train_s"].as_f64()),
        (Some(40.0), Some(30.0)),
        "{job}"
    );
}

fn with_env_pool(name: &str) -> TestServer {
    TestServer::start_with(temp_dir(name), Duration::from_secs(60), |cfg| {
        cfg.cluster.env = Some(weave_core::agentic::EnvPoolConfig::of_nodes(2));
    })
}

fn get(s: &TestServer, token: &str, path: &str) -> Value {
    client().get(s.url(path)).bearer_auth(token).send().unwrap().json().unwrap()
}

fn finish_with(s: &TestServer, job: &str, phase: &str, it: u64, meta: Value) -> (u16, Value) {
    finish_phase_with(s, ALICE, job, phase, it, json!({ "duration_s": 1.0, "meta": meta }))
}

/// A rollout's grant names the sandboxes it may hold; a training's tells the driver to start
/// the next rollout's (the plan assumes they start during the training), and the last
/// training's does not. The cluster view counts what running agentic jobs hold of the pool;
/// the job view shows what the driver reported beside what the job declared, and a report
/// that makes no sense is ignored.
#[test]
fn grants_name_the_sandboxes_and_reports_reach_the_views() {
    let s = with_env_pool("agentic-grants");
    let mut ten = agentic(30.0);
    ten["turns"] = json!({ "short_mean": 10, "long_mean": 10, "long_share": 0, "max": 16 });
    let (st, b) =
        submit(&s, ALICE, json!({ "id": "tools", "type": "7B_8k", "batch": 32, "iterations": 2, "agentic": ten }));
    assert_eq!(st, 201, "{b}");
    assert_eq!(submit(&s, ALICE, json!({ "id": "plain", "type": "7B_8k", "batch": 32, "iterations": 1 })).0, 201);
    let env = get(&s, ALICE, "/v1/cluster")["environment"].clone();
    assert_eq!(env["pool"]["nodes"], 2, "{env}");
    assert_eq!((env["held"]["sandboxes"].as_u64(), env["held"]["cores"].as_f64()), (Some(32), Some(32.0)), "{env}");
    assert_eq!(env["held"]["mem_gib"].as_f64(), Some(64.0), "{env}");
    assert_eq!(env["agentic_jobs"], 1, "{env}");
    assert_eq!(env["hourly_cost_dollars"].as_f64(), Some(128.0 * 0.05), "{env}");

    let (st, g) = start_phase(&s, ALICE, "tools", "rollout", 0, 5.0);
    assert_eq!(st, 200, "{g}");
    assert_eq!(g["environment"]["sandboxes"], 32, "{g}");
    assert_eq!(g["environment"]["sandbox"], json!({ "cores": 1.0, "mem_gib": 2.0, "pausable": false }), "{g}");
    assert!(g["environment"].get("start_sandboxes_for").is_none(), "{g}");
    let report = json!({ "agentic": { "trajectories": 32, "turns": 320, "env_s": 9600.0, "startup_s": 16.0 } });
    assert_eq!(finish_with(&s, "tools", "rollout", 0, report).0, 200);
    let (st, g) = start_phase(&s, ALICE, "tools", "train", 0, 5.0);
    assert_eq!(st, 200, "{g}");
    assert_eq!(g["environment"]["start_sandboxes_for"], 1, "{g}");
    assert_eq!(finish_with(&s, "tools", "train", 0, json!({})).0, 200);
    assert_eq!(start_phase(&s, ALICE, "tools", "rollout", 1, 5.0).0, 200);
    // No turns, and a negative time: not believed, so the medians stay those of rollout 0.
    let nonsense = json!({ "agentic": { "trajectories": 32, "turns": 0, "env_s": -5.0 } });
    assert_eq!(finish_with(&s, "tools", "rollout", 1, nonsense).0, 200);
    let (st, g) = start_phase(&s, ALICE, "tools", "train", 1, 5.0);
    assert_eq!(st, 200, "{g}");
    assert!(g.get("environment").is_none(), "the last training starts no sandboxes: {g}");

    let view = get(&s, ALICE, "/v1/jobs/tools")["job"]["environment"].clone();
    assert_eq!(view["sandboxes"], 32, "{view}");
    assert_eq!(view["declared_turns_per_trajectory"].as_f64(), Some(10.0), "{view}");
    assert_eq!(view["declared_env_step_median_s"].as_f64(), Some(30.0), "{view}");
    let measured = &view["measured"];
    assert_eq!(measured["turns_per_trajectory"].as_f64(), Some(10.0), "{view}");
    assert_eq!(measured["env_step_s"].as_f64(), Some(30.0), "{view}");
    assert_eq!(measured["startup_s_per_trajectory"].as_f64(), Some(0.5), "{view}");
    assert_eq!(measured["rollouts"], 1, "{view}");

    // A job without a declaration is granted and viewed as before.
    let (st, g) = start_phase(&s, ALICE, "plain", "rollout", 0, 5.0);
    assert_eq!(st, 200, "{g}");
    assert!(g.get("environment").is_none(), "{g}");
    assert!(get(&s, ALICE, "/v1/jobs/plain")["job"].get("environment").is_none());

    // Once the agentic job has ended it holds nothing of the pool.
    assert_eq!(finish_with(&s, "tools", "train", 1, json!({})).0, 200);
    let env = get(&s, ALICE, "/v1/cluster")["environment"].clone();
    assert_eq!((env["held"]["sandboxes"].as_u64(), env["agentic_jobs"].as_u64()), (Some(0), Some(0)), "{env}");
}

/// What a job's drivers reported of their environments plans its re-admission: its declared
/// trajectories rescaled to the measured medians (steps twice as long here), while the view
/// still shows what it declared. A submission may carry such figures itself, for an agentic
/// job only, and nonsense is refused by name.
#[test]
fn a_readmission_is_planned_from_the_environments_measured() {
    let s = with_env_pool("agentic-measured");
    let mut ten = agentic(30.0);
    ten["turns"] = json!({ "short_mean": 10, "long_mean": 10, "long_share": 0, "max": 16 });
    let spec = json!({ "id": "tools", "type": "7B_8k", "batch": 32, "iterations": 4, "agentic": ten });
    assert_eq!(submit(&s, ALICE, spec.clone()).0, 201);
    let estimate = || get(&s, ALICE, "/v1/jobs/tools")["job"]["estimate_rollout_s"].as_f64().unwrap();
    let declared = estimate();
    assert_eq!(start_phase(&s, ALICE, "tools", "rollout", 0, 5.0).0, 200);
    let report = json!({ "agentic": { "trajectories": 32, "turns": 320, "env_s": 320.0 * 60.0, "startup_s": 16.0 } });
    assert_eq!(finish_with(&s, "tools", "rollout", 0, report).0, 200);
    let r = client().post(s.url("/v1/jobs/tools/restart")).bearer_auth(ALICE).json(&json!({ "reason": "test" })).send();
    assert_eq!(r.unwrap().status(), 200);
    let view = get(&s, ALICE, "/v1/jobs/tools")["job"].clone();
    assert_eq!(view["state"], "running", "{view}");
    let measured = estimate();
    // Ten steps of 60 s instead of 30 s per trajectory: about 300 s more per rollout.
    assert!(measured > declared + 200.0 && measured < 2.5 * declared, "{declared} -> {measured}");
    assert_eq!(view["environment"]["declared_env_step_median_s"].as_f64(), Some(30.0), "{view}");

    let mut given = spec.clone();
    given["id"] = json!("given");
    given["measured_environment"] =
        json!({ "turns_per_trajectory": 10, "env_step_s": 60, "startup_s_per_trajectory": 0.5 });
    assert_eq!(submit(&s, BOB, given.clone()).0, 201);
    let bob = client().get(s.url("/v1/jobs/given")).bearer_auth(BOB).send().unwrap().json::<Value>().unwrap();
    assert!((bob["job"]["estimate_rollout_s"].as_f64().unwrap() - measured).abs() < 0.2 * measured, "{bob}");
    let mut plain = json!({ "id": "plain", "type": "7B_8k", "batch": 32 });
    plain["measured_environment"] = given["measured_environment"].clone();
    let mut bad_turns = given.clone();
    bad_turns["id"] = json!("bad");
    bad_turns["measured_environment"]["turns_per_trajectory"] = json!(0);
    for (body, field) in [(plain, "measured_environment"), (bad_turns, "measured_environment.turns_per_trajectory")] {
        let (st, b) = submit(&s, BOB, body);
        assert_eq!(st, 400, "{b}");
        assert!(b.to_string().contains(field), "{b}");
    }
}

/// Without an environment pool the cluster view says so (null), as before.
#[test]
fn a_cluster_without_an_environment_pool_shows_none() {
    let s = TestServer::start(temp_dir("agentic-none"), Duration::from_secs(60));
    assert!(get(&s, ALICE, "/v1/cluster")["environment"].is_null());
}

/// With fixed pools the environment pool is reserved: an agentic job whose sandboxes do not
/// fit in what the running ones leave waits in the queue, saying why, and starts when the
/// other ends; one larger than the whole pool is refused, naming the fields.
#[test]
fn fixed_pools_queue_a_job_whose_sandboxes_do_not_fit() {
    let s = TestServer::start_with(temp_dir("agentic-fixed"), Duration::from_secs(60), |cfg| {
        cfg.cluster.env = Some(weave_core::agentic::EnvPoolConfig::of_nodes(2));
        cfg.capacity = weave_server::Capacity::Fixed;
    });
    let job = |id: &str, batch: u32| json!({ "id": id, "type": "7B_8k", "batch": batch, "iterations": 1, "agentic": agentic(1.0) });
    let (st, b) = submit(&s, ALICE, job("first", 96));
    assert_eq!(st, 201, "{b}");
    let (st, b) = submit(&s, ALICE, job("second", 64));
    assert_eq!(st, 202, "queued: {b}");
    let second = get(&s, ALICE, "/v1/jobs/second")["job"].clone();
    assert_eq!(second["state"], "queued", "{second}");
    let reason = second["queue_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("environment cores") && reason.contains("96 of the pool's 128"), "{second}");
    let (st, b) = submit(&s, ALICE, job("huge", 200));
    assert_eq!(st, 409, "{b}");
    assert!(b["error"].as_str().unwrap().contains("agentic.sandbox.cores"), "{b}");

    run_job(&s, ALICE, "first", 1);
    let second = get(&s, ALICE, "/v1/jobs/second")["job"].clone();
    assert_eq!(second["state"], "running", "the first job's sandboxes are free again: {second}");
    let env = get(&s, ALICE, "/v1/cluster")["environment"].clone();
    assert_eq!(env["held"]["cores"].as_f64(), Some(64.0), "{env}");
}

fn post_as(s: &TestServer, token: &str, path: &str) -> (u16, Value) {
    let r = client().post(s.url(path)).bearer_auth(token).send().unwrap();
    let code = r.status().as_u16();
    (code, r.json().unwrap_or(Value::Null))
}

/// An environment node out of service: the pool placement reserves from loses its cores, the
/// agentic job running keeps its admission (its driver runs the node's trajectories again on
/// the other node; nothing Weave counted is lost), a new one that no longer fits waits, and
/// the node's return starts it. The change is a record: it survives a restart. Names outside
/// the pool, a node down twice, a notice and a tenant's request are refused.
#[test]
fn an_environment_node_out_of_service_shrinks_the_pool_and_keeps_the_jobs() {
    let dir = temp_dir("agentic-env-node");
    let fixed = |cfg: &mut weave_server::ServerConfig| {
        cfg.cluster.env = Some(weave_core::agentic::EnvPoolConfig::of_nodes(2));
        cfg.capacity = weave_server::Capacity::Fixed;
    };
    let s = TestServer::start_with(dir.clone(), Duration::from_secs(600), fixed);
    let job = |id: &str, batch: u32| json!({ "id": id, "type": "7B_8k", "batch": batch, "iterations": 4, "agentic": agentic(1.0) });
    assert_eq!(submit(&s, ALICE, job("first", 64)).0, 201);
    let uid = get(&s, ALICE, "/v1/jobs/first")["job"]["uid"].clone();

    assert_eq!(post_as(&s, ALICE, "/v1/nodes/e0/down").0, 403);
    for (path, says) in [
        ("/v1/nodes/e2/down", "not in the inventory (2 environment nodes)"),
        ("/v1/nodes/e00/down", "`e0`"),
        ("/v1/nodes/e0/up", "e0 is not down"),
    ] {
        let (code, b) = post_as(&s, OPS, path);
        assert!(code == 400 && b["error"].as_str().unwrap().contains(says), "{path}: {code} {b}");
    }
    let (code, b) = post_as(&s, OPS, "/v1/nodes/e1/down");
    assert_eq!(code, 200, "{b}");
    let (code, b) = post_as(&s, OPS, "/v1/nodes/e1/down");
    assert!(code == 400 && b["error"].as_str().unwrap().contains("already down"), "{code} {b}");
    let notice =
        client().post(s.url("/v1/nodes/e0/notice")).bearer_auth(OPS).json(&json!({ "seconds": 60 })).send().unwrap();
    assert_eq!(notice.status().as_u16(), 400, "an environment node takes no notice");

    let first = get(&s, ALICE, "/v1/jobs/first")["job"].clone();
    assert_eq!((first["state"].as_str(), &first["uid"]), (Some("running"), &uid), "the job keeps its admission");
    let env = get(&s, OPS, "/v1/cluster")["environment"].clone();
    assert_eq!(env["nodes_down"], json!(["e1"]), "{env}");
    assert_eq!(env["cores_in_service"].as_f64(), Some(64.0), "{env}");
    let nodes = get(&s, OPS, "/v1/nodes");
    let e1 = nodes.as_array().unwrap().iter().find(|n| n["node"] == "e1").cloned().unwrap_or_default();
    assert_eq!((e1["pool"].as_str(), e1["down"].as_bool()), (Some("environment"), Some(true)), "{nodes}");
    let event = get(&s, OPS, "/v1/events");
    let down = event.as_array().unwrap().iter().rev().find(|e| e["kind"] == "node-down").cloned().unwrap_or_default();
    assert_eq!(down["meta"]["jobs"], json!(["first"]), "the agentic jobs are told: {down}");

    let (st, b) = submit(&s, ALICE, job("second", 32));
    assert_eq!(st, 202, "64 of the 64 cores in service are held: {b}");
    s.stop();

    let s = TestServer::start_with(dir, Duration::from_secs(600), fixed);
    assert_eq!(get(&s, OPS, "/v1/cluster")["environment"]["nodes_down"], json!(["e1"]), "a record: restored");
    assert_eq!(get(&s, ALICE, "/v1/jobs/second")["job"]["state"], "queued");
    assert_eq!(post_as(&s, OPS, "/v1/nodes/e1/up").0, 200);
    assert_eq!(get(&s, ALICE, "/v1/jobs/second")["job"]["state"], "running", "the node's cores are back");
}

/// A tenant's cap on environment cores (`env_cores` in its quota): its agentic job that would
/// take it past the cap waits, saying why, while another tenant's starts in the room the pool
/// still has; the first job's end lets it start.
#[test]
fn a_tenants_environment_cap_holds_its_agentic_jobs() {
    use weave_core::Micros;
    use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
    use weave_server::plane::{JobState, Plane, Record, SubmitSpec};
    let cluster =
        weave_core::ClusterConfig { env: Some(weave_core::agentic::EnvPoolConfig::of_nodes(4)), ..Default::default() };
    let mut cfg = weave_place::PlacerConfig::for_cluster(&cluster, weave_place::PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((8, 8));
    let quota = |name: &str, env_cores| TenantQuota {
        name: name.into(),
        rollout_nodes: 4.0,
        training_nodes: 4.0,
        borrow_limit: None,
        env_cores,
    };
    let mut p = Plane::new(cluster, cfg).with_share(SharePolicy {
        mode: ShareMode::Quotas,
        tenants: vec![quota("alice", Some(96.0)), quota("bob", None)],
        min_run: Micros::ZERO,
        checkpoint_every: 1,
        half_life: None,
        preempts_own: weave_core::Priority::High,
        grace: Micros::ZERO,
    });
    let submit = |t: u64, tenant: &str, id: &str, batch: u32| {
        let job: SubmitSpec = serde_json::from_value(json!({ "id": id, "type": "7B_8k", "batch": batch,
            "iterations": 1, "rollout_s": 50, "train_s": 60, "slo": 1.0, "agentic": agentic(1.0) }))
        .unwrap();
        Record::Submit { time_us: t, tenant: tenant.into(), job }
    };
    let state = |p: &Plane, id: &str| p.job(id).map(|j| j.state);
    p.apply(&submit(1, "alice", "a1", 64)).unwrap();
    p.apply(&submit(2, "alice", "a2", 48)).unwrap();
    p.apply(&submit(3, "bob", "b1", 96)).unwrap();
    assert_eq!(state(&p, "a1"), Some(JobState::Running));
    assert_eq!(state(&p, "b1"), Some(JobState::Running), "bob has no cap; the pool of 256 has room");
    let a2 = p.queue().iter().find(|q| q.submit.id == "a2").cloned();
    assert!(a2.is_some(), "64 + 48 cores is over alice's 96");
    assert!(a2.unwrap().reason.contains("quota"), "it says why");
    p.apply(&Record::Cancel { time_us: 4, job: "a1".into() }).unwrap();
    assert_eq!(state(&p, "a2"), Some(JobState::Running), "a1's cores are back under the cap");
}
