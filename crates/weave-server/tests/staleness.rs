//! Bounded-staleness jobs at the gate: a rollout runs beside the training it may lag, each
//! rollout grant names the weights version it samples with, a rollout further ahead is refused
//! (409), a co-located job runs on-policy, the server's `--max-staleness` refuses more, and a
//! snapshot written before lanes existed restores to the same gate.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use weave_core::ClusterConfig;
use weave_dispatch::Phase;
use weave_place::{DecisionKind, PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, PlaneError, Record, SubmitSpec};

const S: u64 = 1_000_000;

fn plane(colocate: bool) -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.colocate = colocate;
    Plane::new(cluster, cfg)
}

/// A 7B job declaring `(rollout, train)` seconds.
fn submission(time_us: u64, id: &str, iterations: u64, staleness: u32, (rollout_s, train_s): (u64, u64)) -> Record {
    let job: SubmitSpec = serde_json::from_value(json!({
        "id": id, "type": "7B_8k", "iterations": iterations, "slo": 2.0,
        "rollout_s": rollout_s, "train_s": train_s, "staleness": staleness,
    }))
    .unwrap();
    Record::Submit { time_us, tenant: "alice".into(), job }
}

fn finish(p: &mut Plane, time_us: u64, job: &str, phase: Phase, iteration: u64) {
    let r =
        Record::Finish { time_us, job: job.into(), phase, iteration, duration_us: 90 * S, meta: None, admission: None };
    p.apply(&r).unwrap_or_else(|e| panic!("finish {job} {phase:?} {iteration}: {e}"));
}

fn weights(p: &Plane, job: &str) -> Option<u64> {
    p.job(job).unwrap().gate.rollout.map(|g| g.weights)
}

#[test]
fn a_one_step_off_policy_job_rolls_out_beside_its_training_and_no_further() {
    let mut p = plane(false);
    p.apply(&submission(0, "a", 4, 1, (100, 80))).unwrap();
    assert_eq!(p.job("a").unwrap().gate.staleness, 1);
    assert_eq!(p.job("a").unwrap().granted(), Some((Phase::Rollout, 0)));
    assert_eq!(weights(&p, "a"), Some(0));
    assert!(matches!(p.may_start("a", Phase::Rollout, 1), Err(PlaneError::Conflict { .. })), "one rollout at a time");
    finish(&mut p, 100 * S, "a", Phase::Rollout, 0);
    // Training 0 and rollout 1 (with weights version 0) both run now.
    assert_eq!(p.job("a").unwrap().gate.grants(), vec![(Phase::Rollout, 1), (Phase::Train, 0)]);
    assert_eq!(weights(&p, "a"), Some(0));
    finish(&mut p, 190 * S, "a", Phase::Rollout, 1);
    // Rollout 2 would sample version 0, two behind: refused, with the reason.
    match p.may_start("a", Phase::Rollout, 2) {
        Err(PlaneError::Conflict { reason, .. }) => assert!(reason.contains("staleness bound"), "{reason}"),
        other => panic!("rollout 2 before training 0 finished: {other:?}"),
    }
    // Training 1 is the lane's next but waits for training 0.
    assert!(matches!(p.may_start("a", Phase::Train, 1), Err(PlaneError::Conflict { .. })));
    finish(&mut p, 200 * S, "a", Phase::Train, 0);
    let a = p.job("a").unwrap();
    assert_eq!(a.gate.grants(), vec![(Phase::Rollout, 2), (Phase::Train, 1)]);
    assert_eq!(weights(&p, "a"), Some(1), "rollout 2 samples the weights training 0 left");
    assert_eq!(a.completed_iterations, 1);
}

