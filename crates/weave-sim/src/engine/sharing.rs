//! Sharing fixed pools between tenants inside the replay: the queue in the policy core's
//! order, quotas, preemption of borrowed or outranked capacity (the victim loses its work since
//! its last checkpoint and waits again, or with a grace period saves one at its iteration's
//! end first), and EASY backfill behind a blocked head.

use super::{Engine, What, CLASS_OTHER};
use crate::tenancy::{BackfillReport, Ledgers};
use weave_core::{JobId, Micros};
use weave_place::queue::QueueDriver;
use weave_place::share::{Claim, Nodes, Running, SharePolicy, Usage, Waiting};

/// Sharing state: the policy, each job's tenant, the ledgers.
pub(super) struct Sharing {
    pub policy: SharePolicy,
    pub tenant_of: Vec<usize>,
    pub ledgers: Ledgers,
    /// Inside `schedule`: departures it causes do not start another round.
    pub busy: bool,
    /// Recent use, for fair share with decay.
    pub history: weave_place::share::UsageHistory,
    /// Blocked jobs a backfill went past: the start projected for each at the last one.
    pub promised: std::collections::BTreeMap<usize, Micros>,
    pub backfill: BackfillReport,
    /// `high` jobs a queue pass left waiting past their bound although a preemption would have
    /// started them.
    pub passed_over: std::collections::BTreeSet<usize>,
    /// Training GPU-µs charged busy for work that preemptions threw away.
    pub wasted_training: u128,
    /// Victims of graceful preemption that have not given their nodes up yet.
    pub draining: std::collections::BTreeMap<usize, Drain>,
}

/// A victim of graceful preemption, between being told to yield and giving its nodes up.
#[derive(Clone, Copy, Debug)]
pub(super) struct Drain {
    /// The waiting job it yields to.
    claimant: usize,
    /// For a higher-priority job of its own tenant (else to reclaim borrowed capacity).
    outranked: bool,
    stage: Stage,
    /// When it stops if still running, or when its checkpoint is saved.
    by: Micros,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Finishing its in-flight iteration.
    Running,
    /// It finished that iteration, left its group and saves a checkpoint there.
    Saving,
    /// It works no more; it holds its nodes until its claimant's other victims have yielded
    /// too, so that they all go to the claimant at once.
    Yielded,
}

impl Sharing {
    /// Jobs map to tenants by name; a job naming no known tenant belongs to the first.
    pub fn new(policy: SharePolicy, jobs: &[crate::SimJob]) -> Self {
        let tenant_of = jobs
            .iter()
            .map(|j| {
                let name = j.spec.tenant.as_deref().unwrap_or("default");
                policy.tenants.iter().position(|t| t.name == name).unwrap_or(0)
            })
            .collect();
        let ledgers = Ledgers::new(policy.tenants.len());
        Sharing {
            policy,
            tenant_of,
            ledgers,
            busy: false,
            history: Default::default(),
            promised: Default::default(),
            backfill: Default::default(),
            passed_over: Default::default(),
            wasted_training: 0,
            draining: Default::default(),
        }
    }
}

