//! Changes to a job already placed: re-estimation from measured phases, what admission knows
//! of its variation, and a shared-base pack's new shape (the group re-predicted each time).

use super::Placer;
use crate::group::Group;
use crate::job::PlaceJob;
use std::sync::Arc;
use weave_core::{Bytes, JobId};

impl Placer {
    /// Replaces a placed job's estimate (online re-estimation from measured phases) and
    /// re-predicts its group. Returns false if the job is not placed.
    pub fn update_times(&mut self, job: JobId, times: weave_core::PhaseTimes) -> bool {
        self.update_member(job, |j| j.times = times)
    }

    /// Re-estimation from phases a running job measured itself (the control plane): the
    /// measurements already include the job's own switches and weight sync, so the modelled
    /// ones are not added on top. Returns false if the job is not placed.
    pub fn update_measured(&mut self, job: JobId, times: weave_core::PhaseTimes) -> bool {
        self.update_member(job, |j| j.set_measured(times))
    }

    /// Replaces what admission knows of a placed job's variation (the server learns it from
    /// measured phases). Returns false if the job is not placed.
    pub fn update_variation(&mut self, job: JobId, variation: crate::Variation) -> bool {
        self.update_member(job, |j| j.variation = variation)
    }

    /// Changes a placed job's placement view to `changed` (a shared-base pack gaining or losing a
    /// member: other phases, an adapter more or less of state, another SLO). With `must_hold`
    /// the change is made only if the group still keeps every member's SLO and its host DRAM
    /// takes the new state; without, it is made regardless (a pack that shrank). Returns whether
    /// it was made; never for a job not placed.
    pub fn reshape(&mut self, job: JobId, changed: PlaceJob, must_hold: bool) -> bool {
        let Some(group) = self.reshaped(job, changed, must_hold) else { return false };
        self.groups.insert(group.id, Arc::new(group));
        true
    }

    /// The group of `job` as [`Placer::reshape`] would leave it, if it would make the change.
    pub fn reshaped(&self, job: JobId, changed: PlaceJob, must_hold: bool) -> Option<Group> {
        let gid = self.job_group.get(&job)?;
        let res = &self.cfg.residency;
        let mut g = Group::clone(self.groups.get(gid)?);
        let pos = g.members.iter().position(|m| m.job.id == job)?;
        let (old, block) = (&g.members[pos].job, g.members[pos].block);
        let width = g.training_nodes.len().max(1) as u64;
        // Host DRAM is only counted when state stays resident (a co-located member holds no
        // rollout block).
        let used = g.block(block).map(|b| b.used.0.saturating_sub(old.rollout_state.0) + changed.rollout_state.0);
        let train_used = (g.train_used.0.saturating_sub(old.train_state_total.0 / width))
            .saturating_add(changed.train_state_total.0 / width);
        let rollout_fits = used.is_none_or(|u| u <= res.rollout_dram.0);
        let memory_fits = !res.resident || (rollout_fits && train_used <= res.train_dram.0);
        g.members[pos].job = PlaceJob { id: job, ..changed };
        let jobs: Vec<&PlaceJob> = g.members.iter().map(|m| &m.job).collect();
        g.prediction = match (g.colocated, must_hold) {
            (true, true) => super::colocated_within_slo(jobs[0]).filter(|_| memory_fits)?,
            (true, false) => crate::group::Prediction::colocated(jobs[0])?,
            (false, true) => {
                let members = g.timing_members(None, res.resident);
                crate::group::predict_within_slo(&members, &jobs).filter(|_| memory_fits)?
            }
            (false, false) => crate::group::predict(&g.timing_members(None, res.resident)),
        };
        if res.resident {
            if let (Some(b), Some(u)) = (g.blocks.iter_mut().find(|b| b.id == block), used) {
                b.used = Bytes(u);
            }
            g.train_used = Bytes(train_used);
        }
        Some(g)
    }

    /// Changes a placed job's placement view and re-predicts its group.
    fn update_member(&mut self, job: JobId, change: impl FnOnce(&mut PlaceJob)) -> bool {
        let Some(gid) = self.job_group.get(&job) else { return false };
        let resident = self.cfg.residency.resident;
        let g = self.group_mut(*gid).expect("placed jobs have groups");
        if let Some(m) = g.members.iter_mut().find(|m| m.job.id == job) {
            change(&mut m.job);
        }
        g.refresh(resident);
        true
    }
}
