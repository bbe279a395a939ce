//! Long-tail migration: a rollout's stragglers move to a few workers so the block passes to
//! the next member, where the delay this causes is absorbed.

use super::{Engine, What, MIGRATION_SLO_MARGIN};
use weave_core::{JobId, Pool};
use weave_dispatch::Phase;
use weave_model::SwitchKind;

impl Engine<'_> {
    /// At a rollout's migration trigger: if another job waits for the block, move the
    /// stragglers to a few workers and hand the block on; otherwise finish in place.
    pub(super) fn migration_point(&mut self, i: usize, iteration: u64) {
        let s = self.states[i].as_ref().expect("running job");
        let p = s.placed.expect("placed");
        let (start, d) = (s.rollout_started, s.rollout_plain);
        let gpus_on_block = p.block_width * self.gpus().0;
        let waiting = self.dispatchers.get(&p.group).is_some_and(|disp| disp.rollout_waiting(p.block, JobId(i as u32)));
        let shape = self.jobs[i].migration;
        if waiting && self.can_afford_migration(i, iteration) {
            let end = start + d.scale(shape.end);
            let release = self.now.saturating_sub(start);
            self.stragglers.insert((p.group, p.block), (end, shape.share));
            self.charge_busy(
                p.group,
                Pool::Rollout,
                gpus_on_block,
                release + end.saturating_sub(self.now).scale(shape.share),
            );
            self.metrics.events.long_tail_migrations += 1;
            self.push(self.now, 1, i, What::Release, iteration);
            self.push(end, 1, i, What::Phase(Phase::Rollout), iteration);
        } else {
            self.charge_busy(p.group, Pool::Rollout, gpus_on_block, d);
            self.push(start + d, 1, i, What::Phase(Phase::Rollout), iteration);
        }
    }

    /// Long-tail migration frees the block for the next job but makes this rollout end later.
    /// It is used only where the delay is absorbed: the job's own cycle with the longer
    /// rollout still fits in the group's predicted meta-iteration (it is not on the critical
    /// path, so nobody's period grows), and the job stays within its SLO budget (its life so
    /// far, this iteration and the delay, against its solo time so far, with a margin).
    pub(super) fn can_afford_migration(&self, i: usize, iteration: u64) -> bool {
        let job = &self.jobs[i];
        let s = self.states[i].as_ref().expect("running job");
        let Some(p) = s.placed else { return false };
        let Some(g) = self.placer.group(p.group) else { return false };
        let Some(m) = g.members.iter().find(|m| m.job.id.0 as usize == i) else { return false };
        let own = m.job.timing_member(m.block, g.train_width(), self.resident);
        let sw = |ph| own.costs.get(ph, if self.resident { SwitchKind::Warm } else { SwitchKind::Cold });
        let cycle = own.rollout.scale(job.migration.end) + own.train + own.sync + sw(Phase::Rollout) + sw(Phase::Train);
        if cycle > g.prediction.meta_iteration {
            return false;
        }
        let d = s.rollout_plain;
        let delay = d.scale(job.migration.end - 1.0);
        let (drawn, _) = s.drawn(iteration, job);
        let this = job.solo_iteration(drawn, iteration);
        let rest_of_iteration = s.rollout_started + d + drawn.train + job.sync;
        let life = (rest_of_iteration + delay).saturating_sub(s.first_admitted);
        life.0 as f64 <= MIGRATION_SLO_MARGIN * job.slo * (s.solo_sum + this).0 as f64
    }
}
