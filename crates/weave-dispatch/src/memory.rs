//! Host-DRAM residency: on every node, the cached states of the jobs pinned to it must fit.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weave_core::{Bytes, JobId};

/// Host DRAM per node of each pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLimits {
    pub rollout_dram: Bytes,
    pub train_dram: Bytes,
}

impl GroupLimits {
    /// No residency limit (for timing-only evaluations).
    pub const UNLIMITED: GroupLimits = GroupLimits { rollout_dram: Bytes(u64::MAX), train_dram: Bytes(u64::MAX) };
}

/// One node's use, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryUse {
    /// `r<i>` for group-local rollout node i, `t` for every training node (all alike).
    pub node: String,
    pub used: Bytes,
    pub capacity: Bytes,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Resident {
    nodes: Vec<u32>,
    rollout_state: Bytes,
    train_state: Bytes,
}

/// What is cached where inside one group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryLedger {
    limits: GroupLimits,
    rollout_used: BTreeMap<u32, u64>,
    train_used: u64,
    residents: BTreeMap<JobId, Resident>,
}

impl MemoryLedger {
    pub fn new(limits: GroupLimits) -> Self {
        MemoryLedger { limits, rollout_used: BTreeMap::new(), train_used: 0, residents: BTreeMap::new() }
    }

    /// Whether a job with these states fits, without admitting it; `Err` says where not.
    pub fn check(&self, nodes: &[u32], rollout_state: Bytes, train_state: Bytes) -> Result<(), String> {
        for &n in nodes {
            let used = self.rollout_used.get(&n).copied().unwrap_or(0);
            if used.saturating_add(rollout_state.0) > self.limits.rollout_dram.0 {
                return Err(format!(
                    "rollout node r{n} would hold {} of cached state, over its {} of host DRAM",
                    Bytes(used.saturating_add(rollout_state.0)),
                    self.limits.rollout_dram
                ));
            }
        }
        if self.train_used.saturating_add(train_state.0) > self.limits.train_dram.0 {
            return Err(format!(
                "each training node would hold {} of cached state, over its {} of host DRAM",
                Bytes(self.train_used.saturating_add(train_state.0)),
                self.limits.train_dram
            ));
        }
        Ok(())
    }

    pub(crate) fn admit(
        &mut self,
        job: JobId,
        nodes: &[u32],
        rollout_state: Bytes,
        train_state: Bytes,
    ) -> Result<(), String> {
        self.check(nodes, rollout_state, train_state)?;
        for &n in nodes {
            *self.rollout_used.entry(n).or_default() += rollout_state.0;
        }
        self.train_used += train_state.0;
        self.residents.insert(job, Resident { nodes: nodes.to_vec(), rollout_state, train_state });
        Ok(())
    }

    pub(crate) fn evict(&mut self, job: JobId) {
        if let Some(r) = self.residents.remove(&job) {
            for n in r.nodes {
                if let Some(u) = self.rollout_used.get_mut(&n) {
                    *u -= r.rollout_state.0;
                    // An emptied node is forgotten: node numbers are not reused in elastic
                    // pools, so keeping it would grow the ledger with the server's age.
                    if *u == 0 {
                        self.rollout_used.remove(&n);
                    }
                }
            }
            self.train_used -= r.train_state.0;
        }
    }

    /// Per-node use: rollout nodes in index order, then the training nodes.
    pub fn usage(&self) -> Vec<MemoryUse> {
        let mut v: Vec<MemoryUse> = self
            .rollout_used
            .iter()
            .map(|(n, u)| MemoryUse { node: format!("r{n}"), used: Bytes(*u), capacity: self.limits.rollout_dram })
            .collect();
        v.push(MemoryUse { node: "t".into(), used: Bytes(self.train_used), capacity: self.limits.train_dram });
        v
    }

    /// True when every node is within its capacity (an invariant the dispatcher keeps).
    pub fn within_limits(&self) -> bool {
        self.rollout_used.values().all(|u| *u <= self.limits.rollout_dram.0)
            && self.train_used <= self.limits.train_dram.0
    }
}
