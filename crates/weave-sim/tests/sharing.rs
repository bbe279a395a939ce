//! Tenants sharing fixed pools in the replay: a high-priority job takes a low one's place, a
//! tenant reclaims what another borrowed, and on random small traces every job runs, nobody is
//! preempted inside its minimum run, nobody holds more than its borrowing limit allows (beyond
//! the shares partners leave behind), and the same seed gives the same bytes.

use proptest::prelude::*;
use weave_core::{ClusterConfig, Micros, Priority};
use weave_model::ProfileModel;
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_sim::{prepare, replay, CapacityMode, Policy, PolicyReport, SimConfig};
use weave_trace::{parse, Format, ReadOptions};

fn tenant(name: &str, nodes: f64, borrow: Option<f64>) -> TenantQuota {
    TenantQuota {
        name: name.into(),
        rollout_nodes: nodes,
        training_nodes: nodes,
        borrow_limit: borrow,
        env_cores: None,
    }
}

fn run(jsonl: &str, nodes: u32, mode: ShareMode, tenants: Vec<TenantQuota>, min_run_s: u64) -> PolicyReport {
    run_with(jsonl, nodes, mode, tenants, min_run_s, None, Policy::WeaveDisaggOnly, Micros::ZERO)
}

#[allow(clippy::too_many_arguments)]
fn run_with(
    jsonl: &str,
    nodes: u32,
    mode: ShareMode,
    tenants: Vec<TenantQuota>,
    min_run_s: u64,
    half_life: Option<Micros>,
    policy: Policy,
    grace: Micros,
) -> PolicyReport {
    let share = SharePolicy { half_life, ..share_policy(mode, tenants, min_run_s, 2, grace) };
    replay_shared(jsonl, nodes, share, policy)
}

/// Only `high` displaces its own tenant's jobs; no decay.
fn share_policy(
    mode: ShareMode,
    tenants: Vec<TenantQuota>,
    min_run_s: u64,
    checkpoint_every: u64,
    grace: Micros,
) -> SharePolicy {
    SharePolicy {
        mode,
        tenants,
        min_run: Micros::from_secs(min_run_s),
        checkpoint_every,
        half_life: None,
        preempts_own: Priority::High,
        grace,
    }
}

fn replay_shared(jsonl: &str, nodes: u32, share: SharePolicy, policy: Policy) -> PolicyReport {
    let trace = parse(jsonl, Format::Jsonl, "sharing", &ReadOptions::default()).unwrap();
    let profile = ProfileModel::builtin();
    let mut cluster = ClusterConfig::default();
    cluster.rollout.nodes = nodes;
    cluster.training.nodes = nodes;
    let jobs = prepare(&trace, &cluster, &profile, Default::default(), 1);
    let cfg = SimConfig { capacity: CapacityMode::Fixed, share: Some(share), ..SimConfig::default() };
    replay(&jobs, &cluster, policy, &cfg, &mut |_, _| {}).report
}

/// One node per pool, checkpoints every `checkpoint_every` iterations.
fn run_checkpointed(
    jsonl: &str,
    mode: ShareMode,
    tenants: Vec<TenantQuota>,
    checkpoint_every: u64,
    min_run_s: u64,
) -> PolicyReport {
    run_graceful(jsonl, mode, tenants, checkpoint_every, min_run_s, Micros::ZERO)
}

/// [`run_checkpointed`] with a grace period for victims.
fn run_graceful(
    jsonl: &str,
    mode: ShareMode,
    tenants: Vec<TenantQuota>,
    checkpoint_every: u64,
    min_run_s: u64,
    grace: Micros,
) -> PolicyReport {
    let share = share_policy(mode, tenants, min_run_s, checkpoint_every, grace);
    replay_shared(jsonl, 1, share, Policy::WeaveDisaggOnly)
}

fn delay_h(r: &PolicyReport, name: &str) -> f64 {
    r.per_job.iter().find(|j| j.name == name).unwrap().queued.as_secs_f64() / 3600.0
}

/// One node per pool: `low` holds it when `high` of the same tenant arrives.
const OUTRANKED: &str = r#"{"id":"low","arrival_s":0,"type":"7B_8k","iterations":40,"tenant":"a","priority":"low","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"high","arrival_s":3600,"type":"7B_8k","iterations":4,"tenant":"a","priority":"high","rollout_nodes":1,"train_nodes":1,"slo":1.0}"#;

