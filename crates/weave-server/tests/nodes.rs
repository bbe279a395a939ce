//! Node failures on fixed pools: the node leaves service, its jobs fail and are re-admitted
//! from their last completed iteration, the others carry on; replay rebuilds the same state.

use weave_core::{ClusterConfig, NodeId, Pool};
use weave_dispatch::Phase;
use weave_place::{DecisionKind, PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, PlaneError, Record, SubmitSpec};

/// Pools as an execution backend sets them: empty until an inventory record sizes them.
fn plane() -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((0, 0));
    Plane::new(cluster, cfg)
}

fn inventory(time_us: u64, rollout: u32, training: u32) -> Record {
    Record::Inventory { time_us, rollout, training }
}

fn submit(time_us: u64, id: &str) -> Record {
    submit_timed(time_us, id, 300.0, 100.0)
}

fn submit_timed(time_us: u64, id: &str, rollout_s: f64, train_s: f64) -> Record {
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
        "id": id, "type": "7B_8k", "iterations": 10, "slo": 1.3, "rollout_s": rollout_s, "train_s": train_s,
        "launch": { "entrypoint": "python3 job.py", "env": { "SEED": "1" } }
    }))
    .unwrap();
    Record::Submit { time_us, tenant: "alice".into(), job }
}

/// Measured phases as declared (300 s rollout, 100 s training): re-estimation keeps the plan.
fn finish(time_us: u64, job: &str, phase: Phase, iteration: u64) -> Record {
    let duration_us = if phase == Phase::Rollout { 300_000_000 } else { 100_000_000 };
    Record::Finish { time_us, job: job.into(), phase, iteration, duration_us, meta: None, admission: None }
}

fn node(s: &str) -> NodeId {
    s.parse().unwrap()
}

/// Every launched job admitted but not started asks for its first phase (its driver is up):
/// it joins its group's rotation.
fn start_launched(p: &mut Plane, records: &mut Vec<Record>, time_us: u64) {
    let waiting: Vec<(String, u32)> =
        p.jobs().filter_map(|j| p.awaits_start(&j.name).map(|a| (j.name.clone(), a))).collect();
    for (job, admission) in waiting {
        let r = Record::Ready { time_us, job, admission };
        p.apply(&r).unwrap();
        records.push(r);
    }
}

/// Finishes every granted phase, round after round, until `job` has completed `n` iterations
/// (launched jobs start first).
fn run(p: &mut Plane, records: &mut Vec<Record>, job: &str, n: u64, t: &mut u64) {
    run_finishing(p, records, job, n, t, finish);
}

/// [`run`] with each finish made by `finish_as` (the phase durations a test wants).
fn run_finishing(
    p: &mut Plane,
    records: &mut Vec<Record>,
    job: &str,
    n: u64,
    t: &mut u64,
    finish_as: impl Fn(u64, &str, Phase, u64) -> Record,
) {
    while p.job(job).unwrap().completed_iterations < n {
        start_launched(p, records, *t);
        let granted: Vec<(String, Phase, u64)> =
            p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|(ph, k)| (j.name.clone(), ph, k))).collect();
        assert!(!granted.is_empty(), "nothing granted");
        for (name, phase, k) in granted {
            *t += 10;
            let r = finish_as(*t, &name, phase, k);
            p.apply(&r).unwrap();
            records.push(r);
        }
    }
}

