//! Fixed pools: a job that does not fit now waits in a durable queue instead of being refused
//! (409 stays for a job that can never fit the pools). The queue is a function of the records
//! like everything else in the plane: replay rebuilds it, in the same order.

use super::{ev, Measured, Plane, PlaneError, PlaneEvent, SubmitSpec};
use weave_core::{Micros, PhaseTimes, Priority};
use weave_dispatch::Phase;
use weave_place::share::Waiting;

fn priority(s: &SubmitSpec) -> Priority {
    s.priority.as_deref().and_then(|p| p.parse().ok()).unwrap_or_default()
}

/// A submission waiting for room.
#[derive(Clone, Debug)]
pub struct Queued {
    pub tenant: String,
    pub submit: SubmitSpec,
    pub submitted_us: u64,
    /// Why it waits.
    pub reason: String,
    /// A re-admitted job's measured estimate (after a node failure).
    pub(super) carried: Option<(PhaseTimes, Measured)>,
    /// Its place by arrival among all queued submissions.
    pub(super) arrival: u64,
}

impl Plane {
    /// Waiting submissions, first to start first.
    pub fn queue(&self) -> &[Queued] {
        &self.queue
    }

    /// A waiting submission and its position (0: next).
    pub fn queued(&self, name: &str) -> Option<(usize, &Queued)> {
        self.queue.iter().enumerate().find(|(_, q)| q.submit.id == name)
    }

    /// The tenant job `name` belongs to now: its queued submission's, else its entry's (a job
    /// re-queued after a node failure still has its failed admission's entry).
    pub fn owner(&self, name: &str) -> Option<&str> {
        match self.queued(name) {
            Some((_, q)) => Some(&q.tenant),
            None => self.jobs.get(name).map(|j| j.tenant.as_str()),
        }
    }

    /// Whether a submission that does not fit now may wait: fixed pools it fits when empty.
    pub(super) fn may_queue(&self, submit: &SubmitSpec, time_us: u64) -> Result<(), PlaneError> {
        let Some((rollout, training)) = self.placer.config().capacity else {
            return Err(PlaneError::Placement("the pools are elastic: nothing to wait for".into()));
        };
        let spec = submit.to_spec(weave_core::JobId(u32::MAX), Micros(time_us))?;
        if spec.rollout_nodes > rollout || spec.train_nodes > training {
            return Err(PlaneError::Placement(format!(
                "it needs {} rollout and {} training nodes; the pools have {rollout} and {training}: it can never fit",
                spec.rollout_nodes, spec.train_nodes
            )));
        }
        Ok(())
    }

    /// Admits `submit` now, or queues it: behind the jobs already waiting (first come, first
    /// served: a later job never jumps the queue), or with quotas where the queue's order puts
    /// it.
    pub(super) fn admit_or_queue(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        carried: Option<(PhaseTimes, Measured)>,
    ) -> Result<(), PlaneError> {
        if self.share.is_some() {
            self.may_queue(submit, time_us)?;
            self.enqueue(time_us, tenant, submit, carried, "waiting for its turn".into());
            self.admit_queued(time_us);
            return Ok(());
        }
        if self.queue.is_empty() {
            match self.submit(time_us, tenant, submit, carried.clone(), None) {
                Ok(()) => return Ok(()),
                Err(e) if self.may_queue(submit, time_us).is_ok() => {
                    self.enqueue(time_us, tenant, submit, carried, e.to_string());
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        self.may_queue(submit, time_us)?;
        self.enqueue(time_us, tenant, submit, carried, "jobs submitted earlier are waiting".into());
        Ok(())
    }

    fn enqueue(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        carried: Option<(PhaseTimes, Measured)>,
        reason: String,
    ) {
        let meta = serde_json::json!({ "position": self.queue.len(), "reason": reason });
        let arrival = self.queued_total;
        self.queued_total += 1;
        self.queue.push(Queued {
            tenant: tenant.into(),
            submit: submit.clone(),
            submitted_us: time_us,
            reason,
            carried,
            arrival,
        });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &submit.id, "queued", None, None, None) });
    }

    /// Starts waiting jobs while one may: the head in arrival order, or with quotas the first
    /// in the policy's order whose tenant's quota allows it (a job over quota waits without
    /// holding up other tenants; one that finds no room holds up the rest).
    pub(super) fn admit_queued(&mut self, time_us: u64) {
        while let Some(k) = self.next_to_start() {
            let q = self.queue[k].clone();
            if self.submit(time_us, &q.tenant, &q.submit, q.carried.clone(), None).is_err() {
                return;
            }
            self.queue.remove(k);
        }
    }

    /// Which waiting job to try next, if any may start.
    fn next_to_start(&mut self) -> Option<usize> {
        let Some(policy) = self.share.clone() else { return (!self.queue.is_empty()).then_some(0) };
        let index = |name: &str| policy.tenants.iter().position(|t| t.name == name).unwrap_or(0);
        let tenant_of = |id: weave_core::JobId| {
            self.names.get(id.0 as usize).and_then(|n| self.jobs.get(n)).map_or(0, |j| index(&j.tenant))
        };
        let usage = policy.usage(&self.placer, tenant_of);
        let demand = |q: &Queued| {
            q.submit
                .to_spec(weave_core::JobId(u32::MAX), Micros(q.submitted_us))
                .map_or([1.0, 1.0], |s| [s.rollout_nodes as f64, s.train_nodes as f64])
        };
        let waiting: Vec<Waiting> = self
            .queue
            .iter()
            .map(|q| Waiting {
                tenant: index(&q.tenant),
                priority: priority(&q.submit),
                arrival: q.arrival,
                demand: demand(q),
            })
            .collect();
        for k in policy.order(&waiting, &usage) {
            if policy.may_start(waiting[k].tenant, waiting[k].demand, &usage) {
                return Some(k);
            }
            self.queue[k].reason = "its tenant's quota is in use".into();
        }
        None
    }

    /// Takes a waiting job out of the queue (cancelled); false if it was not waiting.
    pub(super) fn dequeue(&mut self, time_us: u64, name: &str) -> bool {
        let Some((k, _)) = self.queued(name) else { return false };
        self.queue.remove(k);
        self.event(ev(time_us, name, "cancelled", None, None, None));
        true
    }

    /// A waiting job may ask for its first phase (it is told "not yet" until it starts).
    pub(super) fn queued_may_start(
        &self,
        name: &str,
        phase: Phase,
        iteration: u64,
    ) -> Option<Result<bool, PlaneError>> {
        let (_, q) = self.queued(name)?;
        let first = q.submit.resume_from.unwrap_or(0);
        Some(if (phase, iteration) == (Phase::Rollout, first) {
            Ok(false)
        } else {
            Err(PlaneError::Conflict {
                job: name.into(),
                reason: format!("the job is queued: its first phase is rollout of iteration {first}"),
            })
        })
    }
}
