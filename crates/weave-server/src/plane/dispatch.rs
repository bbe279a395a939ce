//! Driving a group's dispatcher from records: a launched job's joining once it has started,
//! a job's departure, the inputs a record causes and everything they cause in turn, the
//! group's cyclic order, and the phase grants that result.

use super::{ev, JobState, Plane, PlaneError, PlaneEvent};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use weave_core::{GroupId, JobId, Micros};
use weave_dispatch::{Action, Input, Phase};
use weave_model::SwitchKind;

impl Plane {
    /// Whether `name` is admitted and waits for its processes to start (see `Record::Ready`):
    /// the admission to name in the record.
    pub fn awaits_start(&self, name: &str) -> Option<u32> {
        self.jobs.get(name).filter(|j| j.starting()).map(|j| j.id.0)
    }

    /// A launched job's processes asked for their first phase: it joins its group.
    pub(super) fn join_when_ready(&mut self, time_us: u64, name: &str) {
        let Some(j) = self.job_mut(name) else { return };
        let (Some(member), Some(group)) = (j.pending_join.take(), j.decision.as_ref().map(|d| d.group)) else { return };
        let waited_s = time_us.saturating_sub(j.submitted_us) as f64 / 1e6;
        let meta = serde_json::json!({ "waited_s": waited_s });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, name, "ready", None, None, Some(group)) });
        self.drive(time_us, group, Input::Join(member));
    }

    pub(super) fn depart(&mut self, g: GroupId, id: JobId) {
        // A move deferred for this admission goes with it.
        self.deferred.remove(&id);
        if let Ok(d) = Arc::make_mut(&mut self.placer).depart(id) {
            if d.dissolved {
                self.dispatchers.remove(&g);
            } else if self.churn.is_some() && self.placer.group(g).is_some_and(|grp| grp.runs_alone()) {
                self.lone_pending.push(g);
            }
        }
    }

    /// Feeds an input and everything it causes to a group's dispatcher.
    pub(super) fn drive(&mut self, time_us: u64, g: GroupId, first: Input) {
        let now = Micros(time_us);
        if matches!(first, Input::Join(_) | Input::Leave { .. }) {
            self.reclaim_from(time_us, g);
        }
        let mut queue = VecDeque::from([first]);
        // A switch the dispatcher planned before a grant: the grant's event says which.
        let mut switches: BTreeMap<JobId, (SwitchKind, Micros)> = BTreeMap::new();
        while let Some(input) = queue.pop_front() {
            let Some(d) = self.dispatchers.get_mut(&g).map(Arc::make_mut) else { return };
            let actions = match d.handle(now, input) {
                Ok(a) => a,
                // Only checked inputs reach here; a refusal means the job already left.
                Err(_) => continue,
            };
            for a in actions {
                match a {
                    Action::BeginSwitch { job, phase, iteration, kind, duration, .. } => {
                        if self.grant_detail {
                            switches.insert(job, (kind, duration));
                        }
                        queue.push_back(Input::SwitchFinished { job, phase, iteration })
                    }
                    Action::BeginSync { job, iteration, .. } => queue.push_back(Input::SyncFinished { job, iteration }),
                    Action::StartRollout { job, iteration, weights, .. } => {
                        self.grant(time_us, job, (Phase::Rollout, iteration, weights), g, switches.remove(&job))
                    }
                    Action::StartTraining { job, iteration } => {
                        self.grant(time_us, job, (Phase::Train, iteration, 0), g, switches.remove(&job))
                    }
                    Action::Completed { job, .. } => {
                        // A dispatched job's name is held (numbers are let go only after their
                        // admission ended); the group lets go of it either way.
                        let Some(name) = self.names.get(job).cloned() else {
                            self.depart(g, job);
                            continue;
                        };
                        if let Some(j) = self.job_mut(&name) {
                            j.state = JobState::Completed;
                        }
                        self.event(ev(time_us, &name, "completed", None, None, Some(g)));
                        self.depart(g, job);
                        self.ended(&name);
                    }
                }
            }
        }
        self.follow_order(time_us, g);
    }

    /// The group's dispatcher follows the cyclic order of the placer's current prediction
    /// (what admission predicted is what runs): after a join, a departure or re-estimation.
    pub(super) fn follow_order(&mut self, time_us: u64, g: GroupId) {
        let (Some(group), Some(d)) = (self.placer.group(g), self.dispatchers.get(&g)) else { return };
        if let Some(reorder) = group.reorder(d) {
            self.drive(time_us, g, reorder);
        }
    }

    /// Grants `phase` of `iteration` (a rollout sampling weights version `weights`); `switch`
    /// is the state load the dispatcher planned before it (the job does it at the start of its
    /// phase), told in the event's `meta` with the wait when grant detail is on. A stale
    /// job's rollout grant tells its weights version in `meta` always (its driver needs it).
    pub(super) fn grant(
        &mut self,
        time_us: u64,
        job: JobId,
        (phase, iteration, weights): (Phase, u64, u64),
        g: GroupId,
        switch: Option<(SwitchKind, Micros)>,
    ) {
        let Some(name) = self.names.get(job).cloned() else { return };
        let mut wait = 0;
        let mut stale = false;
        if let Some(j) = self.job_mut(&name) {
            j.gate.grant(phase, iteration, weights);
            if phase == Phase::Train {
                j.train_granted_us = Some(time_us);
            }
            stale = j.gate.staleness > 0;
            let k = (phase == Phase::Train) as usize;
            wait = time_us.saturating_sub(j.lane_ready(phase, iteration));
            self.stats.grants[k] += 1;
            self.stats.wait_us[k] += wait;
        }
        let mut meta = self.grant_detail.then(|| {
            let mut meta = serde_json::json!({ "wait_s": wait as f64 / 1e6 });
            if let Some((kind, d)) = switch {
                meta["switch"] = serde_json::json!(if kind == SwitchKind::Warm { "warm" } else { "cold" });
                meta["switch_planned_s"] = serde_json::json!(d.as_secs_f64());
            }
            meta
        });
        if stale && phase == Phase::Rollout {
            meta.get_or_insert_with(|| serde_json::json!({}))["weights"] = serde_json::json!(weights);
        }
        // A pack's rollout names the members in its batch and their adapter slots.
        if let Some(adapters) = (phase == Phase::Rollout).then(|| self.pack_rollout_granted(&name, iteration)).flatten()
        {
            meta.get_or_insert_with(|| serde_json::json!({}))["adapters"] = adapters;
        }
        self.event(PlaneEvent { meta, ..ev(time_us, &name, "grant", Some(phase), Some(iteration), Some(g)) });
        if phase == Phase::Rollout {
            self.lend_on_rollout(time_us, &name, g, iteration);
        }
    }

    /// Whether `name` may start `phase` of `iteration` now: `Ok(true)` granted, `Ok(false)`
    /// not yet (it is the lane's next phase within the job's staleness bound; wait), `Err`
    /// the request breaks the barrier or the bound.
    pub fn may_start(&self, name: &str, phase: Phase, iteration: u64) -> Result<bool, PlaneError> {
        if let Some(waiting) = self.queued_may_start(name, phase, iteration) {
            return waiting;
        }
        let j = self.running(name)?;
        if let Some(refused) = self.member_refusal(name) {
            return Err(refused);
        }
        j.gate.may_ask(phase, iteration).map_err(|r| PlaneError::Conflict { job: name.into(), reason: r.0 })?;
        Ok(j.gate.is_granted(phase, iteration))
    }
}
