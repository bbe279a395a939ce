//! The nodes of fixed pools: lost (out of service, their jobs re-admitted from their last
//! completed iteration), back, and under a preemption notice (no new placement lands on the
//! node; its jobs are told and carry on until the deadline, when the node is taken out of
//! service as if lost).

use super::{ev, JobState, Plane, PlaneError, PlaneEvent, Record};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use weave_core::NodeId;

/// A preemption notice: the node goes at `deadline_us`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub deadline_us: u64,
    pub reason: String,
}

impl Plane {
    /// Checks a node record: the node is in the inventory and in the state the change needs.
    pub(super) fn check_node(&self, rec: &Record) -> Result<(), PlaneError> {
        let invalid = |reason: String| Err(PlaneError::Invalid { field: "node".into(), reason });
        match rec {
            Record::NodeDown { node, .. } => {
                self.in_inventory(*node)?;
                // A node under notice is already closed to new placements; it may go.
                if self.placer.is_down(*node) && !self.notices.contains_key(node) {
                    return invalid(format!("{node} is already down"));
                }
                Ok(())
            }
            Record::NodeUp { node, .. } => {
                self.in_inventory(*node)?;
                if !self.placer.is_down(*node) {
                    return invalid(format!("{node} is not down"));
                }
                Ok(())
            }
            Record::NodeNotice { time_us, node, deadline_us, .. } => {
                self.in_inventory(*node)?;
                if self.notices.contains_key(node) {
                    return invalid(format!("{node} is already under a preemption notice"));
                }
                if self.placer.is_down(*node) {
                    return invalid(format!("{node} is already down"));
                }
                if deadline_us < time_us {
                    return invalid("the deadline is before the notice".into());
                }
                Ok(())
            }
            _ => unreachable!("only node records are checked here"),
        }
    }

    /// Nodes under notice whose deadline has come by `now_us`, first due first.
    pub fn notices_due(&self, now_us: u64) -> Vec<(NodeId, String)> {
        let mut due: Vec<(u64, NodeId, String)> = self
            .notices
            .iter()
            .filter(|(_, n)| n.deadline_us <= now_us)
            .map(|(node, n)| (n.deadline_us, *node, n.reason.clone()))
            .collect();
        due.sort();
        due.into_iter().map(|(_, node, reason)| (node, reason)).collect()
    }

    /// The preemption notices in force, by node.
    pub fn notices(&self) -> impl Iterator<Item = (&NodeId, &Notice)> {
        self.notices.iter()
    }

    /// A preemption notice: no new placement lands on `node` from now on; each job on it is
    /// told (an event of its own, with the deadline) and carries on until the node goes.
    pub(super) fn node_notice(&mut self, time_us: u64, node: NodeId, deadline_us: u64, reason: &str) {
        Arc::make_mut(&mut self.placer).set_node_down(node, true);
        self.notices.insert(node, Notice { deadline_us, reason: reason.to_string() });
        let names: Vec<String> =
            self.placer.jobs_on(node).into_iter().filter_map(|id| self.names.get(id).cloned()).collect();
        let meta = serde_json::json!({ "node": node.to_string(), "deadline_us": deadline_us, "reason": reason, "jobs": names });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, "", "node-notice", None, None, None) });
        for name in names {
            let group = self.group_of(&name);
            let meta = serde_json::json!({ "node": node.to_string(), "deadline_us": deadline_us });
            self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &name, "preemption-notice", None, None, group) });
        }
    }

    /// A node back in service (a notice on it is withdrawn).
    pub(super) fn node_up(&mut self, time_us: u64, node: NodeId) {
        Arc::make_mut(&mut self.placer).set_node_down(node, false);
        let withdrawn = self.notices.remove(&node).is_some();
        let mut meta = serde_json::json!({ "node": node.to_string() });
        if withdrawn {
            meta["notice_withdrawn"] = true.into();
        }
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, "", "node-up", None, None, None) });
    }

    /// An execution backend's inventory: the fixed pools hold at least this many nodes.
    pub(super) fn inventory(&mut self, time_us: u64, rollout: u32, training: u32) {
        Arc::make_mut(&mut self.placer).grow_capacity((rollout, training));
        let meta = serde_json::json!({ "rollout": rollout, "training": training });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, "", "inventory", None, None, None) });
    }

    /// Node failures only mean something for fixed pools, whose node names are machines.
    pub(super) fn in_inventory(&self, node: NodeId) -> Result<(), PlaneError> {
        let cap = self.placer.config().capacity.ok_or_else(|| PlaneError::Invalid {
            field: "node".into(),
            reason: "node failures need fixed-capacity pools (the elastic mode rents fresh nodes)".into(),
        })?;
        let size = if node.pool == weave_core::Pool::Rollout { cap.0 } else { cap.1 };
        if node.index >= size {
            return Err(PlaneError::Invalid {
                field: "node".into(),
                reason: format!("{node} is not in the inventory ({size} {} nodes)", node.pool),
            });
        }
        Ok(())
    }

    /// Takes `node` out of service; its jobs fail and are re-admitted from their last
    /// completed iteration (their checkpoint) wherever the placer finds room.
    pub(super) fn node_down(&mut self, time_us: u64, node: NodeId, reason: &str) {
        self.notices.remove(&node);
        Arc::make_mut(&mut self.placer).set_node_down(node, true);
        let meta = serde_json::json!({ "node": node.to_string(), "reason": reason });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, "", "node-down", None, None, None) });
        let names = self.placer.jobs_on(node).into_iter().filter_map(|id| self.names.get(id).cloned()).collect();
        self.readmit_from_checkpoint(time_us, names, &format!("node {node} lost: {reason}"));
    }

    /// Ends the admissions of `names` (failed, for `why`) and re-admits each job from its last
    /// completed iteration (its checkpoint) wherever the placer finds room, or queues it.
    pub(super) fn readmit_from_checkpoint(&mut self, time_us: u64, names: Vec<String>, why: &str) {
        // Every affected job leaves first, so none is re-admitted into what is left of a
        // group that still holds a lost node.
        let mut leaving = Vec::new();
        for name in names {
            let j = &self.jobs[&name];
            let (resubmit, carried) = j.resubmission();
            leaving.push((name.clone(), j.tenant.clone(), resubmit, carried));
            self.end(time_us, &name, JobState::Failed, Some(why.to_string()));
        }
        for (name, tenant, resubmit, carried) in leaving {
            let outcome = match self.admit_or_queue(time_us, &tenant, &resubmit, carried, true) {
                Ok(()) if self.queued(&name).is_some() => {
                    ("requeued", serde_json::json!({ "resume_from": resubmit.server.resume_from.unwrap_or(0) }))
                }
                Ok(()) => {
                    ("readmitted", serde_json::json!({ "resume_from": resubmit.server.resume_from.unwrap_or(0) }))
                }
                Err(e) => ("readmit-failed", serde_json::json!({ "reason": e.to_string() })),
            };
            let group = self.group_of(&name).filter(|_| outcome.0 == "readmitted");
            self.event(PlaneEvent { meta: Some(outcome.1), ..ev(time_us, &name, outcome.0, None, None, group) });
        }
    }
}