#[test]
fn a_lost_node_fails_its_jobs_readmits_them_and_leaves_the_others() {
    let mut p = plane();
    // No inventory yet: the pools have no nodes, so the job is refused rather than queued.
    let refused = p.check(&submit(1, "a")).unwrap_err().to_string();
    assert!(refused.contains("the pools have 0 and 0: it can never fit"), "{refused}");
    let mut records = vec![inventory(0, 3, 1), submit(1, "a"), submit(2, "b")];
    for r in &records {
        p.apply(r).unwrap();
    }
    let (a, b) = (p.job("a").unwrap().clone(), p.job("b").unwrap().clone());
    let (da, db) = (a.decision.unwrap(), b.decision.unwrap());
    assert_eq!(da.group, db.group, "one co-execution group");
    assert_eq!(db.kind, DecisionKind::Scaling);
    assert_eq!((da.rollout_nodes[0], db.rollout_nodes[0]), (node("r0"), node("r1")));
    let mut t = 10;
    run(&mut p, &mut records, "b", 2, &mut t);
    let a_before = p.job("a").unwrap().clone();

    let down = Record::NodeDown { time_us: 100, node: node("r1"), reason: "Ray node died".into() };
    p.apply(&down).unwrap();
    records.push(down);
    let b = p.job("b").unwrap();
    assert_eq!(b.state, JobState::Running, "re-admitted");
    assert_eq!(b.submit.server.resume_from, Some(2));
    assert_eq!(b.completed_iterations, 2);
    assert_eq!(b.decision.as_ref().unwrap().rollout_nodes, vec![node("r2")], "never the lost node");
    assert_eq!(b.next(), (Phase::Rollout, 2));
    assert!(b.measured_estimate(), "the re-admission keeps what b measured of itself");
    assert_eq!(b.estimate.rollout.as_secs_f64(), 300.0);
    let kinds: Vec<&str> = p.events().iter().filter(|e| e.job == "b").map(|e| e.kind.as_str()).collect();
    assert!(kinds.ends_with(&["failed", "admitted", "readmitted"]), "launched: no grant before it starts: {kinds:?}");
    assert_eq!(b.granted(), None);
    start_launched(&mut p, &mut records, 100);
    let kinds: Vec<&str> = p.events().iter().filter(|e| e.job == "b").map(|e| e.kind.as_str()).collect();
    assert!(kinds.ends_with(&["readmitted", "ready", "grant"]), "{kinds:?}");
    assert_eq!(p.job("b").unwrap().granted(), Some((Phase::Rollout, 2)), "granted once it asks");
    let a = p.job("a").unwrap();
    assert_eq!((a.state, a.id, &a.decision), (JobState::Running, a_before.id, &a_before.decision));
    assert_eq!((a.next(), a.granted()), (a_before.next(), a_before.granted()), "a carries on where it was");

    // A lost node is refused twice; one outside the inventory is refused with its name.
    let again = Record::NodeDown { time_us: 101, node: node("r1"), reason: "x".into() };
    assert!(matches!(p.check(&again), Err(PlaneError::Invalid { .. })));
    let outside = Record::NodeDown { time_us: 101, node: node("r7"), reason: "x".into() };
    assert!(p.check(&outside).unwrap_err().to_string().contains("r7 is not in the inventory"));

    // The training node: both jobs fail; no training node is left, so both wait in the queue
    // (in the order they were re-submitted) to resume from their checkpoints.
    run(&mut p, &mut records, "b", 3, &mut t);
    let down = Record::NodeDown { time_us: 200, node: node("t0"), reason: "gone".into() };
    p.apply(&down).unwrap();
    records.push(down);
    for job in ["a", "b"] {
        let j = p.job(job).unwrap();
        assert_eq!(j.state, JobState::Failed, "{job}");
        assert!(j.failure.as_deref().unwrap().contains("node t0 lost"), "{:?}", j.failure);
    }
    let waiting: Vec<&str> = p.queue().iter().map(|q| q.submit.id.as_str()).collect();
    assert_eq!(waiting, ["a", "b"]);
    assert_eq!(p.events().iter().filter(|e| e.kind == "requeued").count(), 2);
    assert!(p.may_start("b", Phase::Rollout, 3).is_ok_and(|granted| !granted), "a queued job is told to wait");
    // A smaller inventory later (a machine went away) never shrinks the pools: indices name
    // machines, and node-down records must stay valid on replay.
    let smaller = inventory(250, 2, 1);
    p.apply(&smaller).unwrap();
    records.push(smaller);
    assert_eq!(p.placer().config().capacity, Some((3, 1)));
    // Back in service: the queued jobs start again from their checkpoints, then a new job
    // is placed (or waits behind them).
    let up = Record::NodeUp { time_us: 300, node: node("t0") };
    p.apply(&up).unwrap();
    records.push(up);
    assert!(p.queue().is_empty());
    let b = p.job("b").unwrap();
    assert_eq!((b.state, b.completed_iterations, b.next()), (JobState::Running, 3, (Phase::Rollout, 3)));
    assert_eq!(p.job("a").unwrap().state, JobState::Running);
    let c = submit(301, "c");
    p.apply(&c).unwrap();
    records.push(c);

    // Replaying the records rebuilds the same jobs and events.
    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    assert_eq!(q.events(), p.events());
    for (x, y) in p.jobs().zip(q.jobs()) {
        assert_eq!(
            (x.state, x.id, &x.decision, x.completed_iterations),
            (y.state, y.id, &y.decision, y.completed_iterations)
        );
    }
}

