//! The plane as consolidation's driver: what it knows of its jobs' progress, and a move
//! carried out as a re-admission (the driver hears `Requeued` and resumes from the named
//! iteration). When to look and where a job goes are `weave_place::consolidate`'s, the same
//! passes the replay drives.

use super::{ev, JobState, Plane, PlaneError, PlaneEvent};
use weave_core::{GroupId, JobId, Micros};
use weave_place::consolidate::{self, ConsolidationDriver, Deferred, Movable, Move, Pairing};
use weave_place::{PlaceJob, Placer, Target};

/// The plane at one record's time: consolidation's view of it.
struct At<'a> {
    plane: &'a mut Plane,
    time_us: u64,
}

impl ConsolidationDriver for At<'_> {
    fn placer(&self) -> &Placer {
        &self.plane.placer
    }

    /// Running alone, out of their cooldown, while the hourly budget lasts; a job without an
    /// iteration count is valued over 100 more; its SLO slack is what its admission banked.
    fn movable(&mut self) -> Movable {
        let p = &mut *self.plane;
        let Some(churn) = p.churn.as_mut() else { return Movable::new() };
        let (names, jobs, deferred) = (&p.names, &p.jobs, &p.deferred);
        consolidate::movable(&p.placer, churn, Micros(self.time_us), |id| {
            if deferred.contains_key(&id) {
                return None;
            }
            let j = jobs.get(names.get(id)?)?;
            let remaining = j.iterations.map_or(100, |n| n.saturating_sub(j.completed_iterations));
            Some(consolidate::Progress { remaining, slack: Some(j.banked_slack()) })
        })
    }

    fn carry_out(&mut self, m: Move, _movable: &Movable, counted: bool) -> Option<JobId> {
        let name = self.plane.names.get(m.job)?.clone();
        // As in the replay, the group a mover leaves is not looked at again for this move.
        let pending = self.plane.lone_pending.len();
        let moved = self.plane.relocate(self.time_us, &name, m.target, counted);
        self.plane.lone_pending.truncate(pending);
        moved
    }

    /// A granted phase, or a finished rollout not yet trained on (the gate's view).
    fn holds_work(&self, job: JobId) -> bool {
        let p = &self.plane;
        p.names.get(job).and_then(|n| p.jobs.get(n)).is_some_and(|j| j.gate.mid_iteration())
    }

    /// The job keeps running; the move (counted now) waits for its training's finish. An
    /// event tells the tenant what was decided.
    fn defer(&mut self, d: Deferred, _movable: &Movable) {
        let (Deferred::Move(m) | Deferred::PairUp { opener: m, .. }) = d;
        let p = &mut *self.plane;
        if let Some(c) = p.churn.as_mut() {
            c.record(d.job(), Micros(self.time_us));
        }
        if let Some(name) = p.names.get(d.job()).cloned() {
            let group = p.group_of(&name);
            let meta = serde_json::json!({ "to": m.target, "when": "its training finishes" });
            p.event(PlaneEvent { meta: Some(meta), ..ev(self.time_us, &name, "move-deferred", None, None, group) });
        }
        p.deferred.insert(m.job, d);
    }

    fn take_deferred(&mut self, job: JobId) -> Option<Deferred> {
        self.plane.deferred.remove(&job)
    }

    fn drain(&mut self, job: JobId, on: bool) {
        let p = &mut *self.plane;
        let Some(name) = p.names.get(job).cloned() else { return };
        let Some(staleness) = p.jobs.get(&name).map(|j| if on { 0 } else { j.gate.staleness }) else { return };
        if let Some(d) = p.group_of(&name).and_then(|g| p.dispatchers.get_mut(&g)) {
            std::sync::Arc::make_mut(d).set_staleness(job, staleness);
        }
    }
}

impl Plane {
    /// Consolidation for the groups the last record left with one member.
    pub(super) fn consolidate_pending(&mut self, time_us: u64) {
        while let Some(g) = self.lone_pending.pop() {
            if self.churn.is_some() {
                consolidate::lone_group(&mut At { plane: self, time_us }, g);
            }
        }
    }