impl Engine<'_> {
    pub(super) fn sharing(&self) -> bool {
        self.share.is_some()
    }

    /// Waiting job `i` as the policy core sees it (its arrival is its index).
    fn as_waiting(&self, i: usize) -> Waiting {
        let share = self.share.as_ref().expect("sharing");
        Waiting {
            tenant: share.tenant_of[i],
            priority: self.jobs[i].spec.priority,
            arrival: i as u64,
            demand: self.demand(i),
            env_cores: self.jobs[i]
                .spec
                .agentic
                .as_ref()
                .map_or(0.0, |a| a.cores_held(self.jobs[i].spec.batch, self.jobs[i].spec.staleness)),
            resumes: self.states[i].is_some(),
        }
    }

    fn demand(&self, i: usize) -> Nodes {
        let s = &self.jobs[i].spec;
        [s.rollout_nodes as f64, s.train_nodes as f64]
    }

    /// Advances the tenants' ledgers to now (quota in use may just have changed).
    pub(super) fn share_advance(&mut self) {
        if !self.sharing() {
            return;
        }
        let full = self.usage();
        let usage = full.held.clone();
        let share = self.share.as_ref().expect("sharing");
        let mut entitled = vec![false; share.policy.tenants.len()];
        for w in self.waiting() {
            entitled[w.tenant] |= share.policy.entitled(&w, &usage);
        }
        let share = self.share.as_mut().expect("sharing");
        if let Some(h) = share.policy.half_life {
            share.history.advance_to(self.now, h);
            share.history.set_usage(&full);
        }
        share.ledgers.advance(self.now, usage, entitled, &share.policy);
    }

    pub(super) fn share_first_admission(&mut self, i: usize, delay: Micros) {
        if let Some(share) = self.share.as_mut() {
            let t = share.tenant_of[i];
            share.ledgers.tenants[t].delays.push(delay);
            share.ledgers.tenants[t].jobs += 1;
        }
    }

    /// Starts what the policy lets start, in its order; preempts for a blocked head where
    /// allowed; backfills behind it.
    pub(super) fn schedule_queue(&mut self) {
        if self.share.as_ref().is_none_or(|s| s.busy) {
            return;
        }
        self.share.as_mut().expect("sharing").busy = true;
        while weave_place::queue::start_one(self) {}
        self.share.as_mut().expect("sharing").busy = false;
        self.note_high_passed_over();
        self.share_advance();
    }

    /// After a pass: a `high` job waiting for its first start past its bound, not already
    /// waiting for victims to yield to it, for which preemptible capacity alone (victims'
    /// nodes, not free nodes a blocked job may be waiting for) would now be enough, was passed
    /// over (the target says it should have run).
    fn note_high_passed_over(&mut self) {
        let share = self.share.as_ref().expect("sharing");
        if share.policy.mode < weave_place::share::ShareMode::Preemption {
            return;
        }
        let every = share.policy.checkpoint_every;
        let overdue: Vec<(usize, Waiting)> = self
            .waiting
            .iter()
            .filter(|&&i| {
                let j = &self.jobs[i];
                j.spec.priority == weave_core::Priority::High
                    && self.states[i].is_none()
                    && !share.passed_over.contains(&i)
                    && !self.awaits_victims(i)
                    && self.now > j.spec.arrival + j.high_wait_bound(every)
            })
            .map(|&i| (i, self.as_waiting(i)))
            .collect();
        if overdue.is_empty() {
            return;
        }
        let (usage, running) = (self.usage(), self.running_for_share());
        let passed: Vec<usize> = overdue
            .into_iter()
            .filter(|(_, w)| share.policy.preemption(&self.placer, *w, &running, &usage, Claim::BehindHead).is_some())
            .map(|(i, _)| i)
            .collect();
        self.share.as_mut().expect("sharing").passed_over.extend(passed);
    }

    /// Running jobs as preemption sees them.
    fn running_for_share(&self) -> Vec<Running> {
        let share = self.share.as_ref().expect("sharing");
        (0..self.jobs.len())
            .filter_map(|v| {
                let s = self.states[v].as_ref()?;
                s.placed?;
                if share.draining.contains_key(&v) {
                    return None;
                }
                let job = JobId(v as u32);
                let held = weave_place::share::exclusive_nodes(&self.placer, job);
                Some(Running {
                    job,
                    tenant: share.tenant_of[v],
                    priority: self.jobs[v].spec.priority,
                    ran: self.now.saturating_sub(s.admitted_at),
                    unsaved: s.done - s.checkpoint,
                    held: held[0] + held[1],
                })
            })
            .collect()
    }

    /// How long job `i` may run at most from a start now: its remaining iterations at its SLO
    /// (admission keeps it within), plus a cold start.
    fn conservative_duration(&self, i: usize) -> Micros {
        let j = &self.jobs[i];
        let done = self.states[i].as_ref().map_or(0, |s| s.done);
        let per = (j.disagg.solo() + j.sync).scale(j.slo);
        Micros(per.0.saturating_mul(j.iterations.saturating_sub(done))) + j.cold_start
    }

    /// Takes job `v` off its nodes: its work since the last checkpoint is lost and it waits
    /// again in its original queue position.
    fn preempt(&mut self, v: usize, outranked: bool) {
        let ran = self.states[v].as_ref().map_or(Micros::ZERO, |s| self.now.saturating_sub(s.admitted_at));
        self.unplace(v);
        let s = self.states[v].as_mut().expect("running job");
        if outranked {
            s.preempted.1 += 1;
        } else {
            s.preempted.0 += 1;
        }
        let wasted = std::mem::take(&mut s.train_busy_unsaved);
        let lost = s.done - s.checkpoint;
        s.done = s.checkpoint;
        (s.solo_sum, s.within_slo, s.solo_pipeline) = s.at_checkpoint.clone();
        self.metrics.events.lost_iterations += lost;
        self.metrics.events.preemptions += 1;
        let share = self.share.as_mut().expect("sharing");
        share.wasted_training += wasted;
        let l = &mut share.ledgers.tenants[share.tenant_of[v]];
        l.preemptions += 1;
        l.lost_iterations += lost;
        l.shortest_preempted_run = Some(l.shortest_preempted_run.map_or(ran, |r| r.min(ran)));
        self.waiting.push_back(v);
    }
}

