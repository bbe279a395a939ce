//! The sharing core's unit tests (beside `share.rs`, which they would push past a reader's hold).
use super::*;

fn policy(mode: ShareMode) -> SharePolicy {
    let t = |name: &str, n: f64, borrow: Option<f64>| TenantQuota {
        name: name.into(),
        rollout_nodes: n,
        training_nodes: n,
        borrow_limit: borrow,
        env_cores: None,
    };
    SharePolicy {
        mode,
        tenants: vec![t("a", 4.0, None), t("b", 4.0, Some(1.0))],
        min_run: Micros::from_secs(600),
        checkpoint_every: 10,
        half_life: None,
        preempts_own: Priority::High,
        grace: Micros::ZERO,
    }
}

/// A job of normal priority that needs one node of each pool and no sandboxes.
fn normal_one_node_each(tenant: usize, arrival: u64) -> Waiting {
    Waiting { tenant, priority: Priority::Normal, arrival, demand: [1.0, 1.0], env_cores: 0.0, resumes: false }
}

#[test]
fn decayed_shares_remember_recent_use_and_forget_old_use() {
    let p = policy(ShareMode::Quotas);
    let h = Micros::from_secs(3600);
    let mut u = UsageHistory::default();
    // a uses its whole quota (4) for ten half-lives: its decayed share approaches 1.
    u.set_usage(&Usage::unshared(vec![[4.0, 4.0], [0.0, 0.0]]));
    u.advance_to(Micros::from_secs(36_000), h);
    let s = u.shares(&p, h);
    assert!((s[0] - 1.0).abs() < 1e-3 && s[1] == 0.0, "{s:?}");
    // Then nothing for one half-life: half of it is left; b's two hours at quota count more.
    u.set_usage(&Usage::unshared(vec![[0.0, 0.0], [4.0, 4.0]]));
    u.advance_to(Micros::from_secs(36_000 + 3600), h);
    let s = u.shares(&p, h);
    assert!((s[0] - 0.5).abs() < 1e-3 && (s[1] - 0.5).abs() < 1e-9, "{s:?}");
    // Both idle now and both entitled: right now they tie and arrival decides (a first);
    // by recent use, the less served one goes first (b).
    let w = normal_one_node_each;
    let (waiting, idle) = ([w(0, 0), w(1, 1)], vec![[0.0, 0.0], [0.0, 0.0]]);
    assert_eq!(p.order(&waiting, &Usage::unshared(idle.clone())), [0, 1]);
    assert_eq!(p.order_by(&waiting, &idle, &[0.9, 0.1]), [1, 0]);
}

/// A cap on environment cores is a cap: what the tenant's agentic jobs hold plus the
/// newcomer's sandboxes, never beyond it, whatever its node quota allows; a tenant without
/// one is limited by the pool only.
#[test]
fn the_environment_cap_holds_what_the_node_quota_would_allow() {
    let mut p = policy(ShareMode::Quotas);
    p.tenants[0].env_cores = Some(64.0);
    let mut usage = Usage::unshared(vec![[1.0, 1.0], [0.0, 0.0]]);
    usage.env = vec![48.0, 500.0];
    let w = |tenant, env_cores| Waiting {
        tenant,
        priority: Priority::Normal,
        arrival: 0,
        demand: [1.0, 1.0],
        env_cores,
        resumes: false,
    };
    assert!(p.may_start_waiting(&w(0, 16.0), &usage), "48 + 16 is the cap exactly");
    assert!(!p.may_start_waiting(&w(0, 17.0), &usage), "one core over");
    assert!(p.may_start_waiting(&w(1, 1000.0), &usage), "no cap for b");
    assert!(p.may_start_waiting(&w(0, 0.0), &usage), "a job without sandboxes");
}

