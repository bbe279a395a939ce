//! Snapshots: restoring a snapshot taken after any record and replaying the rest gives the same
//! plane, field for field, as replaying everything (compared by the snapshots' bytes), on
//! random histories with sharing, preemption, consolidation, node losses, cancellations and
//! loans of idle rollout blocks.

use proptest::prelude::*;
use weave_core::{ClusterConfig, Micros, NodeId};
use weave_dispatch::Phase;
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, Record, Retention, SubmitSpec};

const S: u64 = 1_000_000;

/// Three nodes of each pool, two tenants with quotas and preemption; consolidation and lending
/// optional (lending when the flag's second bit is set: `plane(2 | consolidate)`).
fn plane(flags: u8) -> Plane {
    let (consolidate, lending) = (flags & 1 == 1, flags & 2 == 2);
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((3, 3));
    let quota =
        |name: &str, n: f64| TenantQuota { name: name.into(), rollout_nodes: n, training_nodes: n, borrow_limit: None };
    // Little history held, so that letting go of it is part of every test.
    let mut p = Plane::new(cluster, cfg).with_retention(Retention { events: 40, jobs: 4, ..Retention::default() });
    if consolidate {
        p = p.with_consolidation(Default::default());
    }
    if lending {
        p = p.with_lending();
    }
    p.with_share(SharePolicy {
        mode: ShareMode::Preemption,
        tenants: vec![quota("alice", 2.0), quota("bob", 1.0)],
        min_run: Micros::from_secs(120),
        checkpoint_every: 1,
        // Fair share with decay: its history is state a snapshot must carry.
        half_life: Some(Micros::from_secs(600)),
        preempts_own: weave_core::Priority::High,
        grace: weave_core::Micros::ZERO,
    })
}

/// One step of a random history, made valid against the plane's current state.
fn step(p: &Plane, op: (u8, u8, u8), n: usize, t: u64) -> Option<Record> {
    let (kind, a, b) = op;
    let time_us = t * S;
    let running: Vec<_> = p.jobs().filter(|j| j.state == JobState::Running).map(|j| j.name.clone()).collect();
    let pick = |v: &[String]| (!v.is_empty()).then(|| v[a as usize % v.len()].clone());
    match kind % 8 {
        0..=2 => {
            let slo = [1.0, 1.5, 2.0][b as usize % 3];
            let job_type = ["3B_4k", "7B_8k"][a as usize % 2];
            let priority = ["low", "normal", "high"][a as usize % 3];
            let job: SubmitSpec = serde_json::from_value(serde_json::json!({
                "id": format!("j{n}"), "type": job_type, "iterations": 1 + b as u64 % 6,
                "slo": slo, "rollout_s": 40 + a as u64, "train_s": 30 + b as u64, "priority": priority,
                // Some one-step off-policy: a gate with two grants is state too.
                "staleness": (a / 3) % 2,
            }))
            .unwrap();
            Some(Record::Submit { time_us, tenant: ["alice", "bob"][b as usize % 2].into(), job })
        }
        3..=5 => {
            let granted: Vec<_> =
                p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|g| (j.name.clone(), g))).collect();
            let (job, (phase, iteration)) = granted.get(a as usize % granted.len().max(1))?.clone();
            let duration_us = (20 + b as u64) * S * if phase == Phase::Rollout { 2 } else { 1 };
            Some(Record::Finish { time_us, job, phase, iteration, duration_us, meta: None, admission: None })
        }
        6 if b % 3 == 2 => {
            let borrowing: Vec<_> = running.iter().filter(|j| p.loan_of(j).is_some()).cloned().collect();
            Some(Record::ReturnLoan { time_us, job: pick(&borrowing)?, admission: None })
        }
        6 if b % 2 == 0 => Some(Record::Cancel { time_us, job: pick(&running)? }),
        6 => Some(Record::Restart { time_us, job: pick(&running)?, reason: "test".into() }),
        _ => {
            let node: NodeId = format!("{}{}", ["r", "t"][a as usize % 2], b % 3).parse().unwrap();
            if a % 3 == 0 {
                Some(Record::NodeUp { time_us, node })
            } else {
                Some(Record::NodeDown { time_us, node, reason: "test".into() })
            }
        }
    }
}

/// A loan is held only by the running admission it was made to, for the rollout it runs now.
fn loans_held_rightly(p: &Plane) {
    for j in p.jobs() {
        if let Some(l) = p.loan_of(&j.name) {
            let rolling = j.gate.rollout.map(|g| g.iteration);
            assert!(
                j.state == JobState::Running && j.id.0 == l.admission && rolling == Some(l.iteration),
                "{} holds a loan of admission {} for rollout {} ({:?}, admission {}, rolling {rolling:?})",
                j.name,
                l.admission,
                l.iteration,
                j.state,
                j.id.0
            );
        }
    }
}