#[test]
fn a_high_priority_job_preempts_a_low_one_of_its_tenant_after_its_minimum_run() {
    let quotas = || vec![tenant("a", 1.0, None)];
    let fifo = run(OUTRANKED, 1, ShareMode::Quotas, quotas(), 1800);
    assert!(delay_h(&fifo, "high") > 1.0, "without preemption high waits for low");
    let pre = run(OUTRANKED, 1, ShareMode::Preemption, quotas(), 1800);
    assert_eq!(pre.events.preemptions, 1);
    assert!(delay_h(&pre, "high") < 0.01, "high starts at once: {}", delay_h(&pre, "high"));
    let t = &pre.tenants[0];
    assert!(t.shortest_preempted_run_h.unwrap() >= 0.5);
    // low resumes from its last checkpoint (every 2 iterations) and still finishes all 40.
    let low = pre.per_job.iter().find(|j| j.name == "low").unwrap();
    assert_eq!(low.iterations, 40);
    assert!(t.lost_iterations <= 1, "at most the iteration since the checkpoint: {}", t.lost_iterations);
    // A minimum run of 2 h protects low until then: high waits about an hour (the queue is
    // looked at every 5 minutes), then takes its place.
    let protected = run(OUTRANKED, 1, ShareMode::Preemption, quotas(), 7200);
    assert_eq!(protected.events.preemptions, 1);
    assert!(protected.tenants[0].shortest_preempted_run_h.unwrap() >= 2.0);
    let waited = delay_h(&protected, "high");
    assert!((1.0..=1.1).contains(&waited), "high waited {waited} h");
}