impl QueueDriver for Engine<'_> {
    fn policy(&self) -> &SharePolicy {
        &self.share.as_ref().expect("sharing").policy
    }

    fn usage(&self) -> Usage {
        let share = self.share.as_ref().expect("sharing");
        share.policy.usage(&self.placer, |j| share.tenant_of[j.0 as usize])
    }

    /// The queue as the policy core sees it (same order as `self.waiting`).
    fn waiting(&self) -> Vec<Waiting> {
        self.waiting.iter().map(|&i| self.as_waiting(i)).collect()
    }

    fn order(&self, waiting: &[Waiting], usage: &Usage) -> Vec<usize> {
        let share = self.share.as_ref().expect("sharing");
        match share.policy.half_life {
            Some(h) => {
                let mut history = share.history.clone();
                history.advance_to(self.now, h);
                share.policy.order_by(waiting, &usage.held, &history.shares(&share.policy, h))
            }
            None => share.policy.order(waiting, usage),
        }
    }

    fn try_start(&mut self, k: usize) -> bool {
        let i = self.waiting[k];
        if self.admit(i).is_err() {
            return false;
        }
        self.waiting.remove(k);
        let (now, share) = (self.now, self.share.as_mut().expect("sharing"));
        if let Some(promised) = share.promised.remove(&i) {
            share.backfill.started(now, promised);
        }
        // It started some other way: its victims still running go on; the others give their
        // nodes up as planned.
        share.draining.retain(|_, d| d.claimant != i || d.stage != Stage::Running);
        if self.awaits_victims(i) {
            self.push(now, CLASS_OTHER, i, What::ClaimCheck, 0);
        }
        true
    }

    /// Waiting arrivals are job indices.
    fn backfilled(&mut self, promised: &[(u64, Micros)]) {
        let share = self.share.as_mut().expect("sharing");
        share.backfill.backfilled += 1;
        for &(i, start) in promised {
            share.promised.insert(i as usize, start);
        }
    }

    fn placer(&self) -> &weave_place::Placer {
        &self.placer
    }

    fn now(&self) -> Micros {
        self.now
    }

    /// Its conservative end (see [`Engine::conservative_duration`]).
    fn running_end(&self, j: JobId) -> Option<Micros> {
        let i = j.0 as usize;
        if let Some(d) = self.drain(i) {
            return Some(match d.stage {
                Stage::Running => d.by + self.jobs[i].checkpoint_save,
                Stage::Saving | Stage::Yielded => d.by,
            });
        }
        self.states[i].as_ref().is_some_and(|s| s.placed.is_some()).then(|| self.now + self.conservative_duration(i))
    }

    fn duration(&self, k: usize) -> Option<Micros> {
        Some(self.conservative_duration(self.waiting[k]))
    }

    /// Preempts victims for waiting job `w` if together they free enough nodes for it; with a
    /// grace period they are told to yield instead and `w` starts once they have (false: nothing
    /// is free yet). A job already waiting for its victims asks for no more.
    fn preempt_for(&mut self, w: Waiting, usage: &Usage, claim: Claim) -> bool {
        let claimant = w.arrival as usize;
        if self.awaits_victims(claimant) {
            return false;
        }
        let share = self.share.as_ref().expect("sharing");
        let running = self.running_for_share();
        let Some(chosen) = share.policy.preemption(&self.placer, w, &running, usage, claim) else { return false };
        let grace = share.policy.grace;
        for v in chosen {
            let v = v.0 as usize;
            let outranked = self.share.as_ref().expect("sharing").tenant_of[v] == w.tenant;
            if grace == Micros::ZERO {
                self.preempt(v, outranked);
            } else {
                self.tell_to_yield(v, claimant, outranked, grace);
            }
        }
        grace == Micros::ZERO
    }
}

