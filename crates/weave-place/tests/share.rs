//! The share core's projections over a real placer.

mod common;
use common::{config, fixed_placer, job, one_tenant_policy, quota, running};
use weave_core::{JobId, Micros};
use weave_place::share::{backfill_keeps_reserved, free_nodes, projected_starts, Nodes};
use weave_place::{PlacePolicy, Placer};

#[test]
fn projected_starts_follow_releases_in_queue_order() {
    let mut placer = fixed_placer(2, 2);
    // SLO 1.0: the two jobs cannot share, each holds one node of each pool.
    for id in 0..2 {
        placer.admit(job(id, 100, 100, 1.0)).unwrap();
    }
    assert_eq!(free_nodes(&placer), [0.0, 0.0]);
    let h = Micros::from_secs(3600);
    // Job 0 ends in 1 h, job 1 never (it runs until cancelled).
    let end = |j: JobId| (j == JobId(0)).then_some(h);
    let one = [1.0, 1.0];
    let starts = projected_starts(&placer, Micros::ZERO, end, &[(one, Some(h)), (one, None), (one, Some(h))]);
    // The first takes job 0's nodes at 1 h and holds them 1 h; the second takes them at 2 h
    // for good; the third has no start in view.
    assert_eq!(starts, [Some(h), Some(Micros(2 * h.0)), None]);
    // Wider than anything ever freed; and a job behind one with no start has none either.
    assert_eq!(projected_starts(&placer, Micros::ZERO, end, &[([2.0, 2.0], Some(h)), (one, Some(h))]), [None, None]);
    // Nothing waits on a free pool.
    let mut cfg = config(PlacePolicy::Weave);
    cfg.capacity = Some((2, 2));
    let empty = Placer::new(cfg);
    assert_eq!(projected_starts(&empty, h, end, &[(one, Some(h)), (one, Some(h))]), [Some(h), Some(h)]);
}

#[test]
fn backfill_may_take_what_ends_in_time_or_what_the_reserved_jobs_leave() {
    let mut placer = fixed_placer(5, 5);
    for id in 0..3 {
        placer.admit(job(id, 100, 100, 1.0)).unwrap();
    }
    assert_eq!(free_nodes(&placer), [2.0, 2.0]);
    let h = Micros::from_secs(3600);
    // Jobs 0 and 1 end in 1 h, job 2 never: a head needing 3 + 3 starts at 1 h, when 4 + 4
    // are free, so one node of each pool is left over then.
    let end = |j: JobId| (j != JobId(2)).then_some(h);
    let head = [([3.0, 3.0], None)];
    let shadow = projected_starts(&placer, Micros::ZERO, end, &head);
    assert_eq!(shadow, [Some(h)]);
    let half = Some(Micros(h.0 / 2));
    let keeps = |end: &dyn Fn(JobId) -> Option<Micros>, job: (Nodes, Option<Micros>), reserved, starts| {
        backfill_keeps_reserved(&placer, Micros::ZERO, end, job, reserved, starts)
    };
    // On the left-over node, for good.
    assert!(keeps(&end, ([1.0, 1.0], None), &head, &shadow));
    // Two nodes for good take one the head needs.
    assert!(!keeps(&end, ([2.0, 2.0], None), &head, &shadow));
    assert!(!keeps(&end, ([2.0, 2.0], Some(Micros(2 * h.0))), &head, &shadow));
    // ... unless they are back before the head starts.
    assert!(keeps(&end, ([2.0, 2.0], half), &head, &shadow));
    // A second reservation behind the head, holding its node for good from 1 h: the left-over
    // node is its now, so the job that fitted beside the head alone may not take it.
    let two = [([3.0, 3.0], Some(h)), ([1.0, 1.0], None)];
    let starts = projected_starts(&placer, Micros::ZERO, end, &two);
    assert_eq!(starts, [Some(h), Some(h)]);
    assert!(!keeps(&end, ([1.0, 1.0], None), &two, &starts));
    assert!(keeps(&end, ([1.0, 1.0], half), &two, &starts));
    // A head with no start in view lets only jobs that end through.
    let never = |_: JobId| None;
    let none = [None];
    assert!(!keeps(&never, ([1.0, 1.0], None), &head, &none));
    assert!(keeps(&never, ([1.0, 1.0], half), &head, &none));
}