/// Environment cores count in the dominant share where a tenant has a cap: with equal pool
/// use, the tenant whose sandboxes hold more of its cap waits behind the other; without caps
/// the order is the pools' alone.
#[test]
fn the_least_served_tenant_counts_its_environment_cores_against_its_cap() {
    let mut p = policy(ShareMode::Quotas);
    let mut usage = Usage::unshared(vec![[1.0, 1.0], [1.0, 1.0]]);
    usage.env = vec![60.0, 8.0];
    let w = normal_one_node_each;
    let waiting = [w(0, 0), w(1, 1)];
    assert_eq!(p.order(&waiting, &usage), [0, 1], "no caps: pools tie, arrival decides");
    p.tenants[0].env_cores = Some(64.0);
    p.tenants[1].env_cores = Some(64.0);
    assert_eq!(p.dominant_share_with_env(0, &usage), 60.0 / 64.0);
    assert_eq!(p.dominant_share_with_env(1, &usage), 0.25, "its pools' share is the larger");
    assert_eq!(p.order(&waiting, &usage), [1, 0]);
}

/// The decayed share remembers environment cores against a cap as it does nodes: equal node
/// use, but a's sandboxes held 48 of its 64 cores for ten half-lives, so b is the less served.
#[test]
fn decayed_shares_count_environment_cores_against_the_cap() {
    let mut p = policy(ShareMode::Quotas);
    p.tenants[0].env_cores = Some(64.0);
    p.tenants[1].env_cores = Some(64.0);
    let h = Micros::from_secs(3600);
    let mut u = UsageHistory::default();
    let mut usage = Usage::unshared(vec![[1.0, 1.0], [1.0, 1.0]]);
    usage.env = vec![48.0, 0.0];
    u.set_usage(&usage);
    u.advance_to(Micros::from_secs(36_000), h);
    let s = u.shares(&p, h);
    assert!((s[0] - 0.75).abs() < 1e-3 && (s[1] - 0.25).abs() < 1e-3, "{s:?}");
    let waiting = [normal_one_node_each(0, 0), normal_one_node_each(1, 1)];
    assert_eq!(p.order_by(&waiting, &usage.held, &s), [1, 0]);
}

#[test]
fn within_nominal_always_beyond_only_what_others_leave_and_the_limit() {
    let p = policy(ShareMode::Quotas);
    let usage = Usage::unshared(vec![[3.0, 3.0], [0.0, 0.0]]);
    assert!(p.may_start(0, [1.0, 1.0], &usage));
    // b leaves 4 unused: a may borrow them (no limit), not 5.
    assert!(p.may_start(0, [5.0, 5.0], &usage));
    assert!(!p.may_start(0, [6.0, 6.0], &usage));
    // b may borrow only one node beyond its 4.
    let usage = Usage::unshared(vec![[0.0, 0.0], [4.0, 4.0]]);
    assert!(p.may_start(1, [1.0, 1.0], &usage));
    assert!(!p.may_start(1, [2.0, 2.0], &usage));
    // FIFO ignores quotas.
    assert!(policy(ShareMode::Fifo).may_start(1, [9.0, 9.0], &usage));
    // b's jobs share nodes: charged 3.5 now, 4.5 if their partners left. One more node
    // fits its nominal quota now but would take it past its limit (5.5 > 4 + 1) once the
    // partners leave, so it may not start; a's jobs have no limit.
    let shared = Usage { held: vec![[0.0, 0.0], [3.5, 3.5]], alone: vec![[0.0, 0.0], [4.5, 4.5]], env: Vec::new() };
    assert!(!p.may_start(1, [1.0, 1.0], &shared));
    assert!(p.may_start(1, [0.5, 0.5], &shared));
}

