//! Fixed pools: a job that does not fit now waits in a durable queue instead of being refused
//! (409 stays for a job that can never fit the pools). The queue is a function of the records
//! like everything else in the plane: replay rebuilds it, in the same order.

use super::{ev, JobState, Measured, Plane, PlaneError, PlaneEvent, SubmitSpec};
use weave_core::{Micros, PhaseTimes, Priority};
use weave_dispatch::Phase;
use weave_place::queue::{self as share_queue, Blocked, QueueDriver};
use weave_place::share::{self, Claim, Nodes, Running, SharePolicy, Usage, Waiting};

/// `remaining` iterations of `times` at slowdown `slo` (`None`: no end).
fn at_slo(times: PhaseTimes, slo: f64, remaining: Option<u64>) -> Option<Micros> {
    remaining.map(|n| Micros(((times.rollout + times.train).0 as f64 * slo * n as f64) as u64))
}

/// What a waiting submission needs: nodes per pool, and the environment cores its sandboxes
/// would hold (0 if it is not agentic). `None` only for a submission that no longer parses,
/// which checked records never are.
fn demand(q: &Queued) -> Option<(Nodes, f64)> {
    let s = q.submit.to_spec(weave_core::JobId(u32::MAX), Micros(q.submitted_us)).ok()?;
    let env = q.submit.job.agentic.as_ref().map_or(0.0, |a| a.cores_held(s.batch, s.staleness));
    Some(([s.rollout_nodes as f64, s.train_nodes as f64], env))
}

fn priority(s: &SubmitSpec) -> Priority {
    s.job.priority.as_deref().and_then(|p| p.parse().ok()).unwrap_or_default()
}

/// A submission waiting for room.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
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
    /// It was admitted and taken off (preempted, or its node was lost): it resumes first.
    pub(super) resumes: bool,
}

impl Plane {
    /// Waiting submissions, first to start first.
    pub fn queue(&self) -> &[Queued] {
        &self.queue
    }

    /// With quotas: each tenant's name, nominal quota and quota in use (nodes per pool:
    /// rollout, training; shared nodes split among their members).
    pub fn quota_use(&self) -> Vec<(String, Nodes, Nodes)> {
        let Some(policy) = self.share.as_ref() else { return Vec::new() };
        let usage = self.share_usage(policy).held;
        policy.tenants.iter().zip(usage).map(|(t, u)| (t.name.clone(), t.nominal(), u)).collect()
    }