#[test]
fn behind_a_blocked_head_a_preemption_counts_only_what_its_victims_free() {
    use weave_core::Priority;
    use weave_place::share::{Claim, ShareMode, Waiting};
    let mut placer = fixed_placer(3, 3);
    for id in 0..2 {
        placer.admit(job(id, 100, 100, 1.0)).unwrap();
    }
    assert_eq!(free_nodes(&placer), [1.0, 1.0]);
    let policy = one_tenant_policy(ShareMode::Preemption, 3.0);
    let running = [running(0, Priority::Low, 0, 2.0), running(1, Priority::Normal, 0, 2.0)];
    let usage = policy.usage(&placer, |_| 0);
    let high =
        Waiting { tenant: 0, priority: Priority::High, arrival: 9, demand: [2.0, 2.0], env_cores: 0.0, resumes: false };
    // As the head: the low job's node and the free one make two.
    assert_eq!(policy.preemption(&placer, high, &running, &usage, Claim::Head), Some(vec![JobId(0)]));
    // Behind a head, the free node is the head's: it takes both victims' nodes or nothing.
    assert_eq!(policy.preemption(&placer, high, &running, &usage, Claim::BehindHead), Some(vec![JobId(0), JobId(1)]));
    let normal = Waiting { priority: Priority::Normal, ..high };
    assert_eq!(policy.preemption(&placer, normal, &running, &usage, Claim::BehindHead), None);
}

#[test]
fn a_preemption_lets_off_a_victim_the_others_do_without() {
    use weave_core::Priority;
    use weave_place::share::{Claim, ShareMode, Waiting};
    let mut placer = fixed_placer(3, 3);
    // Job 0 holds one node of each pool, job 1 two: the pools are full.
    placer.admit(job(0, 100, 100, 1.0)).unwrap();
    let mut wide = job(1, 100, 100, 1.0);
    (wide.rollout_width, wide.train_width) = (2, 2);
    placer.admit(wide).unwrap();
    assert_eq!(free_nodes(&placer), [0.0, 0.0]);
    let policy = one_tenant_policy(ShareMode::Preemption, 3.0);
    let running = [running(0, Priority::Low, 0, 2.0), running(1, Priority::Low, 4, 4.0)];
    let usage = policy.usage(&placer, |_| 0);
    let high =
        Waiting { tenant: 0, priority: Priority::High, arrival: 9, demand: [2.0, 2.0], env_cores: 0.0, resumes: false };
    // Job 0 loses nothing and comes first, but freeing it is not enough and job 1 alone is:
    // preempting both would throw job 0's nodes in for nothing.
    assert_eq!(policy.preemption(&placer, high, &running, &usage, Claim::Head), Some(vec![JobId(1)]));
    // One node each: job 0 alone does.
    let small = Waiting { demand: [1.0, 1.0], ..high };
    assert_eq!(policy.preemption(&placer, small, &running, &usage, Claim::Head), Some(vec![JobId(0)]));
}

#[test]
fn partners_sharing_a_group_are_reclaimed_together() {
    use weave_core::Priority;
    use weave_place::share::{freed_nodes, Claim, ShareMode, SharePolicy, Waiting};
    let mut placer = fixed_placer(2, 1);
    // Two jobs whose phases interleave share one group: its one training node is freed only
    // when both leave.
    placer.admit(job(0, 100, 100, 2.0)).unwrap();
    placer.admit(job(1, 100, 100, 2.0)).unwrap();
    assert_eq!(placer.group_of(JobId(0)), placer.group_of(JobId(1)), "the test needs the two in one group");
    assert_eq!(free_nodes(&placer)[1], 0.0);
    assert_eq!(freed_nodes(&placer, &[JobId(0)])[1], 0.0);
    assert_eq!(freed_nodes(&placer, &[JobId(0), JobId(1)])[1], 1.0);
    // Tenant a borrows everything; b is entitled to one node of each pool and wants it back.
    let mut policy: SharePolicy = one_tenant_policy(ShareMode::Preemption, 0.0);
    policy.tenants = vec![quota("a", 0.0), quota("b", 1.0)];
    let running = [running(0, Priority::Normal, 0, 1.0), running(1, Priority::Normal, 0, 1.0)];
    let usage = policy.usage(&placer, |_| 0);
    let want = Waiting {
        tenant: 1,
        priority: Priority::Normal,
        arrival: 9,
        demand: [1.0, 1.0],
        env_cores: 0.0,
        resumes: false,
    };
    assert_eq!(policy.preemption(&placer, want, &running, &usage, Claim::Head), Some(vec![JobId(0), JobId(1)]));
    // Only one of them may be preempted (the other is inside its minimum run): nothing frees
    // the node, so nobody is preempted.
    policy.min_run = Micros::from_secs(120);
    let mut running = running;
    running[1].ran = Micros::from_secs(600);
    assert_eq!(policy.preemption(&placer, want, &running, &usage, Claim::Head), None);
}