/// A preemption notice closes the node to new placements while the job on it runs on; at the
/// deadline the node goes as a lost node does (the job re-admitted off it from its last
/// completed iteration); a second notice, or one on a down node, is refused; replay agrees.
#[test]
fn a_preemption_notice_closes_the_node_and_its_job_moves_when_it_goes() {
    let mut p = plane();
    let mut records = vec![inventory(0, 3, 1), submit(1, "a")];
    for r in &records {
        p.apply(r).unwrap();
    }
    assert_eq!(p.job("a").unwrap().decision.as_ref().unwrap().rollout_nodes, vec![node("r0")]);
    let mut t = 10;
    run(&mut p, &mut records, "a", 1, &mut t);
    let deadline_us = t + 120_000_000;
    let notice = Record::NodeNotice { time_us: t, node: node("r0"), deadline_us, reason: "spot reclaimed".into() };
    p.apply(&notice).unwrap();
    records.push(notice.clone());
    let told: Vec<_> = p.events().iter().filter(|e| e.kind == "preemption-notice").map(|e| e.job.clone()).collect();
    assert_eq!(told, ["a"]);
    assert!(p.notices_due(deadline_us - 1).is_empty());
    assert_eq!(p.notices_due(deadline_us), vec![(node("r0"), "spot reclaimed".to_string())]);
    assert!(p.check(&notice).unwrap_err().to_string().contains("already under a preemption notice"));
    // A restart from a snapshot keeps the notice.
    let restored = plane().restore(&p.snapshot()).unwrap();
    assert_eq!(restored.notices_due(deadline_us), p.notices_due(deadline_us));
    assert_eq!(restored.snapshot(), p.snapshot());

    // The job carries on where it is; a newcomer is never placed on the node.
    let uid = p.job("a").unwrap().id;
    run(&mut p, &mut records, "a", 2, &mut t);
    assert_eq!((p.job("a").unwrap().state, p.job("a").unwrap().id), (JobState::Running, uid));
    let b = submit(t, "b");
    p.apply(&b).unwrap();
    records.push(b);
    assert!(!p.job("b").unwrap().decision.as_ref().unwrap().rollout_nodes.contains(&node("r0")));

    // The deadline: the node goes; the job resumes from its 2 completed iterations elsewhere.
    let down = Record::NodeDown { time_us: deadline_us, node: node("r0"), reason: "preempted: spot reclaimed".into() };
    p.apply(&down).unwrap();
    records.push(down);
    let a = p.job("a").unwrap();
    assert_eq!((a.state, a.submit.server.resume_from), (JobState::Running, Some(2)));
    assert!(!a.decision.as_ref().unwrap().rollout_nodes.contains(&node("r0")));
    assert!(p.notices().next().is_none() && p.notices_due(u64::MAX).is_empty());
    let late = Record::NodeNotice {
        time_us: deadline_us + 1,
        node: node("r0"),
        deadline_us: deadline_us + 2,
        reason: "x".into(),
    };
    assert!(p.check(&late).unwrap_err().to_string().contains("already down"));

    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    assert_eq!(q.events(), p.events());
    assert_eq!(q.snapshot(), p.snapshot());
}

#[test]
fn node_failures_need_fixed_pools_and_launch_specs_are_checked() {
    let cluster = ClusterConfig::default();
    let p = Plane::new(cluster.clone(), PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0));
    let down = Record::NodeDown { time_us: 1, node: NodeId { pool: Pool::Rollout, index: 0 }, reason: "x".into() };
    assert!(p.check(&down).unwrap_err().to_string().contains("fixed-capacity"));
    for (env, field) in [("WEAVE_JOB", "launch.env.WEAVE_JOB"), ("1X", "launch.env.1X"), ("A B", "launch.env.A B")] {
        let job: SubmitSpec = serde_json::from_value(serde_json::json!({
            "id": "j", "type": "7B_8k", "launch": { "entrypoint": "python3 x.py", "env": { env: "v" } }
        }))
        .unwrap();
        let e = p.check(&Record::Submit { time_us: 1, tenant: "t".into(), job }).unwrap_err();
        assert!(matches!(&e, PlaneError::Invalid { field: f, .. } if f == field), "{e}");
    }
    let job: SubmitSpec =
        serde_json::from_value(serde_json::json!({ "id": "j", "type": "7B_8k", "launch": { "entrypoint": " " } }))
            .unwrap();
    assert!(p.check(&Record::Submit { time_us: 1, tenant: "t".into(), job }).is_err());
}

