//! Preemption on fixed pools shared by tenants: a waiting job takes back capacity another
//! tenant borrowed from its quota, or displaces a lower-priority job of its own tenant; never
//! one inside its minimum run. The victim's admission ends, it waits again and resumes from its
//! last completed iteration; replay rebuilds the same plane.

use weave_core::{ClusterConfig, Micros};
use weave_dispatch::Phase;
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, Record, SubmitSpec};

const S: u64 = 1_000_000;

/// Two rollout and two training nodes; alice and bob are entitled to one of each.
fn plane() -> Plane {
    plane_where(weave_core::Priority::High)
}

/// [`plane`], with `preempts_own` the lowest priority that displaces its own tenant's jobs.
fn plane_where(preempts_own: weave_core::Priority) -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((2, 2));
    let quota = |name: &str| TenantQuota {
        name: name.into(),
        rollout_nodes: 1.0,
        training_nodes: 1.0,
        borrow_limit: None,
        env_cores: None,
    };
    Plane::new(cluster, cfg).with_share(SharePolicy {
        mode: ShareMode::Preemption,
        tenants: vec![quota("alice"), quota("bob")],
        min_run: Micros::from_secs(600),
        checkpoint_every: 1,
        half_life: None,
        preempts_own,
        grace: weave_core::Micros::ZERO,
    })
}

/// SLO 1.0: jobs never share nodes, so each holds one node of each pool.
fn submit(time_s: u64, tenant: &str, id: &str, priority: &str) -> Record {
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
        "id": id, "type": "3B_4k", "iterations": 4, "slo": 1.0, "rollout_s": 50.0, "train_s": 60.0,
        "priority": priority,
    }))
    .unwrap();
    Record::Submit { time_us: time_s * S, tenant: tenant.into(), job }
}

fn finish(time_s: u64, job: &str, phase: Phase, iteration: u64) -> Record {
    let duration_us = if phase == Phase::Rollout { 50 * S } else { 60 * S };
    Record::Finish { time_us: time_s * S, job: job.into(), phase, iteration, duration_us, meta: None, admission: None }
}

