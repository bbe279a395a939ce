//! Lending idle rollout blocks across groups through the gate (`weave serve --lending`).
//!
//! Which block a starting rollout borrows is `weave_place::lending`, the policy the replay runs;
//! the plane is its driver here. A loan is decided while the borrower's rollout is granted (so
//! replaying the records makes the same loans): the grant and the job's heartbeats carry the
//! lent nodes and the reclaim deadline. The borrower's driver spreads requests onto the lent
//! nodes once its engine is loaded there and moves them back by the deadline, then says so
//! (`Record::ReturnLoan`; the event tells how late it was). A loan also ends when the
//! borrower's rollout finishes or its admission ends.
//!
//! The lender is never held up by the gate: when a member of the lender's group is granted a
//! rollout on the lent block, or the group gains or loses a member, the deadline becomes now
//! (the borrower hears it at its next heartbeat) and the lender runs as it would have.

use super::{ev, Plane, PlaneEvent};
use serde::{Deserialize, Serialize};
use weave_core::{Bytes, GroupId, JobId, Micros, NodeId};
use weave_dispatch::{Dispatcher, Phase};
use weave_place::lending::{best_loan, lendable, Borrower, LendingDriver, LoanModel};
use weave_place::Placer;

/// The seed of the request-level model's sampled batches (configuration, the same at every
/// restart, so a replay makes the same loans).
const MODEL_SEED: u64 = 1;

/// Why a loan ended when the borrower's driver gave the nodes back.
pub(super) const RETURNED: &str = "returned by its driver";

/// A rollout block of one group lent to a job of another for one rollout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Loan {
    /// The borrower's key and admission, and the rollout's iteration.
    pub borrower: String,
    pub admission: u32,
    pub iteration: u64,
    pub nodes: Vec<NodeId>,
    pub granted_us: u64,
    /// When the borrower's engine should be up on the lent nodes (the lender's wake and the
    /// borrower's load after the grant), and when the nodes must be back.
    pub from_us: u64,
    pub deadline_us: u64,
    /// The rollout's predicted duration with the loan over without it.
    pub factor: f64,
}

impl Plane {
    /// Turns lending on: idle rollout blocks are lent to rollouts of other groups.
    pub fn with_lending(mut self) -> Plane {
        self.lending = Some(LoanModel::new(MODEL_SEED));
        self
    }

    /// Whether the plane lends idle rollout blocks (`--lending`).
    pub fn lends(&self) -> bool {
        self.lending.is_some()
    }

    /// Loans out now.
    pub fn loans_out(&self) -> usize {
        self.loans.len()
    }

    /// The loan job `name` holds now, if any.
    pub fn loan_of(&self, name: &str) -> Option<&Loan> {
        self.loans.values().find(|l| l.borrower == name)
    }

    /// Job `name` (in group `g`) was just granted the rollout of `iteration`: ends a loan of
    /// the block it runs on (its lender's rollout comes first), then borrows the idle block of
    /// another group that shortens this rollout most, if one gains enough.
    pub(super) fn lend_on_rollout(&mut self, time_us: u64, name: &str, g: GroupId, iteration: u64) {
        let Some(j) = self.jobs.get(name) else { return };
        let Some(block) = j.decision.as_ref().filter(|d| d.group == g).map(|d| d.block) else { return };
        self.reclaim_now(time_us, |key| key == (g, block), "the lender's rollout");
        if self.lending.is_none() || self.placer.group(g).is_none_or(|grp| grp.colocated || grp.spot()) {
            return;
        }
        let (j, grp) = (&self.jobs[name], self.placer.group(g).expect("checked"));
        let Some(member) = grp.members.iter().find(|m| m.job.id == j.id) else { return };
        let width = grp.block(block).map_or(1, |b| b.nodes.len() as u32);
        let borrower = Borrower::of(&j.spec, &member.job, width);
        let (admission, d) = (j.id.0, j.estimate.rollout);
        let offers = lendable(&*self, g);
        let model = self.lending.as_mut().expect("checked");
        let Some(c) = best_loan(model, &offers, &borrower, Micros(time_us), d) else { return };
        let Some(nodes) = self.block_nodes(c.lender.group, c.lender.block).map(<[NodeId]>::to_vec) else { return };
        let loan = Loan {
            borrower: name.to_string(),
            admission,
            iteration,
            nodes,
            granted_us: time_us,
            from_us: c.from.0,
            deadline_us: c.until.0,
            factor: c.factor,
        };
        let meta = serde_json::json!({
            "lender_group": c.lender.group.0,
            "nodes": loan.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "from_us": loan.from_us,
            "deadline_us": loan.deadline_us,
            "factor": c.factor,
            "warm": borrower.state <= c.lender.free_dram,
        });
        self.loans.insert((c.lender.group, c.lender.block), loan);
        self.stats.loans += 1;
        let event = ev(time_us, name, "loan", Some(Phase::Rollout), Some(iteration), Some(g));
        self.event(PlaneEvent { meta: Some(meta), ..event });
    }

    fn block_nodes(&self, g: GroupId, block: u32) -> Option<&[NodeId]> {
        self.placer.group(g)?.block(block).map(|b| b.nodes.as_slice())
    }

    /// The lender's group `g` gained or lost a member: its loans are due now.
    pub(super) fn reclaim_from(&mut self, time_us: u64, g: GroupId) {
        self.reclaim_now(time_us, |(lender, _)| lender == g, "the lender's group changed");
    }