    /// The periodic pass over every job that runs alone (a durable `Consolidate` record, so
    /// replay makes the same moves).
    pub(super) fn consolidation_pass(&mut self, time_us: u64) {
        self.last_pass_us = Some(time_us);
        let event = ev(time_us, "", "consolidation-pass", None, None, None);
        self.event(event);
        consolidate::periodic_pass(&mut At { plane: self, time_us });
    }

    /// Whether the periodic pass is due at `time_us`: consolidation is on, `every` has passed
    /// since the last pass (or the first record), and some job runs alone.
    pub fn consolidation_due(&self, time_us: u64, every: Micros) -> bool {
        let since = self.last_pass_us.unwrap_or(time_us);
        self.churn.is_some() && time_us >= since.saturating_add(every.0) && self.placer.groups().any(|g| g.runs_alone())
    }

    /// On arrival: the pairing a new job should open a group for (see
    /// [`consolidate::pairing_on_arrival`]); `None` when consolidation is off.
    pub(super) fn pairing_on_arrival(&mut self, time_us: u64, job: &PlaceJob) -> Option<(Pairing, Movable)> {
        self.churn.as_ref()?;
        consolidate::pairing_on_arrival(&mut At { plane: self, time_us }, job)
    }

    /// The partner of an arrival's pairing moves into the group the new job opened.
    pub(super) fn partner_joins(&mut self, time_us: u64, group: GroupId, pair: Pairing, movable: &Movable) {
        consolidate::partner_joins(&mut At { plane: self, time_us }, group, pair, movable);
    }

    /// A training of `name` finished (its gate updated, its dispatcher not yet told): a move
    /// deferred for it takes effect now, unless the job still holds work (a stale job's
    /// rollout under way) or that was its last iteration. True if the job left its group.
    pub(super) fn deferred_move_due(&mut self, time_us: u64, name: &str) -> bool {
        let Some(j) = self.jobs.get(name).filter(|j| j.state == JobState::Running) else { return false };
        let last = j.iterations.is_some_and(|n| j.completed_iterations >= n);
        if last || j.gate.mid_iteration() || !self.deferred.contains_key(&j.id) {
            return false;
        }
        let id = j.id;
        consolidate::iteration_ended(&mut At { plane: self, time_us }, id)
    }

    /// Moves a running job to `target`: its admission ends, and it is re-admitted there from
    /// its last completed iteration with its measurements (as after a node failure, but not
    /// counted as a failure). Admission decides if the target no longer takes it. Returns the
    /// new admission's id. `counted`: a deferred move, counted against the hourly budget when
    /// it was decided (the new admission only cools down).
    pub(super) fn relocate(&mut self, time_us: u64, name: &str, target: Target, counted: bool) -> Option<JobId> {
        let j = self.jobs.get(name).filter(|j| j.state == JobState::Running)?;
        let (resubmit, carried) = j.resubmission();
        let (tenant, id, group) = (j.tenant.clone(), j.id, self.group_of(name));
        let meta = serde_json::json!({ "to": target, "resume_from": resubmit.server.resume_from.unwrap_or(0) });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, name, "moved", None, None, group) });
        self.return_loan(time_us, name, "its admission ended");
        if let Some(g) = group {
            self.drive(time_us, g, weave_dispatch::Input::Leave { job: id });
            self.depart(g, id);
            self.follow_order(time_us, g);
        }
        if let Err(e) = self.submit(time_us, &tenant, &resubmit, carried, Some(target)) {
            self.move_failed(time_us, name, e);
            return None;
        }
        let new_id = self.jobs[name].id;
        if let Some(c) = self.churn.as_mut() {
            if counted {
                c.cool(new_id, Micros(time_us));
            } else {
                c.record(new_id, Micros(time_us));
            }
        }
        Some(new_id)
    }

    fn move_failed(&mut self, time_us: u64, name: &str, e: PlaneError) {
        let reason = format!("re-admission after a consolidation move failed: {e}");
        if let Some(j) = self.job_mut(name) {
            j.state = JobState::Failed;
            j.failure = Some(reason.clone());
        }
        self.event(PlaneEvent {
            meta: Some(serde_json::json!({ "reason": reason })),
            ..ev(time_us, name, "failed", None, None, None)
        });
        self.ended(name);
    }
}