/// Switches a job reports with its phases are learned: its re-admission after a node loss is
/// placed with their medians in place of the model's (nonsense reports are ignored), and a
/// replay of the same records learns the same.
#[test]
fn a_readmission_is_placed_with_the_switches_the_job_reported() {
    let mut p = plane();
    let mut records =
        vec![inventory(0, 2, 1), submit(1, "a"), Record::Ready { time_us: 2, job: "a".into(), admission: 0 }];
    let reports = [
        (Phase::Rollout, 0, serde_json::json!({ "switch": "cold", "switch_s": 2.5 })),
        (Phase::Train, 0, serde_json::json!({ "switch": "warm", "switch_s": 0.25 })),
        (Phase::Rollout, 1, serde_json::json!({ "switch": "warm", "switch_s": 0.5 })),
        (Phase::Train, 1, serde_json::json!({ "switch": "warm", "switch_s": 0.75 })),
        (Phase::Rollout, 2, serde_json::json!({ "switch": "warm", "switch_s": -1.0 })),
        (Phase::Train, 2, serde_json::json!({ "switch": "lukewarm", "switch_s": 9.0 })),
    ];
    for (i, (phase, k, meta)) in reports.into_iter().enumerate() {
        let mut r = finish(10 + i as u64, "a", phase, k);
        if let Record::Finish { meta: m, .. } = &mut r {
            *m = Some(meta);
        }
        records.push(r);
    }
    for r in &records {
        p.apply(r).unwrap();
    }
    let a = p.job("a").unwrap();
    assert_eq!(a.submit.server.switch_warm_s, None, "the submission declared none");
    let lost = a.decision.as_ref().unwrap().rollout_nodes[0];
    let down = Record::NodeDown { time_us: 100, node: lost, reason: "gone".into() };
    p.apply(&down).unwrap();
    records.push(down);
    let a = p.job("a").unwrap();
    assert_eq!((a.state, a.completed_iterations), (JobState::Running, 3), "re-admitted");
    assert_eq!(
        (a.submit.server.switch_warm_s, a.submit.server.switch_cold_s),
        (Some(0.5), Some(2.5)),
        "the medians reported"
    );
    let mut replay = plane();
    for r in &records {
        replay.apply(r).unwrap();
    }
    assert_eq!(replay.job("a").unwrap().submit.server.switch_warm_s, Some(0.5), "a replay learns the same");
}

mod common;
use common::{body, client, finish_phase, start_phase, temp_dir, wait_until, TestServer, ALICE, BOB, OPS};
use serde_json::{json, Value};
use std::time::Duration;

fn post(s: &TestServer, token: &str, path: &str, json: Option<Value>) -> (u16, Value) {
    let r = client().post(s.url(path)).bearer_auth(token);
    body(match json {
        Some(j) => r.json(&j).send().unwrap(),
        None => r.send().unwrap(),
    })
}

fn cluster(s: &TestServer) -> Value {
    body(client().get(s.url("/v1/cluster")).bearer_auth(OPS).send().unwrap()).1
}

fn job(s: &TestServer, name: &str) -> Value {
    body(client().get(s.url(&format!("/v1/jobs/{name}"))).bearer_auth(ALICE).send().unwrap()).1["job"].clone()
}

/// A server on fixed pools (`rollout_nodes` and one training node) where alice's job `a` has
/// completed its first iteration.
fn one_iteration_done(name: &str, rollout_nodes: u32) -> TestServer {
    let s = TestServer::start_with(temp_dir(name), Duration::from_secs(600), |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = rollout_nodes;
        cfg.cluster.training.nodes = 1;
    });
    let spec = json!({ "id": "a", "type": "3B_4k", "iterations": 4, "rollout_s": 50, "train_s": 60, "slo": 1.0 });
    assert_eq!(common::submit(&s, ALICE, spec).0, 201);
    for phase in ["rollout", "train"] {
        assert_eq!(start_phase(&s, ALICE, "a", phase, 0, 1.0).0, 200);
        assert_eq!(finish_phase(&s, ALICE, "a", phase, 0, 1.0).0, 200);
    }
    s
}