/// Graceful preemption: a victim finishes its in-flight iteration, saves a checkpoint there
/// and then gives its nodes up; one still running when its grace period ends stops as without.
/// A claimant's victims give their nodes up together, once the last has yielded, so that what
/// they free goes to the claimant and not, piecemeal, to whoever the queue meets first.
impl Engine<'_> {
    /// Victim `v` is told to yield within `grace`. Between iterations it saves at once (or,
    /// with nothing unsaved, just stops); in an iteration that cannot end within the grace
    /// even at its own pace, it stops at once (it would lose the same work at the deadline,
    /// and hold its nodes until then); otherwise it finishes its iteration.
    fn tell_to_yield(&mut self, v: usize, claimant: usize, outranked: bool, grace: Micros) {
        let s = self.states[v].as_ref().expect("a victim runs");
        let between = s.rollout_started <= s.last_train_end;
        let by = match (between, s.done > s.checkpoint) {
            (true, false) => self.now,
            (false, _) if self.earliest_iteration_end(v) > self.now + grace => self.now,
            _ => self.now + grace,
        };
        let drain = Drain { claimant, outranked, stage: Stage::Running, by };
        self.share.as_mut().expect("sharing").draining.insert(v, drain);
        if between && by > self.now {
            self.save_and_yield(v);
        } else {
            self.push(by, CLASS_OTHER, v, What::GraceOver, 0);
        }
    }

    /// The earliest its in-flight iteration can end: its training's end if that started, else
    /// its rollout's end (or now) and then its training at its own pace on its group's
    /// training nodes, with no wait for them.
    fn earliest_iteration_end(&self, v: usize) -> Micros {
        let s = self.states[v].as_ref().expect("a victim runs");
        let Some(p) = s.placed else { return self.now };
        let train = self.training_time(v, p, s.done);
        if s.train_started > s.rollout_started {
            return s.train_started + train;
        }
        (s.rollout_started + s.rollout_plain).max(self.now) + train
    }

    /// Whether waiting job `c` has victims that have not given their nodes up yet.
    fn awaits_victims(&self, c: usize) -> bool {
        self.share.as_ref().is_some_and(|s| s.draining.values().any(|d| d.claimant == c))
    }

    fn drain(&self, v: usize) -> Option<Drain> {
        self.share.as_ref()?.draining.get(&v).copied()
    }

    /// Whether job `i` stopped working to yield its nodes (its phase events are stale).
    pub(super) fn left_group(&self, i: usize) -> bool {
        self.drain(i).is_some_and(|d| d.stage != Stage::Running)
    }

    fn set_stage(&mut self, v: usize, stage: Stage, by: Micros) {
        if let Some(d) = self.share.as_mut().and_then(|s| s.draining.get_mut(&v)) {
            (d.stage, d.by) = (stage, by);
        }
    }

    /// Job `i` stops working: it leaves its group's dispatcher (it keeps its nodes).
    fn leave_group(&mut self, i: usize) {
        if let Some(p) = self.states[i].as_ref().and_then(|s| s.placed) {
            self.leave_dispatcher(p.group, JobId(i as u32));
        }
    }

    /// Job `i`, told to yield, just finished an iteration that is not its last: it saves a
    /// checkpoint there and leaves its group (it starts no more work). True if so.
    pub(super) fn yield_at_iteration_end(&mut self, i: usize) -> bool {
        let Some(d) = self.drain(i) else { return false };
        let s = self.states[i].as_ref().expect("running job");
        if d.stage != Stage::Running || (!self.cfg.fixed_lifetimes && s.done >= self.jobs[i].iterations) {
            return false;
        }
        self.save_and_yield(i);
        true
    }

    /// Job `i` saves a checkpoint at its last finished iteration and leaves its group; it gives
    /// its nodes up once saved.
    fn save_and_yield(&mut self, i: usize) {
        self.states[i].as_mut().expect("running job").save_checkpoint();
        let by = self.now + self.jobs[i].checkpoint_save;
        self.set_stage(i, Stage::Saving, by);
        self.leave_group(i);
        self.push(by, CLASS_OTHER, i, What::Yield, 0);
    }

    /// The grace period of victim `v` is over: if it is still running, it stops now (its work
    /// since its last checkpoint is lost).
    pub(super) fn grace_over(&mut self, v: usize) {
        if let Some(d) = self.drain(v).filter(|d| d.stage == Stage::Running && d.by == self.now) {
            self.leave_group(v);
            self.set_stage(v, Stage::Yielded, self.now);
            self.claim_check(d.claimant);
        }
    }

    /// Victim `v` saved its checkpoint.
    pub(super) fn checkpoint_saved(&mut self, v: usize) {
        if let Some(d) = self.drain(v).filter(|d| d.stage == Stage::Saving && d.by == self.now) {
            self.metrics.events.preemptions_saved += 1;
            self.set_stage(v, Stage::Yielded, self.now);
            self.claim_check(d.claimant);
        }
    }

    /// Once every victim of claimant `c` has yielded, they are taken off their nodes, the
    /// claimant starts first on what they freed (if its quota lets it), then the queue goes on.
    pub(super) fn claim_check(&mut self, c: usize) {
        let share = self.share.as_mut().expect("sharing");
        let victims: Vec<(usize, Drain)> =
            share.draining.iter().filter(|(_, d)| d.claimant == c).map(|(&v, &d)| (v, d)).collect();
        if victims.iter().any(|(_, d)| d.stage != Stage::Yielded) {
            return;
        }
        let busy = std::mem::replace(&mut share.busy, true);
        for (v, d) in victims {
            self.share.as_mut().expect("sharing").draining.remove(&v);
            self.preempt(v, d.outranked);
        }
        self.share.as_mut().expect("sharing").busy = busy;
        self.start_claimant(c);
        self.schedule_queue();
    }

    fn start_claimant(&mut self, c: usize) {
        let Some(k) = self.waiting.iter().position(|&w| w == c) else { return };
        let w = self.as_waiting(c);
        if self.policy().may_start_waiting(&w, &self.usage()) {
            self.try_start(k);
        }
    }

    /// Job `i` left its nodes some other way (completed, failed, moved): it yields to nobody,
    /// and its claimant may now have all it waits for (looked at once this event is handled).
    pub(super) fn forget_drain(&mut self, i: usize) {
        let Some(d) = self.share.as_mut().and_then(|s| s.draining.remove(&i)) else { return };
        self.push(self.now, CLASS_OTHER, d.claimant, What::ClaimCheck, 0);
    }
}
