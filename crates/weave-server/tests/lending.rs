//! Lending idle rollout blocks through the gate (`weave serve --lending`): a rollout that
//! starts while another group's members all train borrows their block until their training
//! should end, the borrower's driver returns it (the event says how late), the lender's own
//! rollout is never held up (its grant brings the deadline forward), a snapshot carries loans,
//! and without `--lending` nothing is lent.

use serde_json::json;
use weave_core::{ClusterConfig, GroupId};
use weave_dispatch::Phase;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{Plane, Record, SubmitSpec};

const S: u64 = 1_000_000;

fn plane(lending: bool) -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((cluster.rollout.nodes, cluster.training.nodes));
    let p = Plane::new(cluster, cfg);
    if lending {
        p.with_lending()
    } else {
        p
    }
}

/// A 7B job declaring `(rollout, train)` seconds and small switches, allowed no slowdown (so
/// it runs in a group of its own).
fn submission(time_us: u64, id: &str, (rollout_s, train_s): (u64, u64)) -> Record {
    let job: SubmitSpec = serde_json::from_value(json!({
        "id": id, "type": "7B_8k", "iterations": 3, "slo": 1.0,
        "rollout_s": rollout_s, "train_s": train_s, "switch_warm_s": 1.0, "switch_cold_s": 4.0, "sync_s": 0.0,
    }))
    .unwrap();
    Record::Submit { time_us, tenant: "alice".into(), job }
}

fn finish(p: &mut Plane, time_us: u64, job: &str, phase: Phase, iteration: u64) {
    let r = Record::Finish { time_us, job: job.into(), phase, iteration, duration_us: 0, meta: None, admission: None };
    p.apply(&r).unwrap_or_else(|e| panic!("finish {job} {phase:?} {iteration}: {e}"));
}

fn events(p: &Plane, kind: &str) -> Vec<serde_json::Value> {
    p.events()
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| json!({ "job": e.job, "t": e.time_us, "meta": e.meta }))
        .collect()
}

/// Lender `a` (rollout 10 s, training 60 s) trains from 10 s; borrower `b` (rollout 100 s)
/// arrives at 11 s.
fn lent(lending: bool) -> Plane {
    let mut p = plane(lending);
    p.apply(&submission(0, "a", (10, 60))).unwrap();
    finish(&mut p, 10 * S, "a", Phase::Rollout, 0);
    assert_eq!(p.job("a").unwrap().granted(), Some((Phase::Train, 0)));
    p.apply(&submission(11 * S, "b", (100, 10))).unwrap();
    p
}

#[test]
fn a_rollout_borrows_a_training_groups_block_until_its_training_should_end() {
    let p = lent(true);
    let (a, b) = (p.job("a").unwrap(), p.job("b").unwrap());
    let (da, db) = (a.decision.clone().unwrap(), b.decision.clone().unwrap());
    assert_ne!(da.group, db.group, "each in a group of its own");
    assert_eq!(b.granted(), Some((Phase::Rollout, 0)));
    let loan = p.loan_of("b").expect("b borrows a's idle block");
    assert_eq!(loan.nodes, da.rollout_nodes, "the lender's block");
    assert_eq!((loan.iteration, loan.admission, loan.granted_us), (0, b.id.0, 11 * S));
    // a's training ends at 70 s by its estimate; its engine wakes warm (1 s) before that.
    assert_eq!(loan.deadline_us, 69 * S);
    // b loads after a's engine sleeps (1 s): warm if a's nodes have room for b's state.
    assert!(loan.from_us == 13 * S || loan.from_us == 16 * S, "from {}", loan.from_us);
    assert!(loan.factor < 0.99, "worth it by the model: {}", loan.factor);
    let made = events(&p, "loan");
    assert_eq!(made.len(), 1);
    assert_eq!(made[0]["meta"]["lender_group"], json!(da.group.0));
}

#[test]
fn the_borrower_returns_the_nodes_and_the_event_says_how_late() {
    let mut p = lent(true);
    p.apply(&Record::ReturnLoan { time_us: 69 * S + 300_000, job: "b".into(), admission: None }).unwrap();
    assert!(p.loan_of("b").is_none());
    let returned = events(&p, "loan-returned");
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0]["meta"]["late_s"], json!(0.3));
    assert_eq!(returned[0]["meta"]["reason"], json!("returned by its driver"));
    assert_eq!((p.stats.loans, p.stats.loan_returns, p.stats.loan_returns_late_us), (1, 1, 300_000));
    // A return with no loan held changes nothing (the handler answers 409 before it).
    p.apply(&Record::ReturnLoan { time_us: 70 * S, job: "b".into(), admission: None }).unwrap();
    assert_eq!(events(&p, "loan-returned").len(), 1);
}

#[test]
fn the_lenders_rollout_is_granted_at_once_and_brings_the_deadline_forward() {
    let mut p = lent(true);
    // a's training ends early, at 40 s: its next rollout is granted now, on the lent block.
    finish(&mut p, 40 * S, "a", Phase::Train, 0);
    assert_eq!(p.job("a").unwrap().granted(), Some((Phase::Rollout, 1)), "the lender never waits");
    assert_eq!(p.loan_of("b").unwrap().deadline_us, 40 * S, "the borrower must give the nodes back now");
    let reclaimed = events(&p, "loan-reclaimed");
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0]["meta"]["reason"], json!("the lender's rollout"));
    assert_eq!(p.stats.loans_reclaimed_early, 1);
    // b's rollout finishing ends the loan too.
    finish(&mut p, 90 * S, "b", Phase::Rollout, 0);
    assert!(p.loan_of("b").is_none());
    assert_eq!(events(&p, "loan-returned")[0]["meta"]["reason"], json!("its rollout finished"));
}

#[test]
fn a_block_lent_is_not_lent_twice_and_a_lender_group_change_reclaims_it() {
    let mut p = lent(true);
    let a_group = GroupId(p.job("a").unwrap().decision.as_ref().unwrap().group.0);
    // A third job's rollout at 12 s finds a's block lent already.
    p.apply(&submission(12 * S, "c", (100, 10))).unwrap();
    assert!(p.loan_of("c").is_none(), "a's one block is lent to b");
    // a is cancelled: its group changes, and b must give the block back now.
    p.apply(&Record::Cancel { time_us: 20 * S, job: "a".into() }).unwrap();
    assert_eq!(p.loan_of("b").unwrap().deadline_us, 20 * S);
    let reclaimed = events(&p, "loan-reclaimed");
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0]["meta"]["lender_group"], json!(a_group.0));
}

#[test]
fn a_snapshot_carries_loans_and_replays_to_the_same_plane() {
    let p = lent(true);
    let restored = plane(true).restore(&p.snapshot()).unwrap();
    assert_eq!(restored.loan_of("b"), p.loan_of("b"));
    assert_eq!(restored.snapshot(), p.snapshot());
}

#[test]
fn without_lending_nothing_is_lent() {
    let p = lent(false);
    assert!(p.loan_of("b").is_none());
    assert!(events(&p, "loan").is_empty());
}