#[test]
fn two_stale_jobs_share_a_group_within_their_bounds_to_the_end() {
    let mut p = plane(false);
    // Each alone keeps one pool busy and leaves the other mostly idle: together they share both.
    p.apply(&submission(0, "a", 6, 1, (100, 20))).unwrap();
    p.apply(&submission(0, "b", 6, 2, (20, 100))).unwrap();
    let decision = |n: &str| p.job(n).unwrap().decision.clone().unwrap();
    assert_eq!(decision("b").kind, DecisionKind::Direct, "b fills a's bubble");
    assert_eq!(decision("a").group, decision("b").group);
    // Phases take their declared times: the earliest-ending grant finishes first.
    let secs = |n: &str, ph: Phase| match (n, ph) {
        ("a", Phase::Rollout) | ("b", Phase::Train) => 100,
        _ => 20,
    };
    let mut started: std::collections::BTreeMap<(String, Phase, u64), u64> = Default::default();
    let (mut t, mut ahead, mut guard) = (0, 0, 0);
    while p.jobs().any(|j| j.state == JobState::Running) {
        guard += 1;
        assert!(guard < 200, "stuck");
        for j in p.jobs() {
            for (phase, k) in j.gate.grants() {
                let key = (j.name.clone(), phase, k);
                if started.contains_key(&key) {
                    continue;
                }
                if phase == Phase::Rollout {
                    let w = j.gate.rollout.unwrap().weights;
                    assert!(
                        k - w <= u64::from(j.gate.staleness) && w <= j.gate.trained,
                        "{} rollout {k} on {w}",
                        j.name
                    );
                    // Granted before the training it would wait for on-policy finished.
                    ahead += u64::from(k > j.gate.trained);
                } else {
                    assert!(j.gate.rolled > k, "{} trains {k} before its rollout finished", j.name);
                }
                started.insert(key, t);
            }
        }
        let running = started.iter().filter(|((n, ph, k), _)| p.job(n).unwrap().gate.is_granted(*ph, *k));
        let ((name, phase, k), end) = running
            .map(|(key, t0)| (key.clone(), t0 + secs(&key.0, key.1) * S))
            .min_by_key(|(_, end)| *end)
            .expect("nothing granted");
        t = end;
        finish(&mut p, t, &name, phase, k);
    }
    for n in ["a", "b"] {
        let j = p.job(n).unwrap();
        assert_eq!((j.state, j.completed_iterations), (JobState::Completed, 6), "{n}");
    }
    assert!(ahead > 0, "no rollout ran beside the training before it");
}

#[test]
fn a_colocated_job_runs_on_policy_whatever_it_allows() {
    let mut p = plane(true);
    p.apply(&submission(0, "c", 3, 1, (200, 30))).unwrap();
    let c = p.job("c").unwrap();
    assert_eq!(c.decision.as_ref().unwrap().kind, DecisionKind::Colocated, "alone, co-located is cheapest");
    assert_eq!(c.gate.staleness, 0);
    finish(&mut p, 100 * S, "c", Phase::Rollout, 0);
    assert!(p.may_start("c", Phase::Rollout, 1).is_err(), "its phases share GPUs: no rollout beside training");
}

#[test]
fn the_server_tells_the_weights_version_and_refuses_what_it_does_not_allow() {
    let s = TestServer::start_with(temp_dir("stale"), Duration::from_secs(60), |c| c.max_staleness = 1);
    let spec = |id: &str, k: serde_json::Value| json!({ "id": id, "type": "7B_8k", "iterations": 2, "rollout_s": 100, "train_s": 80, "staleness": k });
    // Above the server's bound, negative, fractional, huge: 400 naming the field.
    for bad in [json!(2), json!(-1), json!(0.5), json!(1u64 << 40), json!("1")] {
        let (st, v) = submit(&s, ALICE, spec("x", bad.clone()));
        assert_eq!(st, 400, "{bad}: {v}");
        assert!(v["error"].as_str().unwrap().contains("staleness"), "{bad}: {v}");
    }
    let (st, v) = submit(&s, ALICE, spec("a", json!(1)));
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["job"]["staleness"], 1, "{v}");
    let (st, g) = start_phase(&s, ALICE, "a", "rollout", 0, 0.0);
    assert_eq!((st, g["weights"].clone()), (200, json!(0)), "{g}");
    assert_eq!(finish_phase(&s, ALICE, "a", "rollout", 0, 90.0).0, 200);
    assert_eq!(start_phase(&s, ALICE, "a", "train", 0, 0.0).0, 200);
    let (st, g) = start_phase(&s, ALICE, "a", "rollout", 1, 0.0);
    assert_eq!((st, g["weights"].clone()), (200, json!(0)), "rollout 1 beside training 0: {g}");
    let (_, v) = body(client().get(s.url("/v1/jobs/a")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["granted"], "rollout 1, train 0", "{v}");
    assert_eq!(finish_phase(&s, ALICE, "a", "rollout", 1, 90.0).0, 200);
    let (st, v) = start_phase(&s, ALICE, "a", "rollout", 2, 0.0);
    assert_eq!(st, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("staleness bound"), "{v}");
    assert_eq!(finish_phase(&s, ALICE, "a", "train", 0, 80.0).0, 200);
    assert_eq!(start_phase(&s, ALICE, "a", "train", 1, 0.0).0, 200);
    assert_eq!(finish_phase(&s, ALICE, "a", "train", 1, 80.0).0, 200);
    let (_, v) = body(client().get(s.url("/v1/jobs/a")).bearer_auth(ALICE).send().unwrap());
    assert_eq!((v["job"]["state"].clone(), v["job"]["completed_iterations"].clone()), (json!("completed"), json!(2)));
    s.stop();
}