    /// Brings the deadline of the loans `pick` chooses forward to now.
    fn reclaim_now(&mut self, time_us: u64, pick: impl Fn((GroupId, u32)) -> bool, why: &str) {
        let due: Vec<(GroupId, u32)> =
            self.loans.iter().filter(|(k, l)| pick(**k) && l.deadline_us > time_us).map(|(k, _)| *k).collect();
        for key in due {
            let loan = self.loans.get_mut(&key).expect("listed");
            loan.deadline_us = time_us;
            let (name, iteration) = (loan.borrower.clone(), loan.iteration);
            self.stats.loans_reclaimed_early += 1;
            let group = self.group_of(&name);
            let meta = serde_json::json!({ "lender_group": key.0 .0, "reason": why });
            let event = ev(time_us, &name, "loan-reclaimed", Some(Phase::Rollout), Some(iteration), group);
            self.event(PlaneEvent { meta: Some(meta), ..event });
        }
    }

    /// Ends job `name`'s loan (`why`: its driver gave the nodes back, its rollout finished,
    /// its admission ended); the event tells how long after the deadline it came.
    pub(super) fn return_loan(&mut self, time_us: u64, name: &str, why: &str) {
        let Some(key) = self.loans.iter().find(|(_, l)| l.borrower == name).map(|(k, _)| *k) else { return };
        let loan = self.loans.remove(&key).expect("found");
        let late_s = (time_us as f64 - loan.deadline_us as f64) / 1e6;
        if why == RETURNED {
            self.stats.loan_returns += 1;
            self.stats.loan_returns_late_us += time_us.saturating_sub(loan.deadline_us);
        }
        let meta = serde_json::json!({ "lender_group": key.0 .0, "reason": why, "late_s": late_s });
        let group = self.group_of(name);
        let event = ev(time_us, name, "loan-returned", Some(Phase::Rollout), Some(loan.iteration), group);
        self.event(PlaneEvent { meta: Some(meta), ..event });
    }

    /// The loans held, by lender block (for snapshots).
    pub(super) fn loans(&self) -> impl Iterator<Item = (&(GroupId, u32), &Loan)> {
        self.loans.iter()
    }
}

impl LendingDriver for Plane {
    fn placer(&self) -> &Placer {
        &self.placer
    }

    fn dispatcher(&self, g: GroupId) -> Option<&Dispatcher> {
        self.dispatchers.get(&g).map(|d| &**d)
    }

    /// A running training started at its grant; either lasts the job's current estimate.
    fn training_end(&self, job: JobId, running: bool, _iteration: u64) -> Option<Micros> {
        let name = self.names.get(job)?;
        let j = self.jobs.get(name)?;
        let start = if running { j.train_granted_us? } else { self.last_time_us? };
        Some(Micros(start) + j.estimate.train)
    }

    /// Lent already, on the spot tier, or a node of it down or under a preemption notice.
    fn withheld(&self, g: GroupId, block: u32) -> bool {
        let spot = self.placer.group(g).is_some_and(|grp| grp.spot());
        let down = self.block_nodes(g, block).is_some_and(|nodes| nodes.iter().any(|n| self.placer.is_down(*n)));
        spot || self.loans.contains_key(&(g, block)) || down
    }

    fn rollout_host_dram(&self) -> Bytes {
        self.cluster.rollout.host_dram()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::{Record, SubmitSpec};
    use weave_place::{PlacePolicy, PlacerConfig, Target};

    const S: u64 = 1_000_000;

    fn submission(time_us: u64, id: &str, (rollout_s, train_s): (u64, u64)) -> Record {
        let job: SubmitSpec = serde_json::from_value(serde_json::json!({
            "id": id, "type": "7B_8k", "iterations": 3, "slo": 1.0, "rollout_s": rollout_s, "train_s": train_s,
            "switch_warm_s": 1.0, "switch_cold_s": 4.0, "sync_s": 0.0,
        }))
        .unwrap();
        Record::Submit { time_us, tenant: "alice".into(), job }
    }

    #[test]
    fn a_borrower_moved_elsewhere_gives_its_loan_back() {
        let cluster = weave_core::ClusterConfig::default();
        let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
        cfg.capacity = Some((cluster.rollout.nodes, cluster.training.nodes));
        let mut p = Plane::new(cluster, cfg).with_lending();
        p.apply(&submission(0, "a", (10, 60))).unwrap();
        let finish = Record::Finish {
            time_us: 10 * S,
            job: "a".into(),
            phase: Phase::Rollout,
            iteration: 0,
            duration_us: 0,
            meta: None,
            admission: None,
        };
        p.apply(&finish).unwrap();
        p.apply(&submission(11 * S, "b", (100, 10))).unwrap();
        assert!(p.loan_of("b").is_some());
        // A consolidation move re-admits b elsewhere: the admission the loan was made to ends.
        let first = p.loan_of("b").unwrap().admission;
        let moved = p.relocate(12 * S, "b", Target::Isolated, false).expect("moved");
        let returned: Vec<_> = p.events.iter().filter(|e| e.kind == "loan-returned").collect();
        assert_eq!(returned.len(), 1, "the loan went with the admission");
        assert_eq!(returned[0].meta.as_ref().unwrap()["reason"], "its admission ended");
        // The new admission's rollout, granted at once, borrows a's idle block afresh.
        assert_ne!(moved.0, first);
        assert_eq!(p.loan_of("b").map(|l| l.admission), Some(moved.0));
        assert_eq!((p.loans.len(), p.stats.loans), (1, 2));
    }
}