/// An operator takes the only rollout node out of service over HTTP: its job fails and waits
/// in the queue from its last completed iteration; the node's return starts it again there.
#[test]
fn an_admin_takes_a_node_out_of_service_and_back_over_http() {
    let s = one_iteration_done("node-http", 1);
    assert_eq!(start_phase(&s, ALICE, "a", "rollout", 1, 1.0).0, 200, "rollout 1 runs when the node is lost");

    let (code, err) = post(&s, ALICE, "/v1/nodes/r0/down", None);
    assert_eq!(code, 403, "{err}");
    let (code, err) = post(&s, OPS, "/v1/nodes/q7/down", None);
    assert!(code == 400 && err["error"].as_str().unwrap().contains("node `q7`"), "{code} {err}");
    let (code, err) = post(&s, OPS, "/v1/nodes/r3/down", None);
    assert!(code == 400 && err["error"].as_str().unwrap().contains("node"), "{code} {err}");
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/down", Some(json!({ "why": "disk" })));
    assert!(code == 400 && err["error"].as_str().unwrap().contains("why"), "{code} {err}");
    assert_eq!(job(&s, "a")["state"], "running", "refused requests changed nothing");

    let (code, out) = post(&s, OPS, "/v1/nodes/r0/down", Some(json!({ "reason": "NIC failed" })));
    assert_eq!((code, out), (200, json!({ "node": "r0", "state": "down" })));
    let a = job(&s, "a");
    assert_eq!((a["state"].as_str(), a["completed_iterations"].as_u64()), (Some("queued"), Some(1)), "{a}");
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/down", None);
    assert!(code == 400 && err["error"].as_str().unwrap().contains("already down"), "{code} {err}");
    assert_eq!(finish_phase(&s, ALICE, "a", "rollout", 1, 1.0).0, 409, "the lost admission's phase cannot finish");

    assert_eq!(post(&s, OPS, "/v1/nodes/r0/up", None), (200, json!({ "node": "r0", "state": "up" })));
    let a = job(&s, "a");
    assert_eq!((a["state"].as_str(), a["next"].as_str()), (Some("running"), Some("rollout 1")), "{a}");
    let events = body(client().get(s.url("/v1/events?after=0")).bearer_auth(OPS).send().unwrap()).1;
    let kinds: Vec<&str> = events.as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in ["node-down", "requeued", "node-up"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
}

/// A preemption notice over HTTP: admins only, the body checked; the job's tenant is told;
/// the cluster view lists it; when it runs out the server takes the node out of service by
/// itself and the job resumes on the other node from its last completed iteration.
#[test]
fn a_preemption_notice_over_http_takes_the_node_at_its_deadline() {
    let s = one_iteration_done("node-notice", 2);
    assert_eq!(post(&s, ALICE, "/v1/nodes/r0/notice", Some(json!({ "seconds": 1 }))).0, 403);
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "secs": 1 })));
    assert!(code == 400 && err["error"].as_str().unwrap().contains("seconds"), "{code} {err}");
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 100_000 })));
    assert!(code == 400 && err["error"].as_str().unwrap().contains("at most 86400"), "{code} {err}");
    assert!(cluster(&s)["notices"].as_array().unwrap().is_empty(), "refused requests changed nothing");

    // A long notice first (nothing can run out while it is looked at), then withdrawn.
    let (code, out) = post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 3600, "reason": "spot" })));
    assert_eq!((code, out), (200, json!({ "node": "r0", "state": "notice", "seconds": 3600 })));
    let events = body(client().get(s.url("/v1/events?after=0")).bearer_auth(ALICE).send().unwrap()).1;
    let told = events.as_array().unwrap().iter().find(|e| e["kind"] == "preemption-notice").cloned();
    assert_eq!(told.as_ref().map(|e| e["job"].clone()), Some(json!("a")), "{events}");
    let deadline = told.unwrap()["meta"]["deadline_us"].clone();
    let a = job(&s, "a");
    assert_eq!(a["preemption_notice"], json!({ "node": "r0", "deadline_us": deadline }), "the job's view says so: {a}");
    assert_eq!(cluster(&s)["notices"][0]["node"], "r0");
    let (code, grant) = start_phase(&s, ALICE, "a", "rollout", 1, 1.0);
    assert_eq!((code, &grant["preemption_notice"]["node"]), (200, &json!("r0")), "the grant says so too: {grant}");
    let (code, beat) = post(&s, ALICE, "/v1/jobs/a/heartbeat", None);
    assert_eq!((code, &beat["preemption_notice"]["node"]), (200, &json!("r0")), "and its heartbeat: {beat}");
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 1 })));
    assert!(code == 400 && err["error"].as_str().unwrap().contains("already under"), "{code} {err}");
    assert_eq!(post(&s, OPS, "/v1/nodes/r0/up", None).0, 200, "withdrawn");
    assert!(job(&s, "a").get("preemption_notice").is_none());
    assert_eq!(post(&s, ALICE, "/v1/jobs/a/heartbeat", None).1, json!({ "status": "ok" }));
    assert!(cluster(&s)["notices"].as_array().unwrap().is_empty());

    assert_eq!(post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 1, "reason": "spot" }))).0, 200);
    // The server takes the node by itself once this one runs out (its reaper, every 250
    // ms): waited for, not timed.
    let gone = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        cluster(&s)["down"] == json!(["r0"])
    });
    assert!(gone, "{}", cluster(&s));
    assert!(cluster(&s)["notices"].as_array().unwrap().is_empty());
    let a = job(&s, "a");
    assert_eq!((a["state"].as_str(), a["next"].as_str()), (Some("running"), Some("rollout 1")), "{a}");
    assert_eq!(a["rollout_nodes"], json!(["r1"]), "{a}");
    assert!(a.get("preemption_notice").is_none(), "{a}");
}