/// A grant's wait is measured from when its own lane became ready (the phases it depends on
/// finished): checked against the event log for a stale job sharing its group (and here its
/// rollout node) with an on-policy one, phases finishing in an order of their own. (Where the
/// lane's readiness and the job's last finish differ is `plane::job`'s unit test.)
#[test]
fn grant_waits_count_from_the_lanes_own_readiness() {
    let mut p = plane(false);
    p.set_grant_detail(true);
    p.apply(&submission(0, "a", 12, 1, (100, 80))).unwrap();
    p.apply(&submission(1, "b", 12, 0, (60, 90))).unwrap();
    // Finish whatever is granted, one phase at a time, at uneven times.
    let mut t = 10 * S;
    for step in 0..200u64 {
        let granted: Vec<(String, Phase, u64)> =
            p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|(ph, k)| (j.name.clone(), ph, k))).collect();
        // Mostly rollouts first: trainings linger, so a stale job's rollout lane runs ahead and
        // finishes while its training waits for the pool.
        let rollout = granted.iter().find(|g| g.1 == Phase::Rollout && step % 4 != 0);
        let Some((job, phase, k)) = rollout.or(granted.get(step as usize % granted.len().max(1))).cloned() else {
            break;
        };
        t += (13 + (step * 29) % 41) * S;
        finish(&mut p, t, &job, phase, k);
    }
    let events = p.events().iter().cloned().collect::<Vec<_>>();
    let mut checked = 0;
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e.kind == "grant") {
        let (phase, n) = (e.phase.unwrap(), e.iteration.unwrap());
        let earlier = &events[..i];
        let admitted = earlier.iter().rev().find(|x| x.job == e.job && x.kind == "admitted").unwrap().time_us;
        let done = |ph: Phase, k: Option<u64>| {
            k.and_then(|k| {
                earlier
                    .iter()
                    .rev()
                    .find(|x| x.job == e.job && x.kind == "finish" && x.phase == Some(ph) && x.iteration == Some(k))
            })
            .map_or(admitted, |x| x.time_us)
        };
        let k = if e.job == "a" { 2 } else { 1 };
        let ready = match phase {
            Phase::Rollout => done(Phase::Rollout, n.checked_sub(1)).max(done(Phase::Train, n.checked_sub(k))),
            Phase::Train => done(Phase::Rollout, Some(n)).max(done(Phase::Train, n.checked_sub(1))),
        };
        let wait = e.meta.as_ref().unwrap()["wait_s"].as_f64().unwrap();
        assert!((wait - (e.time_us - ready) as f64 / 1e6).abs() < 1e-9, "{} {phase:?} {n}: wait {wait}", e.job);
        checked += 1;
    }
    assert!(checked > 40, "{checked} grants checked");
    let waited = events
        .iter()
        .filter(|e| e.kind == "grant")
        .filter(|e| e.meta.as_ref().unwrap()["wait_s"].as_f64().unwrap() > 0.0)
        .count();
    assert!(waited > 5, "the members waited for each other ({waited} grants)");
}
