//! The replay as consolidation's driver: what it knows of its jobs' progress, and a move
//! carried out in simulated time. When to look and where a job goes are
//! `weave_place::consolidate`'s (the server's plane drives the same passes).

use super::Engine;
use weave_core::{GroupId, JobId};
use weave_place::consolidate::{self, ConsolidationDriver, Deferred, Movable, Move};
use weave_place::{Placer, Target};

impl ConsolidationDriver for Engine<'_> {
    fn placer(&self) -> &Placer {
        &self.placer
    }

    /// Jobs consolidation may move now (see [`consolidate::movable`]).
    fn movable(&mut self) -> Movable {
        let states = &self.states;
        let jobs = &self.jobs;
        let deferred = &self.deferred;
        consolidate::movable(&self.placer, &mut self.churn, self.now, |j| {
            if deferred.contains_key(&j) {
                return None;
            }
            let s = states[j.0 as usize].as_ref()?;
            let job = &jobs[j.0 as usize];
            // What its SLO allows for the iterations done, less the life they took (the
            // iteration in progress is the move's lost partial iteration).
            let slack = s.solo_sum.scale(job.slo).saturating_sub(s.last_train_end.saturating_sub(s.first_admitted));
            Some(consolidate::Progress { remaining: job.iterations.saturating_sub(s.done), slack: Some(slack) })
        })
    }

    /// The job leaves (its partial iteration is lost) and is placed at the target. Only jobs
    /// that run alone move: if the target no longer takes it (fixed pools can be short of a
    /// new block), it goes back to running alone on the nodes it just freed, never to the
    /// queue.
    fn carry_out(&mut self, m: Move, movable: &Movable, counted: bool) -> Option<JobId> {
        let i = m.job.0 as usize;
        let alone_as = match self.states[i].as_ref().and_then(|s| s.placed) {
            Some(p) if p.colocated => Target::Colocated,
            _ => Target::Isolated,
        };
        self.consolidating = true;
        self.unplace(i);
        let placed = self.admit_at(i, Some(m.target)).is_ok()
            || self.admit_at(i, Some(alone_as)).is_ok()
            || self.admit(i).is_ok();
        if !placed {
            self.waiting.push_back(i);
        }
        self.consolidating = false;
        self.admit_waiting();
        if counted {
            self.churn.cool(m.job, self.now);
        } else {
            self.churn.record(m.job, self.now);
        }
        self.metrics.events.consolidation_moves += 1;
        if let Some(c) = movable.get(&m.job) {
            self.metrics.events.consolidation_cost_estimate += c.once;
        }
        placed.then_some(m.job)
    }

    /// Whether its dispatcher says the job holds work (see `Dispatcher::holds_work`).
    fn holds_work(&self, job: JobId) -> bool {
        let group = self.states[job.0 as usize].as_ref().and_then(|s| s.placed).map(|p| p.group);
        group.and_then(|g| self.dispatchers.get(&g)).is_some_and(|d| d.holds_work(job))
    }

    /// Counted now against the churn limits and in the move's cost estimate.
    fn defer(&mut self, d: Deferred, movable: &Movable) {
        let job = d.job();
        self.churn.record(job, self.now);
        if let Some(c) = movable.get(&job) {
            self.metrics.events.consolidation_cost_estimate += c.once;
        }
        self.deferred.insert(job, d);
    }

    fn take_deferred(&mut self, job: JobId) -> Option<Deferred> {
        self.deferred.remove(&job)
    }

    fn drain(&mut self, job: JobId, on: bool) {
        let i = job.0 as usize;
        let staleness = if on { 0 } else { self.jobs[i].spec.staleness };
        let group = self.states[i].as_ref().and_then(|s| s.placed).map(|p| p.group);
        if let Some(d) = group.and_then(|g| self.dispatchers.get_mut(&g)) {
            d.set_staleness(job, staleness);
        }
    }
}

impl Engine<'_> {
    /// On arrival: if pairing with a job that runs alone beats where admission would put the
    /// new job, the new job opens a group and the partner moves in. True if done.
    pub(super) fn pair_on_arrival(&mut self, i: usize) -> bool {
        if !self.colocation() {
            return false;
        }
        let place = self.place_job(i);
        let Some((pair, movable)) = consolidate::pairing_on_arrival(self, &place) else { return false };
        if self.admit_at(i, Some(Target::Isolated)).is_err() {
            return false;
        }
        if let Some(group) = self.placer.group_of(JobId(i as u32)) {
            consolidate::partner_joins(self, group, pair, &movable);
        }
        true
    }
}

impl Engine<'_> {
    /// Job `i` just finished a training in group `g` that is not its last: a move deferred for
    /// it is carried out now, unless it holds work beyond that training (a stale job's rollout
    /// under way), which keeps it deferred. True if the job left `g`.
    pub(super) fn deferred_move_due(&mut self, i: usize, g: GroupId) -> bool {
        let job = JobId(i as u32);
        let last = self.states[i].as_ref().is_some_and(|s| s.done >= self.jobs[i].iterations);
        if last || !self.deferred.contains_key(&job) {
            return false;
        }
        if self.dispatchers.get(&g).is_some_and(|d| d.holds_work_beyond_training(job)) {
            return false;
        }
        consolidate::iteration_ended(self, job)
    }
}