#[test]
fn work_a_preemption_threw_away_counts_once_in_the_victims_slo() {
    let quotas = || vec![tenant("a", 1.0, None)];
    // Checkpoints every 5 iterations: low loses what it did since its last one.
    let text = OUTRANKED.replace(r#""slo":1.0"#, r#""slo":3.0"#);
    let pre = run_checkpointed(&text, ShareMode::Preemption, quotas(), 5, 1800);
    let lost = pre.tenants[0].lost_iterations;
    assert!(lost >= 1, "the test needs lost work: {lost}");
    let low = pre.per_job.iter().find(|j| j.name == "low").unwrap();
    assert_eq!(low.iterations, 40);
    // Every iteration ran alone on its node, within its SLO; the redone ones count once.
    assert_eq!(low.iterations_within_slo, 40);
    // Its slowdown is its life over 40 solo iterations, so the preemption shows in it.
    let alone = run_checkpointed(&text, ShareMode::Quotas, quotas(), 5, 1800);
    let low_alone = alone.per_job.iter().find(|j| j.name == "low").unwrap();
    assert!(low.slowdown > low_alone.slowdown, "{} vs {}", low.slowdown, low_alone.slowdown);
    // The thrown-away training time was charged busy; the report says how much.
    let wasted = pre.preempted_training_gpu_hours.unwrap();
    assert!(wasted > 0.0 && wasted < pre.training.busy_gpu_hours, "{wasted}");
    assert_eq!(alone.preempted_training_gpu_hours, Some(0.0));
}

#[test]
fn a_victim_given_a_grace_period_saves_at_its_iteration_end_and_loses_nothing() {
    let quotas = || vec![tenant("a", 1.0, None)];
    let text = OUTRANKED.replace(r#""slo":1.0"#, r#""slo":3.0"#);
    // Checkpoints every 5 iterations: stopped at once, low loses work (the test above).
    let at_once = run_checkpointed(&text, ShareMode::Preemption, quotas(), 5, 1800);
    assert!(at_once.tenants[0].lost_iterations >= 1);
    assert_eq!(at_once.events.preemptions_saved, 0);
    // Ten minutes is longer than one 7B_8k iteration: low finishes it, saves and yields.
    let grace = Micros::from_secs(600);
    let graceful = run_graceful(&text, ShareMode::Preemption, quotas(), 5, 1800, grace);
    assert_eq!(graceful.events.preemptions, 1);
    assert_eq!(graceful.events.preemptions_saved, 1);
    assert_eq!(graceful.tenants[0].lost_iterations, 0);
    assert_eq!(graceful.preempted_training_gpu_hours, Some(0.0));
    let low = graceful.per_job.iter().find(|j| j.name == "low").unwrap();
    assert_eq!(low.iterations, 40);
    // high waits for the rest of low's iteration and its checkpoint, within the grace period
    // and the save (under a minute for 7B), never longer.
    let waited = delay_h(&graceful, "high");
    assert!(waited > 0.0 && waited <= (600.0 + 60.0) / 3600.0, "high waited {waited} h");
    // One second is too short to finish an iteration: low stops at the deadline and loses
    // what it did since its checkpoint, as without a grace period.
    let short = run_graceful(&text, ShareMode::Preemption, quotas(), 5, 1800, Micros::from_secs(1));
    assert_eq!(short.events.preemptions, 1);
    assert_eq!(short.events.preemptions_saved, 0);
    assert_eq!(short.tenants[0].lost_iterations, at_once.tenants[0].lost_iterations);
    assert!(delay_h(&short, "high") <= 2.0 / 3600.0);
}

#[test]
fn a_victim_that_cannot_finish_its_iteration_in_the_grace_period_stops_at_once() {
    let quotas = || vec![tenant("a", 1.0, None)];
    let grace = Micros::from_secs(120);
    let (mut saved, mut stopped) = (0, 0);
    // high arrives at different points of low's iteration.
    for k in 0..24 {
        let arrival = 3600 + 41 * k;
        let text = OUTRANKED
            .replace(r#""slo":1.0"#, r#""slo":3.0"#)
            .replace(r#""arrival_s":3600"#, &format!(r#""arrival_s":{arrival}"#));
        let r = run_graceful(&text, ShareMode::Preemption, quotas(), 5, 1800, grace);
        assert_eq!(r.events.preemptions, 1, "arrival {arrival}");
        let waited_s = delay_h(&r, "high") * 3600.0;
        if r.events.preemptions_saved == 1 {
            // It finished its iteration within the grace period and saved (under a minute).
            saved += 1;
            assert!(waited_s <= 120.0 + 60.0, "arrival {arrival}: high waited {waited_s} s");
        } else {
            // Its iteration could not end in time: it stopped when told, not at the deadline.
            stopped += 1;
            assert!(waited_s <= 2.0, "arrival {arrival}: high waited {waited_s} s for a victim that could not save");
        }
    }
    assert!(saved > 0 && stopped > 0, "the test needs both cases: {saved} saved, {stopped} stopped");
}

/// Two nodes per pool: `long` holds one, `wide` needs both and waits for it, `short` fits
/// the free node and ends well before `long` does.
const SHADOW: &str = r#"{"id":"long","arrival_s":0,"type":"7B_8k","iterations":40,"tenant":"a","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"wide","arrival_s":60,"type":"7B_8k","iterations":4,"tenant":"a","rollout_nodes":2,"train_nodes":2,"slo":1.0}
{"id":"short","arrival_s":120,"type":"7B_8k","iterations":2,"tenant":"a","rollout_nodes":1,"train_nodes":1,"slo":1.0}"#;

#[test]
fn backfill_goes_past_a_blocked_job_and_the_run_checks_it_still_starts_as_projected() {
    // A quota beyond the pools: wide waits for room, not for quota.
    let quotas = || vec![tenant("a", 4.0, None)];
    let fill = run(SHADOW, 2, ShareMode::Backfill, quotas(), 600);
    assert!(delay_h(&fill, "short") < 0.01, "short runs in wide's shadow");
    let b = fill.backfill.expect("a backfilling policy reports its promise");
    assert_eq!((b.backfilled, b.jumped), (1, 1));
    assert_eq!(b.late, 0, "wide started by its projection: {b:?}");
    // Without backfill short waits behind wide, and there is nothing to report.
    let plain = run(SHADOW, 2, ShareMode::Preemption, quotas(), 600);
    assert!(delay_h(&plain, "short") > delay_h(&plain, "wide"));
    assert!(plain.backfill.is_none());
}

/// One node per pool: `low` runs; `high` of the same tenant arrives a minute later.
const PROTECTED: &str = r#"{"id":"low","arrival_s":0,"type":"7B_8k","iterations":200,"tenant":"a","priority":"low","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"high","arrival_s":60,"type":"7B_8k","iterations":2,"tenant":"a","priority":"high","rollout_nodes":1,"train_nodes":1,"slo":1.0}"#;

#[test]
fn a_high_job_waiting_for_victims_inside_their_minimum_run_is_late_but_not_passed_over() {
    let quotas = || vec![tenant("a", 1.0, None)];
    // A 3-hour minimum run holds high back far past one checkpoint interval (2 iterations).
    let r = run_checkpointed(PROTECTED, ShareMode::Preemption, quotas(), 2, 3 * 3600);
    let high = r.per_job.iter().find(|j| j.name == "high").unwrap();
    assert!(high.queued > Micros::from_secs(2 * 3600), "{:?}", high.queued);
    assert!(!high.passed_over, "no capacity it may take existed before it started");
    // Two nodes per pool, tenants entitled to one each: a's low job and b's normal job fill
    // them. c's high job is entitled and waits for room, with nothing it may take; a's high
    // job behind it could take a's low job's node once its minimum run is over, but does not
    // overtake an equal priority: it waits, and the run says capacity existed.
    let equals = r#"{"id":"low","arrival_s":0,"type":"7B_8k","iterations":200,"tenant":"a","priority":"low","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"busy","arrival_s":0,"type":"7B_8k","iterations":200,"tenant":"b","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"first","arrival_s":30,"type":"7B_8k","iterations":2,"tenant":"c","priority":"high","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"second","arrival_s":60,"type":"7B_8k","iterations":2,"tenant":"a","priority":"high","rollout_nodes":1,"train_nodes":1,"slo":1.0}"#;
    let three = vec![tenant("a", 1.0, None), tenant("b", 1.0, None), tenant("c", 1.0, None)];
    let r = run(equals, 2, ShareMode::Preemption, three, 600);
    let job = |name: &str| r.per_job.iter().find(|j| j.name == name).unwrap();
    assert!(job("second").passed_over, "{:?}", job("second"));
    assert!(!job("first").passed_over, "{:?}", job("first"));
    // It takes the low job's node only once the job ahead has started.
    let start = |name: &str| job(name).queued + Micros::from_secs(if name == "first" { 30 } else { 60 });
    assert!(start("second") >= start("first"));
    assert_eq!(job("low").outranked, 1);
}

#[test]
fn a_job_larger_than_the_pools_is_refused_and_holds_up_nobody() {
    // It used to wait at the head of the queue for good, and the replay ticked forever.
    let huge = r#"{"id":"huge","arrival_s":30,"type":"7B_8k","iterations":2,"tenant":"a","priority":"high","rollout_nodes":2,"train_nodes":2,"slo":1.0}"#;
    for mode in ShareMode::ALL {
        let r = run(&format!("{huge}\n{PROTECTED}"), 1, mode, vec![tenant("a", 4.0, None)], 600);
        assert_eq!(r.rejected, 1, "{mode:?}");
        assert_eq!(r.per_job.len(), 2, "{mode:?}: low and high both ran");
    }
}

/// Two tenants, one node each; `b` borrows `a`'s idle node, then `a` wants it back.
const BORROWED: &str = r#"{"id":"b1","arrival_s":0,"type":"7B_8k","iterations":40,"tenant":"b","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"b2","arrival_s":0,"type":"7B_8k","iterations":40,"tenant":"b","rollout_nodes":1,"train_nodes":1,"slo":1.0}
{"id":"a1","arrival_s":3600,"type":"7B_8k","iterations":4,"tenant":"a","rollout_nodes":1,"train_nodes":1,"slo":1.0}"#;

#[test]
fn a_tenant_reclaims_what_another_borrowed() {
    let quotas = || vec![tenant("a", 1.0, None), tenant("b", 1.0, None)];
    let q = run(BORROWED, 2, ShareMode::Quotas, quotas(), 600);
    assert!(delay_h(&q, "b2") < 0.01, "b borrows a's idle node");
    assert!(delay_h(&q, "a1") > 1.0, "without preemption a waits for b's borrowed node");
    let p = run(BORROWED, 2, ShareMode::Preemption, quotas(), 600);
    assert!(delay_h(&p, "a1") < 0.01, "a reclaims its node at once: {}", delay_h(&p, "a1"));
    assert_eq!(p.tenants[1].preemptions, 1);
    assert_eq!(p.tenants[0].preemptions, 0);
    // With no borrowing allowed, b2 waits instead.
    let strict = run(BORROWED, 2, ShareMode::Quotas, vec![tenant("a", 1.0, None), tenant("b", 1.0, Some(0.0))], 600);
    assert!(delay_h(&strict, "b2") > 1.0);
    assert_eq!(strict.tenants[1].max_over_borrow_limit, 0.0);
}

fn random_trace(jobs: &[(u32, u8, u8, u64)]) -> String {
    jobs.iter()
        .enumerate()
        .map(|(k, &(arrival_min, tenant, prio, iterations))| {
            let prio = ["low", "normal", "high"][prio as usize % 3];
            format!(
                r#"{{"id":"j{k}","arrival_s":{},"type":"7B_8k","iterations":{iterations},"tenant":"t{}","priority":"{prio}","rollout_nodes":1,"train_nodes":1}}"#,
                arrival_min * 60,
                tenant % 2
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_job_runs_nobody_is_preempted_early_and_borrowing_stays_within_limits(
        jobs in proptest::collection::vec((0u32..600, 0u8..2, 0u8..3, 2u64..30), 2..10),
        mode in 0usize..4,
        grace_s in prop_oneof![Just(0u64), 1u64..1200],
    ) {
        let mode = ShareMode::ALL[mode];
        let text = random_trace(&jobs);
        let quotas = vec![tenant("t0", 2.0, Some(1.0)), tenant("t1", 1.0, Some(1.0))];
        let grace = Micros::from_secs(grace_s);
        let run = |text: &str, quotas| run_with(text, 3, mode, quotas, 1200, None, Policy::WeaveDisaggOnly, grace);
        let r = run(&text, quotas.clone());
        prop_assert_eq!(r.rejected, 0);
        let total: u64 = jobs.iter().map(|j| j.3).sum();
        prop_assert_eq!(r.iterations, total, "every job finishes all its iterations");
        for t in &r.tenants {
            if let Some(run_h) = t.shortest_preempted_run_h {
                prop_assert!(run_h >= 1200.0 / 3600.0 - 1e-9, "{} preempted after {run_h} h", t.name);
            }
            if mode >= ShareMode::Quotas {
                // One-node jobs are never charged fractions beyond what was granted.
                prop_assert!(t.max_over_borrow_limit <= 1e-9, "{} over its limit by {}", t.name, t.max_over_borrow_limit);
            }
        }
        // The same inputs give the same bytes.
        let again = run(&text, quotas);
        prop_assert_eq!(serde_json::to_string(&r).unwrap(), serde_json::to_string(&again).unwrap());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// With co-located mode and consolidation, and with fair share decayed over a random
    /// half-life: every job still runs all its iterations (no preemption leaves a stale
    /// action behind), deterministically.
    #[test]
    fn full_weave_with_fair_share_decay_runs_every_job(
        jobs in proptest::collection::vec((0u32..600, 0u8..2, 0u8..3, 2u64..30), 2..10),
        mode in 1usize..4,
        half_life_s in proptest::option::of(600u64..36_000),
        grace_s in prop_oneof![Just(0u64), 1u64..1200],
    ) {
        let mode = ShareMode::ALL[mode];
        let text = random_trace(&jobs);
        let quotas = vec![tenant("t0", 2.0, Some(1.0)), tenant("t1", 1.0, Some(1.0))];
        let half_life = half_life_s.map(Micros::from_secs);
        let grace = Micros::from_secs(grace_s);
        let r = run_with(&text, 3, mode, quotas.clone(), 600, half_life, Policy::Weave, grace);
        prop_assert_eq!(r.rejected, 0);
        let total: u64 = jobs.iter().map(|j| j.3).sum();
        prop_assert_eq!(r.iterations, total);
        let again = run_with(&text, 3, mode, quotas, 600, half_life, Policy::Weave, grace);
        prop_assert_eq!(serde_json::to_string(&r).unwrap(), serde_json::to_string(&again).unwrap());
    }
}

#[test]
fn priority_field_parses_and_defaults_to_normal() {
    let t = parse(OUTRANKED, Format::Jsonl, "p", &ReadOptions::default()).unwrap();
    assert_eq!(t.jobs[0].priority, Priority::Low);
    let t =
        parse(r#"{"id":"x","arrival_s":0,"type":"7B_8k","iterations":1}"#, Format::Jsonl, "p", &ReadOptions::default())
            .unwrap();
    assert_eq!((t.jobs[0].priority, t.jobs[0].tenant.clone()), (Priority::Normal, None));
    let bad = parse(
        r#"{"id":"x","arrival_s":0,"type":"7B_8k","iterations":1,"priority":"urgent"}"#,
        Format::Jsonl,
        "p",
        &ReadOptions::default(),
    );
    assert!(bad.unwrap_err().to_string().contains("priority"));
}

/// Found by the proptest above (CI, random seed): t1 ended half a node over its borrowing
/// limit in quota mode. Kept as a fixed case so it can never come back unnoticed.
#[test]
fn borrowing_stays_within_limits_when_a_shared_nodes_partner_leaves() {
    let jobs = [(246, 1, 0, 24), (282, 0, 0, 10), (203, 0, 0, 28), (273, 1, 0, 12), (212, 1, 0, 26)];
    let quotas = vec![tenant("t0", 2.0, Some(1.0)), tenant("t1", 1.0, Some(1.0))];
    let r = run(&random_trace(&jobs), 3, ShareMode::Quotas, quotas, 1200);
    let total: u64 = jobs.iter().map(|j| j.3).sum();
    assert_eq!(r.iterations, total);
    for t in &r.tenants {
        assert!(t.max_over_borrow_limit <= 1e-9, "{} over its limit by {}", t.name, t.max_over_borrow_limit);
    }
}
