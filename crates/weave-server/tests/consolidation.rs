//! Consolidation in the control plane: a job running co-located moves into a group a new job
//! opens, re-admitted from its checkpoint under a new admission (its old driver's token stops
//! working); a group left with one member pulls in a job that runs alone; replay rebuilds it.

use weave_core::{ClusterConfig, Micros};
use weave_dispatch::Phase;
use weave_place::consolidate::ChurnLimits;
use weave_place::{DecisionKind, PlacePolicy, PlacerConfig};
use weave_server::auth::JobTokens;
use weave_server::plane::{JobState, Plane, Record, SubmitSpec};

fn plane() -> Plane {
    let cluster = ClusterConfig::default();
    let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    Plane::new(cluster, cfg).with_consolidation(Default::default())
}

fn submit(time_us: u64, id: &str, iterations: u64) -> Record {
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
        "id": id, "type": "7B_8k", "iterations": iterations, "slo": 1.5,
    }))
    .unwrap();
    Record::Submit { time_us, tenant: "alice".into(), job }
}

/// Finishes every granted phase (each 100 s) until `job` has completed `n` iterations.
fn run(p: &mut Plane, records: &mut Vec<Record>, job: &str, n: u64, t: &mut u64) {
    while p.job(job).unwrap().completed_iterations < n && p.job(job).unwrap().state == JobState::Running {
        let granted: Vec<(String, Phase, u64)> =
            p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|(ph, k)| (j.name.clone(), ph, k))).collect();
        assert!(!granted.is_empty(), "nothing granted");
        for (name, phase, iteration) in granted {
            *t += 100_000_000;
            let r = Record::Finish {
                time_us: *t,
                job: name,
                phase,
                iteration,
                duration_us: 100_000_000,
                meta: None,
                admission: None,
            };
            p.apply(&r).unwrap();
            records.push(r);
        }
    }
}

fn current(p: &Plane) -> impl Fn(&str) -> Option<(String, u32)> + '_ {
    |name| p.job(name).filter(|j| j.state == JobState::Running).map(|j| (j.tenant.clone(), j.id.0))
}

#[test]
fn a_colocated_job_moves_into_the_group_a_new_job_opens() {
    let mut p = plane();
    let mut records = vec![submit(0, "a", 40)];
    p.apply(&records[0]).unwrap();
    let a = p.job("a").unwrap();
    assert_eq!(a.decision.as_ref().unwrap().kind, DecisionKind::Colocated, "alone, co-located is cheapest");
    let old_uid = a.id.0;
    let tokens = JobTokens::new([7; 32]);
    let old_token = format!("Bearer {}", tokens.token("alice", "a", old_uid));
    assert!(tokens.authenticate(Some(&old_token), current(&p)).is_some());
    let mut t = 0;
    run(&mut p, &mut records, "a", 3, &mut t);
    // 3 iterations of 100 s + 100 s, alone, under an SLO of 1.5: 900 s allowed, 600 s taken.
    // A move must fit in what is left plus what the target leaves on each later iteration.
    assert_eq!(p.job("a").unwrap().banked_slack(), weave_core::Micros::from_secs(300));

    // b arrives: it opens a disaggregated group and a moves onto its rollout node.
    t += 1;
    let rb = submit(t, "b", 40);
    p.apply(&rb).unwrap();
    records.push(rb);
    let (a, b) = (p.job("a").unwrap(), p.job("b").unwrap());
    assert_eq!(b.decision.as_ref().unwrap().kind, DecisionKind::Isolated);
    let da = a.decision.as_ref().unwrap();
    assert_eq!(da.group, b.decision.as_ref().unwrap().group);
    assert_eq!(da.rollout_nodes, b.decision.as_ref().unwrap().rollout_nodes, "direct: one shared rollout node");
    // Re-admitted from its checkpoint, under a new admission.
    assert_eq!(a.state, JobState::Running);
    assert_eq!(a.completed_iterations, 3);
    assert_eq!(a.next(), (Phase::Rollout, 3));
    assert_ne!(a.id.0, old_uid);
    let moved = p.events().iter().find(|e| e.kind == "moved" && e.job == "a").expect("a moved");
    assert_eq!(moved.meta.as_ref().unwrap()["resume_from"], 3);
    // The old driver's token stops working; the new admission's works.
    assert!(tokens.authenticate(Some(&old_token), current(&p)).is_none());
    let new_token = format!("Bearer {}", tokens.token("alice", "a", a.id.0));
    assert!(tokens.authenticate(Some(&new_token), current(&p)).is_some());
    // Both run to the end in the group; a's iterations are not redone.
    run(&mut p, &mut records, "a", 40, &mut t);
    run(&mut p, &mut records, "b", 40, &mut t);
    let finishes_of_a_iteration_3 = records
        .iter()
        .filter(|r| matches!(r, Record::Finish { job, phase: Phase::Train, iteration: 3, .. } if job == "a"))
        .count();
    assert_eq!(finishes_of_a_iteration_3, 1);

    // Replay rebuilds the same jobs and decisions.
    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    for name in ["a", "b"] {
        let (x, y) = (p.job(name).unwrap(), q.job(name).unwrap());
        assert_eq!((x.id, x.state, x.completed_iterations), (y.id, y.state, y.completed_iterations));
        assert_eq!(x.decision, y.decision);
    }
    assert_eq!(p.events(), q.events());
}

