//! A resource of a group (the training pool or one rollout node): who holds it, whose state
//! it has loaded, and its round-robin bookkeeping (phases served per member, the order).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use weave_core::JobId;
use weave_model::SwitchKind;

/// A training pool or one rollout node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Resource {
    pub(super) holder: Option<JobId>,
    pub(super) last: Option<JobId>,
    /// Members whose state is already loaded in this resource's host DRAM.
    pub(super) loaded: BTreeSet<JobId>,
    /// Phases served per current member (round-robin fairness).
    pub(super) served: BTreeMap<JobId, u64>,
    /// Place of each member in the round (the group's cyclic order); unordered members last.
    pub(super) rank: BTreeMap<JobId, u32>,
}

impl Resource {
    /// Whether `job` is due: no member has been served fewer phases, and none served as many
    /// comes before it in the order (members `passed_over` hold no one up).
    pub(super) fn eligible(&self, job: JobId, passed_over: impl Fn(JobId) -> bool) -> bool {
        let mine = self.place(job);
        self.served.iter().all(|(&o, &s)| o == job || (s, self.rank_of(o)) >= mine || passed_over(o))
    }

    /// Where `job` stands in the round: phases served, then its place in the order.
    pub(super) fn place(&self, job: JobId) -> (u64, u32) {
        (self.served.get(&job).copied().unwrap_or(0), self.rank_of(job))
    }

    pub(super) fn rank_of(&self, job: JobId) -> u32 {
        self.rank.get(&job).copied().unwrap_or(u32::MAX)
    }

    /// The most phases any current member has been served.
    pub(super) fn level(&self) -> u64 {
        self.served.values().copied().max().unwrap_or(0)
    }

    pub(super) fn add_member(&mut self, job: JobId, level: u64) {
        self.served.insert(job, level);
    }

    pub(super) fn set_order(&mut self, order: &[JobId]) {
        self.rank = order.iter().filter(|j| self.served.contains_key(j)).zip(0u32..).map(|(&j, r)| (j, r)).collect();
    }

    pub(super) fn remove_member(&mut self, job: JobId) {
        self.served.remove(&job);
        self.rank.remove(&job);
        self.loaded.remove(&job);
        if self.holder == Some(job) {
            self.holder = None;
        }
    }

    /// The switch needed to hand this resource to `job`, and takes it.
    pub(super) fn take(&mut self, job: JobId, resident: bool) -> Option<SwitchKind> {
        self.holder = Some(job);
        *self.served.entry(job).or_default() += 1;
        if self.last == Some(job) {
            return None;
        }
        let kind = if resident && self.loaded.contains(&job) { SwitchKind::Warm } else { SwitchKind::Cold };
        if resident {
            self.loaded.insert(job);
        }
        Some(kind)
    }

    pub(super) fn release(&mut self, job: JobId) {
        if self.holder == Some(job) {
            self.holder = None;
            self.last = Some(job);
        }
    }
}