/// With an execution backend's pools (Ray), node health comes from the backend, not an admin:
/// down and up are refused. A preemption notice (a Ray drain forwarded) is taken: the node
/// closes to placements, and it is not taken down at the deadline (Ray reports its death, the
/// backend then takes it down); withdrawing a notice is allowed.
#[test]
fn nodes_reported_by_a_backend_are_not_changed_by_hand_but_take_notices() {
    let dir = temp_dir("node-recorded");
    let recorded = |cfg: &mut weave_server::ServerConfig| cfg.capacity = weave_server::Capacity::Recorded;
    {
        // The inventory the backend would have recorded.
        let mut cfg = common::config(dir.clone(), Duration::from_secs(600));
        recorded(&mut cfg);
        let shared = weave_server::Shared::open(cfg).unwrap();
        shared.commit(|time_us| inventory(time_us, 2, 1)).unwrap();
    }
    // Heartbeats time out after 1 s: a job's failure for silence is the reaper's visible tick.
    let s = TestServer::start_with(dir, Duration::from_secs(1), recorded);
    let (code, err) = post(&s, OPS, "/v1/nodes/r0/down", None);
    assert!(code == 409 && err["error"].as_str().unwrap().contains("Ray"), "{code} {err}");
    assert_eq!(post(&s, OPS, "/v1/nodes/r1/up", None).0, 409, "r1 is not under a notice");
    assert_eq!(post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 3600 }))).0, 200);
    assert_eq!(post(&s, OPS, "/v1/nodes/r0/up", None).0, 200, "a notice may be withdrawn");
    assert!(cluster(&s)["notices"].as_array().unwrap().is_empty());
    assert_eq!(post(&s, OPS, "/v1/nodes/r0/notice", Some(json!({ "seconds": 1, "reason": "ray drain" }))).0, 200);
    // Proof the reaper looked after the deadline, from events rather than a sleep: a job
    // submitted after the notice and never heard from is failed by the reaper more than 1 s
    // later (after the deadline), in a tick that then looks at notices; a second such job,
    // submitted once the first is failed, is failed in a later tick, so a whole look at the
    // notices after the deadline has run by then.
    for job in ["silent-1", "silent-2"] {
        let spec = json!({ "id": job, "type": "3B_4k", "iterations": 2, "rollout_s": 50, "train_s": 60, "slo": 2.0 });
        assert_eq!(common::submit(&s, ALICE, spec).0, 201, "{job} is admitted on r1");
        wait_until("the reaper to fail the silent job", Duration::from_secs(30), || {
            let (_, v) = body(client().get(s.url(&format!("/v1/jobs/{job}"))).bearer_auth(ALICE).send().unwrap());
            (v["job"]["state"] == "failed").then_some(())
        });
    }
    // Well past the deadline the node is still only noticed.
    let c = cluster(&s);
    assert_eq!((c["notices"][0]["node"].as_str(), &c["down"]), (Some("r0"), &json!([])), "{c}");
}