#[test]
fn the_queue_goes_entitled_first_then_resuming_then_least_served_tenant_then_priority_then_arrival() {
    let p = policy(ShareMode::Quotas);
    let usage = vec![[4.0, 4.0], [1.0, 1.0]];
    let w = |tenant, priority, arrival| Waiting {
        tenant,
        priority,
        arrival,
        demand: [1.0, 1.0],
        env_cores: 0.0,
        resumes: false,
    };
    // a (tenant 0) is at its quota: its jobs would borrow; b's are entitled and go first,
    // then a's, its high one before its normal one.
    let waiting =
        [w(0, Priority::Normal, 0), w(1, Priority::Normal, 1), w(0, Priority::High, 2), w(1, Priority::Normal, 3)];
    assert_eq!(p.order(&waiting, &Usage::unshared(usage.clone())), [1, 3, 2, 0]);
    assert_eq!(policy(ShareMode::Fifo).order(&waiting, &Usage::unshared(usage)), [0, 1, 2, 3]);
    // Both entitled: the least-served tenant first, priority within a tenant.
    let usage = vec![[1.0, 1.0], [2.0, 2.0]];
    assert_eq!(p.order(&waiting, &Usage::unshared(usage.clone())), [2, 0, 1, 3]);
    // A preempted job resuming goes before the entitled jobs of every tenant, not before
    // those within quota when it would borrow.
    let mut resuming = waiting;
    resuming[3].resumes = true;
    assert_eq!(p.order(&resuming, &Usage::unshared(usage)), [3, 2, 0, 1]);
    let usage = vec![[4.0, 4.0], [4.0, 4.0]];
    resuming[2] = w(0, Priority::High, 2);
    resuming[0].demand = [0.0, 0.0];
    assert_eq!(p.order(&resuming, &Usage::unshared(usage)), [0, 3, 2, 1]);
}

#[test]
fn victims_are_borrowers_or_outranked_and_past_their_minimum_run() {
    let p = policy(ShareMode::Preemption);
    // a borrows 2 of b's nodes; b wants 2 back.
    let usage = vec![[6.0, 6.0], [2.0, 2.0]];
    let r = |job, tenant, priority, ran_s, unsaved| Running {
        job: JobId(job),
        tenant,
        priority,
        ran: Micros::from_secs(ran_s),
        unsaved,
        held: 1.0,
    };
    let running = [
        r(1, 0, Priority::Normal, 3600, 5),
        r(2, 0, Priority::Normal, 60, 0), // inside its minimum run
        r(3, 0, Priority::High, 3600, 1),
        r(4, 1, Priority::Low, 3600, 9),
    ];
    let want = Waiting {
        tenant: 1,
        priority: Priority::Normal,
        arrival: 9,
        demand: [2.0, 2.0],
        env_cores: 0.0,
        resumes: false,
    };
    // Only urgent work takes the place of its own tenant's jobs: a normal job reclaims
    // a's borrowed nodes, and leaves b's low job alone.
    assert_eq!(p.victims(want, [2.0, 2.0], &running, &usage), [JobId(3), JobId(1)]);
    let high = Waiting { priority: Priority::High, ..want };
    assert_eq!(p.victims(high, [2.0, 2.0], &running, &usage), [JobId(3), JobId(1), JobId(4)]);
    // Past its entitlement, b reclaims nothing from a; only its own low job is outranked.
    assert!(p.victims(want, [3.0, 3.0], &running, &usage).is_empty());
    assert_eq!(p.victims(high, [3.0, 3.0], &running, &usage), [JobId(4)]);
    // Any higher priority may, when the policy says so.
    let lower = SharePolicy { preempts_own: Priority::Normal, ..p.clone() };
    assert_eq!(lower.victims(want, [2.0, 2.0], &running, &usage), [JobId(3), JobId(1), JobId(4)]);
    assert_eq!(lower.victims(want, [3.0, 3.0], &running, &usage), [JobId(4)]);
    assert!(policy(ShareMode::Quotas).victims(high, [2.0, 2.0], &running, &usage).is_empty());
    // Borrowed capacity comes before the tenant's own jobs even when they would lose
    // less: reclaiming brings b towards its entitlement, displacing its own job does not.
    let mut fresh = running;
    fresh[3].unsaved = 0;
    assert_eq!(p.victims(high, [2.0, 2.0], &fresh, &usage), [JobId(3), JobId(1), JobId(4)]);
}
