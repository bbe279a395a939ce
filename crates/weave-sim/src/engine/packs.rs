//! LoRA jobs joining running packs: a LoRA job that arrives takes an adapter slot in a running
//! pack of its base and widths (or makes a pack of a LoRA job running alone) from the pack's
//! next rollout on, where every member still running keeps the pack's headroom of its slack
//! (`lora::joined`) and the pack's group still keeps every member's SLO with the pack's longer
//! phases (`Placer::reshape`). The policy is the server's too (`weave_place::lora::pack_to_join`,
//! over this module's driver): the replay offers the running jobs in arrival order, the first
//! that takes the job keeps it, and a job no pack takes is placed as any job.

use super::job_run::MemberRun;
use super::Engine;
use crate::workload::{admission_variation, SimJob};
use weave_core::JobId;
use weave_model::ProfileModel;
use weave_place::lora::{pack_to_join, PackDriver};
use weave_place::{PlaceJob, Placer, Variation};

impl Engine<'_> {
    /// Job `i`, arriving now, joins a running pack if one takes it; true if it did.
    pub(super) fn join_running_pack(&mut self, i: usize) -> bool {
        if !self.growing_packs || self.jobs[i].spec.lora.is_none() || self.states[i].is_some() {
            return false;
        }
        // Every replay's jobs are prepared with the built-in profile (no other is loaded).
        let joining = Joining { engine: self, joiner: i, profile: ProfileModel::builtin() };
        let Some(((p, at), (grown, variation), place)) = pack_to_join(&joining) else { return false };
        self.placer.reshape(JobId(p as u32), place, true);
        self.variations[p] = variation;
        self.enter_pack(p, at, grown);
        true
    }

    /// The iteration from which job `p` could take a new member: its next rollout, if it is
    /// placed, not waiting for a move and has a rollout left to begin.
    fn joinable(&self, p: usize) -> Option<u64> {
        let placed = self.states[p].as_ref()?.placed?;
        if self.deferred.contains_key(&JobId(p as u32)) {
            return None;
        }
        let at = self.dispatchers.get(&placed.group)?.next_rollout(JobId(p as u32))?;
        (at < self.jobs[p].iterations).then_some(at)
    }

    /// Job `p` becomes `grown` (the pack with its new member, who starts at the pack's `at`).
    fn enter_pack(&mut self, p: usize, at: u64, grown: SimJob) {
        let now = self.now;
        let s = self.states[p].as_mut().expect("joinable jobs run");
        if s.members.is_empty() {
            // A LoRA job running alone becomes the pack's first member, with what it has done.
            let own = MemberRun {
                done: s.done,
                solo_sum: s.solo_sum,
                within_slo: s.within_slo,
                recorded: false,
                admitted: s.first_admitted,
            };
            s.members.push(own);
        }
        s.members.push(MemberRun { admitted: now, ..MemberRun::default() });
        // What it measured with other members says nothing of the pack now.
        s.measured.clear();
        let group = s.placed.expect("joinable jobs are placed").group;
        let job = JobId(p as u32);
        if let Some(d) = self.dispatchers.get_mut(&group) {
            let extended = d.extend_iterations(job, grown.iterations);
            debug_assert!(extended, "its next rollout at {at} was checked to be before its last");
            // Staggered members pipeline the pack one iteration deep.
            d.set_staleness(job, grown.spec.staleness);
        }
        self.jobs.to_mut()[p] = grown;
        *self.metrics.pack_joins.get_or_insert(0) += 1;
        self.follow_order(group);
    }
}

/// The replay as the join policy's driver, for the arriving job `joiner`.
struct Joining<'e, 'a> {
    engine: &'e Engine<'a>,
    joiner: usize,
    profile: ProfileModel,
}

impl PackDriver for Joining<'_, '_> {
    /// A running job (a pack or a LoRA job alone) and the iteration the joiner would start at.
    type Pack = (usize, u64);
    /// The job it becomes, and what admission knows of its variation.
    type Grown = (SimJob, Variation);

    /// The running jobs in arrival order.
    fn open_packs(&self) -> Vec<(usize, u64)> {
        (0..self.joiner).filter_map(|p| Some((p, self.engine.joinable(p)?))).collect()
    }

    fn pack_job(&self, &(p, _): &(usize, u64)) -> JobId {
        JobId(p as u32)
    }

    fn grown(&self, &(p, at): &(usize, u64)) -> Option<((SimJob, Variation), PlaceJob)> {
        let e = self.engine;
        let grown = crate::lora::joined(&e.jobs[p], &e.jobs[self.joiner], at, &self.profile, e.cluster)?;
        let cfg = e.cfg;
        let variation = admission_variation(&grown, &cfg.runtime, cfg.slo_epsilon, cfg.seed, cfg.admission_samples);
        let place = e.place_view(p, &grown, grown.place.times, variation.clone());
        Some(((grown, variation), place))
    }

    fn placer(&self) -> &Placer {
        &self.engine.placer
    }
}