    /// For each waiting job (as listed by [`Plane::queue`]): its place in the order jobs will
    /// start (0: next; with quotas the policy's order, not arrival) and its projected start
    /// time on the plane's clock, if one is in view. The projection assumes every job runs its
    /// remaining iterations at its SLO on its current estimate and ignores co-execution and
    /// quotas: an estimate, not a promise.
    pub fn queue_outlook(&self, now_us: u64) -> Vec<(usize, Option<u64>)> {
        let order: Vec<usize> = match self.share.as_ref() {
            Some(policy) => self.share_order(policy, &self.waiting(policy), &self.share_usage(policy)),
            None => (0..self.queue.len()).collect(),
        };
        let running_end = |id| self.running_end(now_us, id);
        let waiting: Vec<(Nodes, Option<Micros>)> = order
            .iter()
            .map(|&k| {
                let q = &self.queue[k];
                let demand = demand(q).map_or([f64::INFINITY; 2], |(nodes, _)| nodes);
                (demand, self.waiting_duration(k))
            })
            .collect();
        let starts = share::projected_starts(&self.placer, Micros(now_us), running_end, &waiting);
        let mut out = vec![(0, None); self.queue.len()];
        for (position, (&k, start)) in order.iter().zip(starts).enumerate() {
            out[k] = (position, start.map(|s| s.0));
        }
        out
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

    /// The key of `tenant`'s job called `name`, if it has one: job names are per tenant, so
    /// the first tenant to use a name holds it as the key and another tenant's job of the same
    /// name is keyed `name~tenant`. Of two keys, the one active now (running or waiting), else
    /// the latest admission.
    pub fn resolve(&self, tenant: &str, name: &str) -> Option<String> {
        let mine: Vec<String> = [name.to_string(), format!("{name}~{tenant}")]
            .into_iter()
            .filter(|k| self.owner(k) == Some(tenant))
            .collect();
        let active =
            |k: &String| self.queued(k).is_some() || self.jobs.get(k).is_some_and(|j| j.state == JobState::Running);
        let latest = |k: &String| self.jobs.get(k).map_or(0, |j| j.id.0 as u64 + 1);
        mine.iter().find(|k| active(k)).or_else(|| mine.iter().max_by_key(|k| latest(k))).cloned()
    }

    /// The key a submission of `tenant`'s job `name` takes (see [`Plane::resolve`]); `None`
    /// when both the name and `name~tenant` belong to others, or the tenant's name cannot be
    /// part of a key.
    pub fn key_for(&self, tenant: &str, name: &str) -> Option<String> {
        if let Some(k) = self.resolve(tenant, name) {
            return Some(k);
        }
        if self.owner(name).is_none() {
            return Some(name.to_string());
        }
        let keyable = !tenant.is_empty()
            && tenant.len() <= 64
            && tenant.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        let key = format!("{name}~{tenant}");
        (keyable && self.owner(&key).is_none()).then_some(key)
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
        resumes: bool,
    ) -> Result<(), PlaneError> {
        if self.share.is_some() {
            self.may_queue(submit, time_us)?;
            self.enqueue(time_us, tenant, submit, carried, resumes, "waiting for its turn".into());
            self.admit_queued(time_us);
            return Ok(());
        }
        if self.queue.is_empty() {
            match self.submit(time_us, tenant, submit, carried.clone(), None) {
                Ok(()) => return Ok(()),
                Err(e) if self.may_queue(submit, time_us).is_ok() => {
                    self.enqueue(time_us, tenant, submit, carried, resumes, e.to_string());
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        self.may_queue(submit, time_us)?;
        self.enqueue(time_us, tenant, submit, carried, resumes, "jobs submitted earlier are waiting".into());
        Ok(())
    }

    /// Queues `submit`; `carried` is a re-admitted job's measured estimate, `resumes` whether
    /// it was admitted before.
    fn enqueue(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        carried: Option<(PhaseTimes, Measured)>,
        resumes: bool,
        reason: String,
    ) {
        // Its tenant's waiting jobs before it: the event goes to the tenant, who is not to learn
        // how many other tenants' jobs wait.
        let position = self.queue.iter().filter(|q| q.tenant == tenant).count();
        let meta = serde_json::json!({ "position": position, "reason": reason });
        let arrival = self.arrivals.get(&submit.id).copied().unwrap_or(self.next_arrival);
        self.queue.push(Queued {
            tenant: tenant.into(),
            submit: submit.clone(),
            submitted_us: time_us,
            reason,
            carried,
            arrival,
            resumes,
        });
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &submit.id, "queued", None, None, None) });
    }

    /// Starts waiting jobs while one may: the head in arrival order, or with quotas in the
    /// policy's order the first whose tenant's quota allows it (a job over quota waits without
    /// holding up other tenants; one that finds no room holds up the rest). With preemption, a
    /// job that may not start takes the capacity the policy lets it reclaim.
    pub(super) fn admit_queued(&mut self, time_us: u64) {
        // Every round starts a job; victims are never preempted again inside their minimum
        // run, so the bound is never reached in practice: it only guards against a policy bug.
        let mut rounds = 2 * (self.queue.len() + self.placer.groups().map(|g| g.members.len()).sum::<usize>()) + 1;
        while rounds > 0 && self.start_one(time_us) {
            rounds -= 1;
        }
    }

    /// Starts one waiting job if any may start (preempting for it where allowed); false when
    /// nothing more can start now.
    fn start_one(&mut self, time_us: u64) -> bool {
        match self.share.clone() {
            Some(policy) => share_queue::start_one(&mut AtTime { plane: self, time_us, policy }),
            None => !self.queue.is_empty() && self.try_start(time_us, 0),
        }
    }

    /// When running job `id` ends at the latest: its remaining iterations at its SLO on its
    /// current estimate (`None`: it runs until cancelled).
    fn running_end(&self, now_us: u64, id: weave_core::JobId) -> Option<Micros> {
        let j = self.jobs.get(self.names.get(id)?)?;
        let remaining = j.iterations.map(|n| n.saturating_sub(j.completed_iterations));
        at_slo(j.estimate, j.slo, remaining).map(|d| Micros(now_us) + d)
    }

    /// How long waiting job `k` runs at most once started (`None`: until cancelled).
    fn waiting_duration(&self, k: usize) -> Option<Micros> {
        let q = &self.queue[k];
        let spec = q.submit.to_spec(weave_core::JobId(u32::MAX), Micros(q.submitted_us)).ok()?;
        let slo = q.submit.allowed_slowdown();
        let times = q.carried.as_ref().map_or_else(|| self.place_job(&spec, slo, &q.submit).times, |c| c.0);
        let remaining = q.submit.job.iterations.map(|n| n.saturating_sub(q.submit.server.resume_from.unwrap_or(0)));
        at_slo(times, slo, remaining)
    }

    /// Accounts tenants' use up to `time_us` (fair share with decay).
    pub(super) fn advance_usage_history(&mut self, time_us: u64) {
        if let Some(h) = self.share.as_ref().and_then(|p| p.half_life) {
            self.usage_history.advance_to(Micros(time_us), h);
        }
    }

    /// Tells the history the use from now on.
    pub(super) fn record_usage(&mut self) {
        if let Some(policy) = self.share.as_ref().filter(|p| p.half_life.is_some()) {
            let usage = self.share_usage(policy);
            self.usage_history.set_usage(&usage);
        }
    }

    /// The queue's order: by tenants' use right now, or by their recent use with decay.
    fn share_order(&self, policy: &SharePolicy, waiting: &[Waiting], usage: &Usage) -> Vec<usize> {
        match policy.half_life {
            Some(h) => policy.order_by(waiting, &usage.held, &self.usage_history.shares(policy, h)),
            None => policy.order(waiting, usage),
        }
    }

    /// Admits the waiting job at `k`; false (it stays) if admission finds no room.
    fn try_start(&mut self, time_us: u64, k: usize) -> bool {
        let q = self.queue[k].clone();
        if self.submit(time_us, &q.tenant, &q.submit, q.carried, None).is_err() {
            return false;
        }
        self.queue.remove(k);
        true
    }

    fn tenant_index(policy: &SharePolicy, tenant: &str) -> usize {
        policy.tenants.iter().position(|t| t.name == tenant).unwrap_or(0)
    }

    /// Quota in use per tenant.
    fn share_usage(&self, policy: &SharePolicy) -> Usage {
        policy.usage(&self.placer, |id| {
            let entry = self.names.get(id).and_then(|n| self.jobs.get(n));
            entry.map_or(0, |j| Self::tenant_index(policy, &j.tenant))
        })
    }

    /// The queue as the policy core sees it (same order as `self.queue`).
    fn waiting(&self, policy: &SharePolicy) -> Vec<Waiting> {
        self.queue
            .iter()
            .map(|q| {
                let (demand, env_cores) = demand(q).unwrap_or(([1.0, 1.0], 0.0));
                Waiting {
                    tenant: Self::tenant_index(policy, &q.tenant),
                    priority: priority(&q.submit),
                    arrival: q.arrival,
                    demand,
                    env_cores,
                    resumes: q.resumes,
                }
            })
            .collect()
    }

    /// Running jobs as preemption sees them. A preempted job resumes from its last completed
    /// iteration (the server's checkpoint, as after a node loss): what it loses is the
    /// iteration in progress, if it has started one.
    fn running_for_share(&self, time_us: u64, policy: &SharePolicy) -> Vec<Running> {
        self.jobs
            .values()
            .filter(|j| j.state == JobState::Running && j.decision.is_some())
            .map(|j| {
                let held = share::exclusive_nodes(&self.placer, j.id);
                let started = j.gate.mid_iteration();
                Running {
                    job: j.id,
                    tenant: Self::tenant_index(policy, &j.tenant),
                    priority: priority(&j.submit),
                    ran: Micros(time_us.saturating_sub(j.submitted_us)),
                    unsaved: started as u64,
                    held: held[0] + held[1],
                }
            })
            .collect()
    }

    /// Preempts what the policy picks for `w`, if together it frees enough; false otherwise.
    fn preempt_for(&mut self, time_us: u64, policy: &SharePolicy, w: Waiting, usage: &Usage, claim: Claim) -> bool {
        let running = self.running_for_share(time_us, policy);
        let Some(victims) = policy.preemption(&self.placer, w, &running, usage, claim) else { return false };
        for v in victims {
            let Some(name) = self.names.get(v).cloned() else { continue };
            let own = self.jobs[&name].tenant == policy.tenants[w.tenant].name;
            let reason = if own {
                "preempted by a higher-priority job of its tenant"
            } else {
                "preempted: another tenant reclaimed the capacity it borrowed"
            };
            self.preempt(time_us, &name, reason);
        }
        true
    }

    /// Ends job `name`'s admission and queues it again, to resume from its last completed
    /// iteration with what it measured of itself (its place by arrival is kept).
    fn preempt(&mut self, time_us: u64, name: &str, reason: &str) {
        let j = &self.jobs[name];
        let (resubmit, carried) = j.resubmission();
        let tenant = j.tenant.clone();
        self.end(time_us, name, JobState::Preempted, Some(reason.into()));
        let resume = resubmit.server.resume_from.unwrap_or(0);
        self.enqueue(time_us, &tenant, &resubmit, carried, true, format!("{reason}; resumes from iteration {resume}"));
    }

    /// Takes a waiting job out of the queue (cancelled); false if it was not waiting.
    pub(super) fn dequeue(&mut self, time_us: u64, name: &str) -> bool {
        let Some((k, _)) = self.queued(name) else { return false };
        // The event first, while the job still names its tenant.
        self.event(ev(time_us, name, "cancelled", None, None, None));
        self.queue.remove(k);
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
        let first = q.submit.server.resume_from.unwrap_or(0);
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

/// The plane as the shared queue pass drives it, at one moment.
struct AtTime<'p> {
    plane: &'p mut Plane,
    time_us: u64,
    policy: SharePolicy,
}

impl QueueDriver for AtTime<'_> {
    fn policy(&self) -> &SharePolicy {
        &self.policy
    }

    fn usage(&self) -> Usage {
        self.plane.share_usage(&self.policy)
    }

    fn waiting(&self) -> Vec<Waiting> {
        self.plane.waiting(&self.policy)
    }

    fn order(&self, waiting: &[Waiting], usage: &Usage) -> Vec<usize> {
        self.plane.share_order(&self.policy, waiting, usage)
    }

    fn try_start(&mut self, k: usize) -> bool {
        self.plane.try_start(self.time_us, k)
    }

    fn preempt_for(&mut self, w: Waiting, usage: &Usage, claim: Claim) -> bool {
        self.plane.preempt_for(self.time_us, &self.policy, w, usage, claim)
    }

    fn placer(&self) -> &weave_place::Placer {
        &self.plane.placer
    }

    fn now(&self) -> Micros {
        Micros(self.time_us)
    }

    fn running_end(&self, job: weave_core::JobId) -> Option<Micros> {
        self.plane.running_end(self.time_us, job)
    }

    fn duration(&self, k: usize) -> Option<Micros> {
        self.plane.waiting_duration(k)
    }

    fn blocked(&mut self, k: usize, why: Blocked) {
        self.plane.queue[k].reason = match why {
            Blocked::OverQuota => "its tenant's quota is in use",
            Blocked::WouldDelayHead => "waiting for free nodes (it would delay the jobs ahead)",
            Blocked::NoRoom => "waiting for free nodes",
            Blocked::BehindHead => "waiting behind jobs that wait for free nodes",
        }
        .into();
    }
}