#[test]
fn a_group_left_with_one_member_pulls_in_a_job_that_runs_alone() {
    let mut p = plane();
    let mut records = vec![submit(0, "a", 4)];
    p.apply(&records[0]).unwrap();
    let mut t = 1;
    let rb = submit(t, "b", 40);
    p.apply(&rb).unwrap();
    records.push(rb);
    let group = p.job("b").unwrap().decision.as_ref().unwrap().group;
    assert_eq!(p.job("a").unwrap().decision.as_ref().unwrap().group, group, "a and b paired");
    // c arrives while the group is full: it runs co-located.
    t += 1;
    let rc = submit(t, "c", 40);
    p.apply(&rc).unwrap();
    records.push(rc);
    let c = p.job("c").unwrap().decision.as_ref().unwrap();
    assert_eq!(c.kind, DecisionKind::Colocated, "a third job on the shared node would break the SLOs");
    // a completes: b is alone in its group, and c (running alone) moves in.
    run(&mut p, &mut records, "a", 4, &mut t);
    assert_eq!(p.job("a").unwrap().state, JobState::Completed);
    let c = p.job("c").unwrap();
    assert_eq!(c.decision.as_ref().unwrap().group, group, "c was pulled into b's group");
    assert!(p.events().iter().any(|e| e.kind == "moved" && e.job == "c"));
    assert_eq!(c.state, JobState::Running);
}

/// With one move allowed per hour, the first arrival pairing spends the budget: the next two
/// jobs run co-located, alone, until the periodic pass (a durable record) pairs them. A
/// replay of the log and a restart from a snapshot taken before the pass make the same moves.
#[test]
fn the_periodic_pass_pairs_jobs_that_run_alone_and_replays_the_same() {
    let plane = || {
        let cluster = ClusterConfig::default();
        let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
        let limits = ChurnLimits { max_moves_per_hour: 1, ..Default::default() };
        Plane::new(cluster, cfg).with_consolidation(limits)
    };
    let mut p = plane();
    let mut records: Vec<Record> = ["a", "b", "c", "d"].iter().zip(0..).map(|(n, t)| submit(t, n, 40)).collect();
    for r in &records {
        p.apply(r).unwrap();
    }
    let group = |p: &Plane, name: &str| p.job(name).unwrap().decision.as_ref().unwrap().group;
    let kind = |p: &Plane, name: &str| p.job(name).unwrap().decision.as_ref().unwrap().kind;
    assert_eq!(group(&p, "a"), group(&p, "b"), "the first pairing");
    for name in ["c", "d"] {
        assert_eq!(kind(&p, name), DecisionKind::Colocated, "{name} runs alone: the hour's move is spent");
    }
    assert_ne!(group(&p, "c"), group(&p, "d"));
    let mut t = 3;
    run(&mut p, &mut records, "c", 6, &mut t);
    assert_eq!(p.events().iter().filter(|e| e.kind == "moved").count(), 1, "nothing moved but a");
    let every = weave_place::consolidate::PASS_INTERVAL;
    assert!(!p.consolidation_due(every.0 - 1, every), "not due before the interval");
    t = t.max(Micros::PER_HOUR + 10);
    assert!(p.consolidation_due(t, every));
    let cut = records.len();
    let pass = Record::Consolidate { time_us: t };
    p.apply(&pass).unwrap();
    records.push(pass);
    assert_eq!(group(&p, "c"), group(&p, "d"), "the pass paired them");
    assert!(!p.consolidation_due(t + 1, every), "the pass resets the interval");
    run(&mut p, &mut records, "c", 9, &mut t);

    let mut replayed = plane();
    for r in &records {
        replayed.apply(r).unwrap();
    }
    assert_eq!(p.events(), replayed.events());
    assert!(p.snapshot() == replayed.snapshot(), "replay rebuilds the same plane");
    let mut head = plane();
    for r in &records[..cut] {
        head.apply(r).unwrap();
    }
    let mut restarted = plane().restore(&head.snapshot()).unwrap();
    for r in &records[cut..] {
        restarted.apply(r).unwrap();
    }
    assert_eq!(p.events(), restarted.events());
    assert!(p.snapshot() == restarted.snapshot(), "a restart before the pass makes the same moves");
}

#[test]
fn a_pass_is_refused_where_consolidation_is_off() {
    let cluster = ClusterConfig::default();
    let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    let p = Plane::new(cluster, cfg);
    let err = p.check(&Record::Consolidate { time_us: 5 }).unwrap_err().to_string();
    assert!(err.contains("consolidat"), "{err}");
    assert!(!p.consolidation_due(u64::MAX, weave_place::consolidate::PASS_INTERVAL));
}