/// A job whose process died after its rollout finished (its trajectories gone with it) asks
/// for a restart: the admission ends and the job runs again from its last completed
/// iteration, so the lost rollout is run again; the others carry on; replay agrees.
#[test]
fn a_restart_runs_the_job_again_from_its_last_completed_iteration() {
    let mut p = plane();
    let mut records = vec![inventory(0, 3, 1), submit(1, "a"), submit(2, "b")];
    for r in &records {
        p.apply(r).unwrap();
    }
    let mut t = 10;
    run(&mut p, &mut records, "b", 2, &mut t);
    // b's rollout 2 finishes: its gate moves on to training 2.
    let rollout = finish(t + 1, "b", Phase::Rollout, 2);
    p.apply(&rollout).unwrap();
    records.push(rollout);
    let (b_before, a_before) = (p.job("b").unwrap().clone(), p.job("a").unwrap().clone());
    assert_eq!(b_before.next(), (Phase::Train, 2));

    let unknown = Record::Restart { time_us: t + 2, job: "zz".into(), reason: "x".into() };
    assert!(matches!(p.check(&unknown), Err(PlaneError::NotFound(_))));
    let restart = Record::Restart { time_us: t + 2, job: "b".into(), reason: "its processes exited".into() };
    p.check(&restart).unwrap();
    p.apply(&restart).unwrap();
    records.push(restart);
    let b = p.job("b").unwrap();
    assert_eq!(b.state, JobState::Running, "re-admitted");
    assert_ne!(b.id, b_before.id, "a new admission");
    assert_eq!((b.completed_iterations, b.submit.server.resume_from), (2, Some(2)));
    assert_eq!(b.next(), (Phase::Rollout, 2), "the lost rollout runs again");
    let readmitted = p.events().iter().rev().find(|e| e.job == "b" && e.kind == "readmitted").unwrap();
    assert_eq!(readmitted.meta.as_ref().unwrap()["resume_from"], 2);
    let a = p.job("a").unwrap();
    assert_eq!((a.id, a.next(), a.granted()), (a_before.id, a_before.next(), a_before.granted()), "a carries on");
    // The old admission's training can no longer be reported.
    let stale = Record::Finish {
        time_us: t + 3,
        job: "b".into(),
        phase: Phase::Train,
        iteration: 2,
        duration_us: 100_000_000,
        meta: None,
        admission: Some(b_before.id.0),
    };
    assert!(p.check(&stale).is_err());

    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    assert_eq!(q.events(), p.events());
    assert!(q.snapshot() == p.snapshot(), "replay rebuilds the same plane");
}

/// The restart endpoint: the job's own tenant only, a JSON body with the reason; the job runs
/// again as a new admission from its last completed iteration.
#[test]
fn a_driver_restarts_its_job_over_http() {
    let s = TestServer::start(temp_dir("restart-http"), Duration::from_secs(600));
    let spec = json!({ "id": "a", "type": "3B_4k", "iterations": 4, "rollout_s": 50, "train_s": 60 });
    assert_eq!(common::submit(&s, ALICE, spec).0, 201);
    for phase in ["rollout", "train"] {
        assert_eq!(start_phase(&s, ALICE, "a", phase, 0, 1.0).0, 200);
        assert_eq!(finish_phase(&s, ALICE, "a", phase, 0, 1.0).0, 200);
    }
    assert_eq!(start_phase(&s, ALICE, "a", "rollout", 1, 1.0).0, 200);
    assert_eq!(finish_phase(&s, ALICE, "a", "rollout", 1, 1.0).0, 200);
    let before = job(&s, "a");
    assert_eq!(before["next"], "train 1");

    let (code, err) = post(&s, BOB, "/v1/jobs/a/restart", Some(json!({ "reason": "x" })));
    assert_eq!(code, 404, "another tenant's job: {err}");
    let (code, err) = post(&s, ALICE, "/v1/jobs/a/restart", Some(json!({ "why": "x" })));
    assert!(code == 400 && err["error"].as_str().unwrap().contains("why"), "{code} {err}");
    assert_eq!(job(&s, "a")["uid"], before["uid"], "refused requests changed nothing");

    let (code, a) = post(&s, ALICE, "/v1/jobs/a/restart", Some(json!({ "reason": "trainer died" })));
    assert_eq!(code, 200, "{a}");
    assert_eq!((a["state"].as_str(), a["next"].as_str()), (Some("running"), Some("rollout 1")), "{a}");
    assert_ne!(a["uid"], before["uid"]);
    assert_eq!(a["completed_iterations"], 1);
    assert_eq!(start_phase(&s, ALICE, "a", "rollout", 1, 1.0).0, 200, "the lost rollout runs again");
}