fn apply(p: &mut Plane, records: &mut Vec<Record>, r: Record) {
    p.apply(&r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
    records.push(r);
}

fn queue(p: &Plane) -> Vec<String> {
    p.queue().iter().map(|q| q.submit.id.clone()).collect()
}

fn state(p: &Plane, job: &str) -> JobState {
    p.job(job).map_or(JobState::Queued, |j| j.state)
}

#[test]
fn a_normal_job_waits_for_its_tenants_low_one_unless_the_policy_lets_it_preempt() {
    for (preempts_own, displaced) in [(weave_core::Priority::High, false), (weave_core::Priority::Normal, true)] {
        let mut p = plane_where(preempts_own);
        let mut records = Vec::new();
        apply(&mut p, &mut records, submit(0, "alice", "low", "low"));
        apply(&mut p, &mut records, submit(1, "bob", "b1", "normal"));
        // Past low's minimum run, alice's normal job finds her quota full.
        apply(&mut p, &mut records, submit(900, "alice", "normal", "normal"));
        let low = if displaced { JobState::Preempted } else { JobState::Running };
        assert_eq!(state(&p, "low"), low, "preempts_own {preempts_own:?}");
        assert_eq!(queue(&p), if displaced { ["low"] } else { ["normal"] });
        // A high job still displaces it either way.
        if !displaced {
            apply(&mut p, &mut records, submit(950, "alice", "urgent", "high"));
            assert_eq!(state(&p, "low"), JobState::Preempted);
            assert_eq!(state(&p, "urgent"), JobState::Running);
            // When the high job leaves, the preempted job resumes before the normal one that
            // waited longer: it was admitted, and its SLO clock runs.
            apply(&mut p, &mut records, Record::Cancel { time_us: 1000 * S, job: "urgent".into() });
            assert_eq!(state(&p, "low"), JobState::Running);
            assert_eq!(queue(&p), ["normal"]);
        }
    }
}

#[test]
fn reclaim_borrowed_then_outranked_never_inside_the_minimum_run_and_replay_agrees() {
    let mut p = plane();
    let mut records = Vec::new();
    apply(&mut p, &mut records, submit(0, "alice", "a1", "normal"));
    apply(&mut p, &mut records, submit(1, "alice", "a2", "normal")); // borrows bob's quota
    assert_eq!((state(&p, "a1"), state(&p, "a2")), (JobState::Running, JobState::Running));
    // a2 completes iteration 0 and is granted rollout 1 (work in progress).
    apply(&mut p, &mut records, finish(60, "a2", Phase::Rollout, 0));
    apply(&mut p, &mut records, finish(130, "a2", Phase::Train, 0));
    assert_eq!(p.job("a2").unwrap().granted(), Some((Phase::Rollout, 1)));

    // Bob is entitled to the node alice borrows, but a2 has run only 199 s: bob waits.
    apply(&mut p, &mut records, submit(200, "bob", "b1", "normal"));
    assert_eq!(queue(&p), ["b1"]);
    assert_eq!(state(&p, "a2"), JobState::Running);
    // Past the minimum run, the next record that changes anything lets bob reclaim one of
    // alice's jobs: both have work in progress, so the tie goes to the earlier admission.
    apply(&mut p, &mut records, finish(700, "a1", Phase::Rollout, 0));
    assert_eq!(state(&p, "b1"), JobState::Running);
    let a1 = p.job("a1").unwrap();
    assert_eq!(a1.state, JobState::Preempted);
    assert!(a1.failure.as_deref().unwrap().contains("reclaimed"), "{:?}", a1.failure);
    assert_eq!(state(&p, "a2"), JobState::Running);
    assert_eq!(queue(&p), ["a1"]);
    assert!(p.events().iter().any(|e| e.job == "a1" && e.kind == "preempted"));
    // Its driver's next phase is refused until it is re-admitted; its first phase waits.
    assert!(p.may_start("a1", Phase::Train, 0).is_err());
    assert_eq!(p.may_start("a1", Phase::Rollout, 0), Ok(false));
    assert!(p.check(&finish(701, "a1", Phase::Train, 0)).is_err());

    // A high-priority job of alice, over her quota: it displaces her normal a2 (ran 799 s),
    // which resumes from its last completed iteration.
    apply(&mut p, &mut records, submit(800, "alice", "a3", "high"));
    assert_eq!(state(&p, "a3"), JobState::Running);
    assert_eq!(state(&p, "a2"), JobState::Preempted);
    assert!(p.job("a2").unwrap().failure.as_deref().unwrap().contains("higher-priority"));
    assert_eq!(queue(&p), ["a1", "a2"]);
    assert_eq!(p.queue()[1].submit.server.resume_from, Some(1), "a2 resumes from iteration 1");
    // A normal job never displaces a high one.
    apply(&mut p, &mut records, submit(2000, "alice", "a4", "normal"));
    assert_eq!(state(&p, "a3"), JobState::Running);
    assert_eq!(queue(&p), ["a1", "a2", "a4"]);

    // Replay rebuilds the same plane: states, queue order and reasons, events.
    let mut q = plane();
    for r in &records {
        q.apply(r).unwrap();
    }
    let view = |p: &Plane| {
        let jobs: Vec<_> = p.jobs().map(|j| serde_json::to_value(j).unwrap()).collect();
        let queue: Vec<_> = p.queue().iter().map(|w| (w.submit.id.clone(), w.reason.clone())).collect();
        (jobs, queue, p.events().iter().cloned().collect::<Vec<_>>())
    };
    assert_eq!(view(&p), view(&q));

    // Bob's job ends: alice borrows again, her earliest waiting job first (a1 by arrival),
    // re-admitted from its checkpoint.
    let mut t = 2100;
    for k in 0..4 {
        for ph in [Phase::Rollout, Phase::Train] {
            while p.job("b1").unwrap().granted() != Some((ph, k)) {
                let (j, phase, it) = p.jobs().find_map(|j| j.granted().map(|(ph, k)| (j.name.clone(), ph, k))).unwrap();
                t += 70;
                apply(&mut p, &mut records, finish(t, &j, phase, it));
            }
            t += 70;
            apply(&mut p, &mut records, finish(t, "b1", ph, k));
        }
    }
    assert_eq!(state(&p, "b1"), JobState::Completed);
    assert_eq!(state(&p, "a1"), JobState::Running);
    assert_eq!(p.job("a1").unwrap().next(), (Phase::Rollout, 0));
    assert!(p.may_start("a1", Phase::Rollout, 0).is_ok());
    assert_eq!(queue(&p), ["a2", "a4"]);
}

/// A driver that took a grant, was preempted and re-admitted before it reported the phase
/// finished: the same phase is granted again to the new admission, and a finish that names
/// the old one is refused (its driver must hear that it was re-queued, and the measured
/// duration, which spans the time it waited, is not kept); the new admission's is accepted.
#[test]
fn a_finish_from_an_ended_admission_is_refused_after_re_admission() {
    let mut p = plane();
    let mut records = Vec::new();
    apply(&mut p, &mut records, submit(0, "alice", "a1", "normal"));
    apply(&mut p, &mut records, submit(1, "alice", "a2", "normal")); // borrows bob's quota
    let first = p.job("a1").unwrap().id.0;
    assert_eq!(p.job("a1").unwrap().granted(), Some((Phase::Rollout, 0)));
    // Past the minimum run bob reclaims; both have work in progress, a1 was admitted first.
    apply(&mut p, &mut records, submit(700, "bob", "b1", "normal"));
    assert_eq!(state(&p, "a1"), JobState::Preempted);
    apply(&mut p, &mut records, Record::Cancel { time_us: 710 * S, job: "b1".into() });
    let again = p.job("a1").unwrap();
    assert_eq!((again.state, again.granted()), (JobState::Running, Some((Phase::Rollout, 0))));
    let second = again.id.0;
    assert_ne!(first, second);
    let finish_as = |admission| Record::Finish {
        time_us: 720 * S,
        job: "a1".into(),
        phase: Phase::Rollout,
        iteration: 0,
        duration_us: 50 * S,
        meta: None,
        admission: Some(admission),
    };
    let refused = p.check(&finish_as(first)).unwrap_err().to_string();
    assert!(refused.contains(&format!("granted to admission {first}, which has ended")), "{refused}");
    apply(&mut p, &mut records, finish_as(second));
    assert_eq!(p.job("a1").unwrap().next(), (Phase::Train, 0));
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Three nodes of each pool; alice 2 (borrows without limit), bob 1 (borrows at most 1).
    fn plane3() -> Plane {
        let cluster = ClusterConfig::default();
        let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
        cfg.capacity = Some((3, 3));
        let quota = |name: &str, n: f64, borrow| TenantQuota {
            name: name.into(),
            rollout_nodes: n,
            training_nodes: n,
            borrow_limit: borrow,
            env_cores: None,
        };
        Plane::new(cluster, cfg).with_share(SharePolicy {
            mode: ShareMode::Preemption,
            tenants: vec![quota("alice", 2.0, None), quota("bob", 1.0, Some(1.0))],
            min_run: Micros::from_secs(300),
            checkpoint_every: 1,
            half_life: None,
            preempts_own: weave_core::Priority::High,
            grace: weave_core::Micros::ZERO,
        })
    }

    /// Finishes every granted phase once, `step_s` apart.
    fn finish_granted(p: &mut Plane, records: &mut Vec<Record>, t: &mut u64, step_s: u64) -> bool {
        let granted: Vec<(String, Phase, u64)> =
            p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|(ph, k)| (j.name.clone(), ph, k))).collect();
        for (name, phase, k) in &granted {
            // An earlier finish in this round may have preempted it.
            if p.job(name).and_then(|j| j.granted()) != Some((*phase, *k)) {
                continue;
            }
            *t += step_s;
            apply(p, records, finish(*t, name, *phase, *k));
        }
        !granted.is_empty()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random submissions (tenant, priority, gap) interleaved with phases finishing: no
        /// job is preempted inside its minimum run, bob never borrows past his limit, every
        /// job completes in the end, and replay rebuilds the same plane.
        #[test]
        fn minimum_run_borrow_limit_no_starvation_and_replay(
            jobs in proptest::collection::vec((0..2usize, 0..3usize, 0..400u64, 0..3u64), 1..10)
        ) {
            let mut p = plane3();
            let mut records = Vec::new();
            let mut t = 0;
            let mut admitted: BTreeMap<String, u64> = BTreeMap::new();
            for (n, &(tenant, prio, gap_s, rounds)) in jobs.iter().enumerate() {
                t += gap_s;
                let priority = ["low", "normal", "high"][prio];
                apply(&mut p, &mut records, submit(t, ["alice", "bob"][tenant], &format!("j{n}"), priority));
                for _ in 0..rounds {
                    finish_granted(&mut p, &mut records, &mut t, 70);
                }
                let usage = p.jobs().filter(|j| j.tenant == "bob" && j.state == JobState::Running).count();
                prop_assert!(usage <= 2, "bob holds {usage} nodes: past nominal 1 + limit 1");
            }
            let mut bound = 10_000;
            while (finish_granted(&mut p, &mut records, &mut t, 70) || !p.queue().is_empty()) && bound > 0 {
                bound -= 1;
                if p.jobs().all(|j| j.gate.grants().is_empty()) {
                    break;
                }
            }
            prop_assert!(p.queue().is_empty(), "starved: {:?}", queue(&p));
            for n in 0..jobs.len() {
                prop_assert_eq!(state(&p, &format!("j{n}")), JobState::Completed);
            }
            for e in p.events() {
                match e.kind.as_str() {
                    "admitted" => { admitted.insert(e.job.clone(), e.time_us); }
                    "preempted" => {
                        let ran = e.time_us - admitted[&e.job];
                        prop_assert!(ran >= 300 * S, "{} preempted after {} s", e.job, ran / S);
                    }
                    _ => {}
                }
            }
            let mut q = plane3();
            for r in &records {
                q.apply(r).unwrap();
            }
            prop_assert_eq!(p.events(), q.events());
        }
    }
}