fn history(ops: &[(u8, u8, u8)], flags: u8) -> Vec<Record> {
    let mut p = plane(flags);
    let mut records = Vec::new();
    let mut t = 0;
    for (n, &op) in ops.iter().enumerate() {
        t += 7 + op.2 as u64;
        if let Some(r) = step(&p, op, n, t) {
            if p.check(&r).is_ok() {
                p.apply(&r).unwrap();
                loans_held_rightly(&p);
                records.push(r);
            }
        }
    }
    records
}

fn replay(mut p: Plane, records: &[Record]) -> Plane {
    for r in records {
        p.apply(r).unwrap();
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn a_snapshot_and_the_rest_of_the_log_equal_the_whole_log(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..120),
        cut in 0.0..1.0f64,
        flags in 0..4u8,
    ) {
        let records = history(&ops, flags);
        let whole = replay(plane(flags), &records);
        let k = (records.len() as f64 * cut) as usize;
        let head = replay(plane(flags), &records[..k]);
        let restored = plane(flags).restore(&head.snapshot()).unwrap();
        let resumed = replay(restored, &records[k..]);
        prop_assert!(whole.snapshot() == resumed.snapshot(), "differs after a cut at {k} of {}", records.len());
        prop_assert_eq!(whole.events(), resumed.events());
    }

    /// The server snapshots a frozen copy (`Plane::clone`, sharing job entries, dispatchers,
    /// groups and events) while the live plane goes on: nothing the live plane does after
    /// may show in the copy.
    #[test]
    fn a_frozen_copy_is_untouched_by_what_the_live_plane_does_after(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..120),
        cut in 0.0..1.0f64,
        flags in 0..4u8,
    ) {
        let records = history(&ops, flags);
        let k = (records.len() as f64 * cut) as usize;
        let mut live = replay(plane(flags), &records[..k]);
        let at_cut = live.snapshot();
        let frozen = live.clone();
        for r in &records[k..] {
            live.apply(r).unwrap();
        }
        prop_assert!(frozen.snapshot() == at_cut, "the copy changed after a cut at {k} of {}", records.len());
        prop_assert!(live.snapshot() == replay(plane(flags), &records).snapshot());
    }
}

/// Seeded histories (a fixed generator, so this test always covers the same ground): cuts
/// anywhere give the same plane, and between them the histories reach preemption,
/// re-queueing, node losses, completions and cancellations.
#[test]
fn seeded_histories_cover_what_snapshots_must_carry() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..24u64 {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as u8
        };
        let ops: Vec<(u8, u8, u8)> = (0..250).map(|_| (next(), next(), next())).collect();
        // Consolidation on even seeds, lending on every other pair.
        let consolidate = (seed % 2 == 0) as u8 | if seed % 4 < 2 { 2 } else { 0 };
        let records = history(&ops, consolidate);
        let mut whole = plane(consolidate);
        let mut cuts = vec![0, records.len() / 3, records.len() / 2, records.len()];
        for (k, r) in records.iter().enumerate() {
            let from = whole.next_event_seq();
            whole.apply(r).unwrap();
            seen.extend(whole.events_from(from).map(|e| e.kind.clone()));
            // Loans are rare in these histories: cut wherever one is out, too.
            if whole.jobs().any(|j| whole.loan_of(&j.name).is_some()) {
                cuts.push(k + 1);
            }
        }
        for k in cuts {
            let head = replay(plane(consolidate), &records[..k]);
            let resumed = replay(plane(consolidate).restore(&head.snapshot()).unwrap(), &records[k..]);
            assert!(whole.snapshot() == resumed.snapshot(), "seed {seed}: differs after a cut at {k}");
        }
        // Bounded history: at most the retention (and a quarter) of events, numbered on.
        assert!(whole.events().len() <= 50, "{} events held", whole.events().len());
        let seqs: Vec<u64> = whole.events().iter().map(|e| e.seq).collect();
        assert_eq!(seqs.last().map(|s| s + 1), Some(whole.next_event_seq()));
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
        let ended = whole.jobs().filter(|j| matches!(j.state, JobState::Completed | JobState::Cancelled)).count();
        assert!(ended <= 4, "{ended} ended jobs held");
    }
    for kind in [
        "preempted",
        "completed",
        "node-down",
        "queued",
        "cancelled",
        "moved",
        "move-deferred",
        "requeued",
        "readmitted",
        "loan",
        "loan-returned",
    ] {
        assert!(seen.contains(kind), "no {kind} event in any history: {seen:?}");
    }
}

#[test]
fn a_damaged_or_foreign_snapshot_is_refused() {
    let mut bytes = plane(0).snapshot();
    assert!(plane(0).restore(&bytes[..bytes.len() / 2]).is_err());
    bytes[0] ^= 0xff;
    assert!(plane(0).restore(&bytes).is_err());
    assert!(plane(0).restore(b"not cbor").is_err());
}