/// A launched job holds nothing while its processes start: admitted beside a running partner
/// on the same rollout and training node, it gets no grant and the partner runs on until it
/// first asks (`Record::Ready`); then it joins and both go on. A replay rebuilds the same.
#[test]
fn a_launched_job_joins_its_group_when_it_first_asks_and_holds_no_one_up_before() {
    let mut p = plane();
    // Complementary: a rollout-heavy, b training-heavy, packed on one node of each pool.
    let mut records = vec![inventory(0, 1, 1), submit_timed(1, "a", 300.0, 100.0), submit_timed(2, "b", 100.0, 300.0)];
    for r in &records {
        p.apply(r).unwrap();
    }
    let (a, b) = (p.job("a").unwrap(), p.job("b").unwrap());
    assert_eq!(a.decision.as_ref().unwrap().group, b.decision.as_ref().unwrap().group, "one group, one node each");
    assert_eq!((a.granted(), b.granted()), (None, None), "neither has asked yet");
    assert_eq!((p.awaits_start("a"), p.awaits_start("b")), (Some(a.id.0), Some(b.id.0)));
    // Refused: another admission's start, or a job that is not waiting.
    let stale = Record::Ready { time_us: 3, job: "a".into(), admission: b.id.0 };
    assert!(matches!(p.check(&stale), Err(PlaneError::Conflict { .. })));

    let ready = Record::Ready { time_us: 3, job: "a".into(), admission: a.id.0 };
    p.apply(&ready).unwrap();
    records.push(ready.clone());
    assert!(matches!(p.check(&ready), Err(PlaneError::Conflict { .. })), "once only");
    // a runs three whole iterations while b starts up: b's admission holds neither node.
    let mut t = 10;
    for k in 0..3 {
        for phase in [Phase::Rollout, Phase::Train] {
            assert_eq!(p.job("a").unwrap().granted(), Some((phase, k)), "a is never held up");
            t += 10;
            let r = finish(t, "a", phase, k);
            p.apply(&r).unwrap();
            records.push(r);
        }
    }
    assert_eq!(p.job("b").unwrap().granted(), None);

    t += 1;
    let ready = Record::Ready { time_us: t, job: "b".into(), admission: p.job("b").unwrap().id.0 };
    p.apply(&ready).unwrap();
    records.push(ready);
    assert_eq!(p.awaits_start("b"), None);
    let waited = p.events().iter().find(|e| e.job == "b" && e.kind == "ready").unwrap().meta.clone().unwrap();
    assert_eq!(waited["waited_s"], serde_json::json!((t - 2) as f64 / 1e6));
    // Now both run, sharing the nodes under the gate, each phase as long as declared.
    run_finishing(&mut p, &mut records, "b", 3, &mut t, |time_us, name, phase, iteration| {
        let long = (name == "a") == (phase == Phase::Rollout);
        let duration_us = if long { 300_000_000 } else { 100_000_000 };
        Record::Finish { time_us, job: name.into(), phase, iteration, duration_us, meta: None, admission: None }
    });
    assert!(p.job("a").unwrap().completed_iterations > 3, "a went on beside b");

    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    assert_eq!(q.events(), p.events());
}

/// Over HTTP: a launched job waits `starting` (no grant) through a restart of the server; its
/// first ask to start a phase joins it and is granted at once; a second process's ask after
/// that finds it joined.
#[test]
fn a_launched_job_starts_on_its_first_ask_over_http_and_waits_through_a_restart() {
    let dir = temp_dir("launched-start");
    let spec = json!({ "id": "l", "type": "3B_4k", "iterations": 2, "rollout_s": 50, "train_s": 60,
                       "launch": { "entrypoint": "python3 job.py" } });
    {
        let s = TestServer::start(dir.clone(), Duration::from_secs(600));
        assert_eq!(common::submit(&s, ALICE, spec).0, 201);
        let j = job(&s, "l");
        assert_eq!((j["starting"].clone(), j["granted"].clone()), (json!(true), Value::Null), "{j}");
        s.stop();
    }
    let s = TestServer::start(dir, Duration::from_secs(600));
    assert_eq!(job(&s, "l")["starting"], json!(true), "still waiting after the restart");
    let (code, granted) = start_phase(&s, ALICE, "l", "rollout", 0, 5.0);
    assert_eq!((code, granted["status"].as_str()), (200, Some("granted")), "{granted}");
    assert_eq!(job(&s, "l")["starting"], Value::Null);
    // Asked again (a second process, a retry): it is joined, and granted as before.
    let (code, again) = start_phase(&s, ALICE, "l", "rollout", 0, 0.2);
    assert_eq!((code, again["status"].as_str()), (200, Some("granted")), "{again}");
    let events = body(client().get(s.url("/v1/events")).bearer_auth(ALICE).send().unwrap()).1;
    let kinds: Vec<&str> = events.as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "ready").count(), 1, "{kinds:?}");
    assert!(kinds.ends_with(&["admitted", "ready", "grant"]), "{kinds:?}");
}