/// EASY backfill: behind a job that cannot start, a later one starts only if it ends (at its
/// SLO, on its estimate) before the first could; without backfill the first holds up the rest.
#[test]
fn backfill_lets_short_jobs_past_a_blocked_head_never_long_ones() {
    let make = |mode: ShareMode| {
        let cluster = ClusterConfig::default();
        let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
        cfg.capacity = Some((2, 2));
        // Quota beyond the pools: only free nodes hold jobs back.
        let quota = TenantQuota {
            name: "alice".into(),
            rollout_nodes: 4.0,
            training_nodes: 4.0,
            borrow_limit: None,
            env_cores: None,
        };
        Plane::new(cluster, cfg).with_share(SharePolicy {
            mode,
            tenants: vec![quota],
            min_run: Micros::from_secs(1_000_000),
            checkpoint_every: 1,
            half_life: None,
            preempts_own: weave_core::Priority::High,
            grace: weave_core::Micros::ZERO,
        })
    };
    let job = |time_s: u64, id: &str, nodes: u32, iterations: u64| {
        let job: SubmitSpec = serde_json::from_value(serde_json::json!({
            "id": id, "type": "3B_4k", "iterations": iterations, "slo": 1.0, "rollout_s": 50.0, "train_s": 60.0,
            "rollout_nodes": nodes, "train_nodes": nodes,
        }))
        .unwrap();
        Record::Submit { time_us: time_s * S, tenant: "alice".into(), job }
    };
    for (mode, short_starts) in [(ShareMode::Backfill, true), (ShareMode::Preemption, false)] {
        let mut p = make(mode);
        // `long` holds one node of each pool for 20 iterations; `wide` needs both.
        p.apply(&job(0, "long", 1, 20)).unwrap();
        p.apply(&job(1, "wide", 2, 2)).unwrap();
        assert_eq!(queue(&p), ["wide"]);
        // Longer than `long` has left: it would delay `wide`, so it waits either way.
        p.apply(&job(2, "too-long", 1, 40)).unwrap();
        assert_eq!(state(&p, "too-long"), JobState::Queued);
        // Two iterations end well before `long`: backfilled, or held up without backfill.
        p.apply(&job(3, "short", 1, 2)).unwrap();
        let expected = if short_starts { JobState::Running } else { JobState::Queued };
        assert_eq!(state(&p, "short"), expected, "{mode:?}");
        let (pos, start) = p.queue_outlook(3 * S)[0];
        assert_eq!(pos, 0, "wide stays first");
        assert!(start.is_some(), "wide has a projected start");
    }
}
