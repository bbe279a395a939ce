//! The discrete-event replay of group-based policies: arrivals go through the real placer,
//! each group runs the real dispatcher, and phase durations come from each job's own runtime
//! stream while admission uses the conservative estimate. Optionally jobs are re-estimated
//! from what they measure, re-grouped when their group violates an SLO, and fail and come
//! back from checkpoints.

use crate::dynamics::{exp_wait, Regroup};
use crate::metrics::Metrics;
use crate::workload::{draw_iteration, SimJob};
use crate::{CapacityMode, EventRecord, SimConfig};
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use weave_core::{ClusterConfig, EventQueue, GroupId, JobId, Micros, PhaseTimes, Pool};
use weave_dispatch::{Action, Dispatcher, Input, Phase};
use weave_model::{named_stream, Stream};
use weave_place::consolidate;
use weave_place::{PlacePolicy, Placer, PlacerConfig};

mod admission;
mod consolidation;
mod failures;
mod job_run;
mod lending;
mod long_tail;
mod outcome;
mod packs;
mod sharing;
use job_run::JobRun;
mod spot;

/// An event. Kept small: the heap moves these around a lot.
#[derive(Clone, Copy)]
struct Done {
    group: GroupId,
    job: JobId,
    what: What,
    iteration: u64,
    /// The job's placement epoch when scheduled: events of an older placement are dropped.
    epoch: u32,
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    /// The long-tail migration trigger of a rollout: migrate if another job waits for the
    /// nodes, else let the rollout finish where it is.
    MigrationPoint,
    /// Long-tail migration hands the job's rollout nodes on.
    Release,
    Switch(Phase),
    Phase(Phase),
    Sync,
    Readmit,
    JobFailure,
    NodeFailure,
    RegroupTick,
    ConsolidateTick,
    /// A group was left with one member: consolidation looks at it once the current event
    /// is fully handled (never in the middle of a dispatcher's action batch).
    ConsolidateGroup,
    /// Fixed lifetimes: the job's trace lifetime is over and it leaves.
    LifetimeOver,
    /// Sharing: the queue is looked at again (preemption waits out minimum run times).
    ShareTick,
    /// Graceful preemption: the victim's grace period is over.
    GraceOver,
    /// Graceful preemption: the victim's checkpoint is saved.
    Yield,
    /// Graceful preemption: whether every victim of this claimant has yielded.
    ClaimCheck,
    /// A spot rollout node is taken (drawn from the rate).
    SpotPreemption,
    /// The preemption trace's entry number `iteration` is due.
    SpotTrace,
}

impl Done {
    fn input(self) -> Option<Input> {
        let (job, iteration) = (self.job, self.iteration);
        match self.what {
            What::Switch(phase) => Some(Input::SwitchFinished { job, phase, iteration }),
            What::Phase(phase) => Some(Input::PhaseFinished { job, phase, iteration }),
            What::Sync => Some(Input::SyncFinished { job, iteration }),
            What::Release => Some(Input::RolloutReleased { job, iteration }),
            _ => None,
        }
    }
}

/// Event classes for same-instant order: completions first, then the rest.
const CLASS_OTHER: u8 = 5;
/// Measured iterations kept for re-estimation.
const MEASURED_KEPT: usize = 9;
/// Long-tail migration is used only while the job's slowdown with it stays below this share
/// of its SLO.
const MIGRATION_SLO_MARGIN: f64 = 0.97;
/// Sharing: how often the queue is looked at besides arrivals and departures.
const SHARE_TICK: Micros = Micros(5 * 60 * 1_000_000);
/// A group counts as violating when a member's predicted iteration exceeds its SLO by this.
const VIOLATION_MARGIN: f64 = 1.02;

#[derive(Clone, Copy)]
struct Placed {
    group: GroupId,
    block: u32,
    block_width: u32,
    pool_width: u32,
    /// Both phases on the training nodes with the co-located profile.
    colocated: bool,
}

pub struct Engine<'a> {
    /// The jobs in arrival order (a pack that a job joins is replaced by what it becomes).
    jobs: Cow<'a, [SimJob]>,
    cluster: &'a ClusterConfig,
    cfg: &'a SimConfig,
    resident: bool,
    migration: bool,
    /// Per rollout block: until when migrated stragglers occupy part of it, and what share.
    stragglers: BTreeMap<(GroupId, u32), (Micros, f64)>,
    states: Vec<Option<JobRun>>,
    placer: Placer,
    dispatchers: BTreeMap<GroupId, Dispatcher>,
    queue: EventQueue<Done>,
    /// Jobs are in arrival order: arrivals are read from here rather than queued, so the
    /// event heap holds only what is in flight.
    next_arrival: usize,
    waiting: VecDeque<usize>,
    running: usize,
    /// Failed jobs waiting out their restart delay.
    pending_readmits: usize,
    node_rng: Stream,
    /// What admission knows about each job's variation.
    variations: Vec<weave_place::Variation>,
    /// Inside a consolidation move: departures do not start further consolidation.
    consolidating: bool,
    /// Consolidation moves so far, against the churn limits.
    churn: consolidate::Churn,
    /// Consolidation moves decided while their job held work, due at its iteration's end.
    deferred: std::collections::BTreeMap<JobId, consolidate::Deferred>,
    /// Tenants sharing fixed pools (quotas, priorities, preemption, backfill); `None`: one queue.
    share: Option<sharing::Sharing>,
    /// The preemptible rollout tier, when the cluster has one.
    spot: Option<spot::Spot>,
    /// Lending idle rollout blocks across groups, when on.
    lending: Option<lending::Lending>,
    /// LoRA jobs that arrive may join running packs of their base.
    growing_packs: bool,
    pub metrics: Metrics,
    pub events: Vec<EventRecord>,
    actions: Vec<Action>,
    now: Micros,
}

impl<'a> Engine<'a> {
    pub fn new(
        jobs: &'a [SimJob],
        cluster: &'a ClusterConfig,
        cfg: &'a SimConfig,
        placement: PlacePolicy,
        scaling: bool,
        resident: bool,
    ) -> Self {
        let mut placer_cfg = PlacerConfig::for_cluster(cluster, placement, scaling, resident, cfg.seed);
        placer_cfg.capacity = match cfg.capacity {
            CapacityMode::Elastic => None,
            CapacityMode::Fixed => Some((cluster.rollout.nodes, cluster.training.nodes)),
        };
        placer_cfg.skip_saturated = cfg.skip_saturated;
        placer_cfg.residency.max_members = cfg.max_group_size;
        Engine {
            jobs: Cow::Borrowed(jobs),
            cluster,
            cfg,
            resident,
            migration: false,
            stragglers: BTreeMap::new(),
            states: jobs.iter().map(|_| None).collect(),
            placer: Placer::new(placer_cfg),
            dispatchers: BTreeMap::new(),
            queue: EventQueue::new(),
            next_arrival: 0,
            waiting: VecDeque::new(),
            running: 0,
            pending_readmits: 0,
            node_rng: named_stream(cfg.seed, "node-failure", 0),
            variations: jobs
                .iter()
                .map(|j| {
                    crate::workload::admission_variation(
                        j,
                        &cfg.runtime,
                        cfg.slo_epsilon,
                        cfg.seed,
                        cfg.admission_samples,
                    )
                })
                .collect(),
            consolidating: false,
            churn: consolidate::Churn::new(cfg.consolidation.churn),
            deferred: Default::default(),
            share: cfg.share.clone().map(|p| sharing::Sharing::new(p, jobs)),
            spot: None,
            lending: None,
            growing_packs: false,
            metrics: Metrics::default(),
            events: Vec::new(),
            actions: Vec::new(),
            now: Micros::ZERO,
        }
    }

    /// Turns long-tail migration on (shared rollout blocks only).
    pub fn with_migration(mut self, on: bool) -> Self {
        self.migration = on;
        self
    }

    /// Runs rollouts on the cluster's spot tier, if it has one: chosen per job and recovered
    /// the cheaper way (`weave`), or every job on it and restarted (the baselines).
    pub fn with_spot(mut self, weave: bool) -> Self {
        self.spot = self.cluster.rollout_spot.as_ref().map(|c| spot::Spot::new(c, self.cluster, self.cfg.seed, weave));
        self
    }

    /// Lets arriving LoRA jobs join running packs of their base (see `packs`).
    pub fn with_growing_packs(mut self, on: bool) -> Self {
        self.growing_packs = on;
        self.metrics.pack_joins = on.then_some(0);
        self
    }

    /// Lets the placer choose co-located mode and turns consolidation on.
    pub fn with_colocation(mut self, on: bool) -> Self {
        let mut cfg = self.placer.config().clone();
        cfg.colocate = on;
        self.placer = Placer::new(cfg);
        self
    }

    fn gpus(&self) -> (u32, u32) {
        (self.cluster.rollout.gpus_per_node, self.cluster.training.gpus_per_node)
    }

    fn push(&mut self, at: Micros, class: u8, job: usize, what: What, iteration: u64) {
        let (group, epoch) = match self.states.get(job).and_then(|s| s.as_ref()) {
            Some(s) => (s.placed.map(|p| p.group).unwrap_or(GroupId(u32::MAX)), s.epoch),
            None => (GroupId(u32::MAX), 0),
        };
        self.queue.push(at, class, Done { group, job: JobId(job as u32), what, iteration, epoch });
    }

    /// Runs to the end; calls `progress(done, total)` now and then.
    pub fn run(&mut self, progress: &mut dyn FnMut(usize, usize)) {
        let mut finished = 0usize;
        if let Regroup::Periodic { interval, .. } = self.cfg.regroup {
            self.push(interval, CLASS_OTHER, 0, What::RegroupTick, 0);
        }
        if let Some(f) = self.cfg.failures {
            let wait = exp_wait(f.node_rate_per_hour, &mut self.node_rng);
            self.push(wait, CLASS_OTHER, 0, What::NodeFailure, 0);
        }
        self.start_spot();
        if self.colocation() {
            self.push(self.cfg.consolidation.interval, CLASS_OTHER, 0, What::ConsolidateTick, 0);
        }
        if self.sharing() {
            self.push(SHARE_TICK, CLASS_OTHER, 0, What::ShareTick, 0);
        }
        loop {
            // Same-instant completions go before arrivals, so freed resources are reused.
            let arrival = self.jobs.get(self.next_arrival).map(|j| j.spec.arrival);
            let take_arrival = match (arrival, self.queue.peek_time()) {
                (Some(a), Some(q)) => a < q,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_arrival {
                let i = self.next_arrival;
                self.next_arrival += 1;
                self.now = self.jobs[i].spec.arrival;
                self.note_spot_arrival(i);
                self.admit_or_wait(i);
                continue;
            }
            let (t, ev) = self.queue.pop().expect("peeked");
            self.now = t;
            if self.handle(ev) {
                finished += 1;
                if finished.is_multiple_of(256) {
                    progress(finished, self.jobs.len());
                }
            }
            // Background processes (ticks, node failures) stop once nothing is left to run.
            if !self.work_left() {
                break;
            }
        }
        // Jobs still waiting can never run (fixed pools too small for them).
        self.metrics.rejected += self.waiting.len() as u64;
        self.record_nodes();
        if let Some(share) = &self.share {
            self.metrics.tenants = share.ledgers.report(&share.policy, self.now);
            self.metrics.backfill =
                (share.policy.mode >= weave_place::share::ShareMode::Backfill).then_some(share.backfill);
            self.metrics.preempted_training_gpu_hours = Some(share.wasted_training as f64 / 3.6e9);
        }
        self.metrics.spot = self.spot.as_ref().map(|s| s.counts);
        self.metrics.lending = self.lending.as_ref().map(|l| l.counts);
        self.metrics.end = self.metrics.end.max(self.now);
        progress(self.jobs.len(), self.jobs.len());
    }

    /// Whether any job is running, restarting or still to arrive. Jobs that only wait do not
    /// count: with nothing running the pools are empty, and whatever the pass after the last
    /// departure left waiting can never fit (it would otherwise tick forever).
    fn work_left(&self) -> bool {
        self.running > 0 || self.pending_readmits > 0 || self.next_arrival < self.jobs.len()
    }

    /// Handles one event; true if a job completed.
    fn handle(&mut self, ev: Done) -> bool {
        let i = ev.job.0 as usize;
        match ev.what {
            What::RegroupTick => {
                self.periodic_regroup();
                if let Regroup::Periodic { interval, .. } = self.cfg.regroup {
                    if self.work_left() {
                        self.push(self.now + interval, CLASS_OTHER, 0, What::RegroupTick, 0);
                    }
                }
                false
            }
            What::ConsolidateTick => {
                consolidate::periodic_pass(self);
                if self.work_left() {
                    self.push(self.now + self.cfg.consolidation.interval, CLASS_OTHER, 0, What::ConsolidateTick, 0);
                }
                false
            }
            What::ConsolidateGroup => {
                consolidate::lone_group(self, ev.group);
                false
            }
            What::NodeFailure => {
                self.node_failure();
                if let Some(f) = self.cfg.failures {
                    let (r, t) = self.placer.nodes_in_use();
                    let nodes = (r + t).max(1) as f64;
                    let wait = exp_wait(f.node_rate_per_hour * nodes, &mut self.node_rng);
                    if self.work_left() {
                        self.push(self.now + wait, CLASS_OTHER, 0, What::NodeFailure, 0);
                    }
                }
                false
            }
            What::Readmit => {
                self.pending_readmits -= 1;
                // A job whose fixed lifetime ended meanwhile is gone.
                if self.states[i].is_some() {
                    self.admit_or_wait(i);
                }
                false
            }
            What::LifetimeOver => self.lifetime_over(i),
            What::ShareTick => {
                self.schedule_queue();
                if self.work_left() {
                    self.push(self.now + SHARE_TICK, CLASS_OTHER, 0, What::ShareTick, 0);
                }
                false
            }
            What::JobFailure => {
                if self.current(i, ev) {
                    self.fail(i);
                }
                false
            }
            What::GraceOver => {
                if self.current(i, ev) {
                    self.grace_over(i);
                }
                false
            }
            What::Yield => {
                if self.current(i, ev) {
                    self.checkpoint_saved(i);
                }
                false
            }
            What::ClaimCheck => {
                self.claim_check(i);
                false
            }
            What::MigrationPoint => {
                if self.current(i, ev) && !self.left_group(i) && !self.owes_spot_delay(i, ev.what, ev.iteration) {
                    self.migration_point(i, ev.iteration);
                }
                false
            }
            What::SpotPreemption => {
                self.spot_preemption();
                false
            }
            What::SpotTrace => {
                self.spot_trace(ev.iteration);
                false
            }
            _ => {
                if !self.current(i, ev) || self.left_group(i) {
                    return false;
                }
                if ev.what == What::Phase(Phase::Rollout) {
                    if self.owes_spot_delay(i, ev.what, ev.iteration) {
                        return false;
                    }
                    self.states[i].as_mut().expect("current").rolling = false;
                    self.return_loans(i);
                }
                let input = ev.input().expect("dispatcher event");
                self.dispatch(ev.group, input)
            }
        }
    }

    /// Co-located mode and consolidation (full Weave): the placer's setting.
    fn colocation(&self) -> bool {
        self.placer.config().colocate
    }

    /// Whether `g` is a disaggregated group with a single member.
    fn lone(&self, g: GroupId) -> bool {
        self.placer.group(g).is_some_and(|grp| grp.is_lone())
    }

    /// Job `i`'s training of `iteration` on its group's training nodes: its own data
    /// parallelism scaled to the group's pool.
    fn training_time(&self, i: usize, placed: Placed, iteration: u64) -> Micros {
        let s = self.states[i].as_ref().expect("running job");
        let (disagg, colo) = s.drawn(iteration, &self.jobs[i]);
        let train = if placed.colocated { colo.train } else { disagg.train };
        Micros(train.0 * self.jobs[i].spec.train_nodes as u64 / placed.pool_width.max(1) as u64)
    }

    /// Charges job `i`'s work on the training pool as busy, and keeps it as unsaved until the
    /// job's next checkpoint (a preemption throws it away).
    fn charge_training(&mut self, i: usize, g: GroupId, gpus: u32, t: Micros) {
        if let Some(s) = self.states[i].as_mut() {
            s.train_busy_unsaved += gpus as u128 * t.0 as u128;
        }
        self.charge_busy(g, Pool::Training, gpus, t);
    }

    fn charge_busy(&mut self, g: GroupId, pool: Pool, gpus: u32, t: Micros) {
        self.metrics.busy(pool, gpus, t);
        if self.lone(g) {
            self.metrics.lone_active(pool, gpus, t);
        }
    }

    /// Records the nodes held, in all and by single-member groups.
    fn record_nodes(&mut self) {
        let gpus = self.gpus();
        self.metrics.nodes(self.now, self.placer.nodes_in_use(), gpus);
        let lone = self
            .placer
            .groups()
            .filter(|g| g.is_lone())
            .fold((0, 0), |acc, g| (acc.0 + g.rollout_node_count(), acc.1 + g.train_width()));
        self.metrics.lone_nodes(self.now, lone, gpus);
        if self.spot.is_some() {
            let spot = self.placer.groups().filter(|g| g.spot()).map(|g| g.rollout_node_count()).sum();
            self.metrics.spot_nodes(self.now, spot, gpus.0);
        }
        self.share_advance();
    }

    fn block_members(&self, g: GroupId, block: u32) -> usize {
        self.placer.group(g).map_or(0, |grp| grp.members.iter().filter(|m| m.block == block).count())
    }

    /// Whether `ev` belongs to job `i`'s current placement.
    fn current(&self, i: usize, ev: Done) -> bool {
        self.states[i].as_ref().is_some_and(|s| s.epoch == ev.epoch && s.placed.is_some_and(|p| p.group == ev.group))
    }

    /// Feeds one input to a group's dispatcher; true if a job completed.
    fn dispatch(&mut self, g: GroupId, input: Input) -> bool {
        let finished_iteration = match input {
            Input::PhaseFinished { job, phase: Phase::Train, iteration } => Some((job.0 as usize, iteration)),
            _ => None,
        };
        if let Some((i, k)) = finished_iteration {
            self.iteration_done(i, k);
            if self.yield_at_iteration_end(i) || self.deferred_move_due(i, g) {
                return false;
            }
        }
        // One action buffer serves every event (taken out while in use).
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let d = self.dispatchers.get_mut(&g).expect("events only for live groups");
        d.handle_into(self.now, input, &mut actions).expect("the engine reports only what the dispatcher started");
        let completed = actions.iter().any(|a| matches!(a, Action::Completed { .. }));
        self.apply(g, actions.drain(..));
        self.actions = actions;
        if let (Some((i, _)), Regroup::Incremental, false) = (finished_iteration, self.cfg.regroup, completed) {
            if let Some(p) = self.states[i].as_ref().and_then(|s| s.placed) {
                self.repair(p.group);
            }
        }
        if finished_iteration.is_some() && self.cfg.reestimate {
            // Re-estimation may have changed the best order.
            self.follow_order(g);
        }
        completed
    }

    fn apply(&mut self, g: GroupId, actions: impl IntoIterator<Item = Action>) {
        if self.cfg.events {
            if let Some(d) = self.dispatchers.get_mut(&g) {
                let group = g;
                self.events.extend(d.take_log().into_iter().map(|e| EventRecord { group, entry: e }));
            }
        }
        let actions: Vec<Action> = actions.into_iter().collect();
        let epoch = |e: &Self, a: &Action| e.states[a.job().0 as usize].as_ref().map(|s| (s.epoch, s.placed.is_some()));
        let at_start: Vec<_> = actions.iter().map(|a| epoch(self, a)).collect();
        for (a, start) in actions.into_iter().zip(at_start) {
            // An action computed before its job left (preempted, failed or moved by an earlier
            // action of the same batch) is stale: the job is no longer that member.
            if epoch(self, &a) != start {
                continue;
            }
            self.schedule(a);
        }
    }

    fn schedule(&mut self, a: Action) {
        let gpus = self.gpus();
        match a {
            Action::BeginSwitch { job, phase, iteration, duration, .. } => {
                let i = job.0 as usize;
                let p = self.states[i].as_ref().and_then(|s| s.placed).expect("running job");
                if phase == Phase::Rollout && !p.colocated {
                    self.lender_starts(p.group, p.block);
                }
                let (pool, n, class) = match phase {
                    Phase::Rollout if p.colocated => (Pool::Training, p.pool_width * gpus.1, 4),
                    Phase::Rollout => (Pool::Rollout, p.block_width * gpus.0, 4),
                    Phase::Train => (Pool::Training, p.pool_width * gpus.1, 3),
                };
                self.metrics.switching(pool, n, duration);
                if self.lone(p.group) {
                    self.metrics.lone_active(pool, n, duration);
                }
                self.push(self.now + duration, class, i, What::Switch(phase), iteration);
            }
            Action::StartRollout { job, iteration, weights, .. } => {
                let i = job.0 as usize;
                let s = self.states[i].as_mut().expect("running job");
                let (disagg, colo) = draw_iteration(&self.jobs[i], &self.cfg.runtime, iteration, &mut s.rng);
                s.draws.insert(iteration, (disagg, colo));
                (s.rolling, s.rollout_extra) = (true, Micros::ZERO);
                s.lag.0 += iteration.saturating_sub(weights);
                s.lag.1 += 1;
                let p = s.placed.expect("placed");
                if p.colocated {
                    s.rollout_started = self.now;
                    s.rollout_plain = colo.rollout;
                    self.charge_training(i, p.group, p.pool_width * gpus.1, colo.rollout);
                    self.push(self.now + colo.rollout, 1, i, What::Phase(Phase::Rollout), iteration);
                    return;
                }
                self.lender_starts(p.group, p.block);
                let gpus_on_block = p.block_width * gpus.0;
                let key = (p.group, p.block);
                // Stragglers of the previous rollout still hold part of the block: this one
                // runs on the rest until they finish.
                let mut d = disagg.rollout;
                if let Some(&(until, share)) = self.stragglers.get(&key) {
                    if until > self.now {
                        d += until.saturating_sub(self.now).min(d).scale(share);
                    }
                }
                d += self.spot_shortage(p.group, p.block, p.block_width, d);
                let shape = self.jobs[i].migration;
                let shared = self.migration && shape.release < 1.0 && self.block_members(p.group, p.block) > 1;
                if !shared {
                    d = self.borrow(i, iteration, p, d);
                }
                let s = self.states[i].as_mut().expect("running job");
                s.rollout_started = self.now;
                s.rollout_plain = d;
                if shared {
                    self.push(self.now + d.scale(shape.release), 1, i, What::MigrationPoint, iteration);
                } else {
                    self.charge_busy(p.group, Pool::Rollout, gpus_on_block, d);
                    self.push(self.now + d, 1, i, What::Phase(Phase::Rollout), iteration);
                }
            }
            Action::StartTraining { job, iteration } => {
                let i = job.0 as usize;
                let s = self.states[i].as_mut().expect("running job");
                s.train_started = self.now;
                let placed = s.placed.expect("placed");
                let pool = placed.pool_width;
                let d = self.training_time(i, placed, iteration);
                self.charge_training(i, placed.group, pool * gpus.1, d);
                self.push(self.now + d, 0, i, What::Phase(Phase::Train), iteration);
            }
            Action::BeginSync { job, iteration, duration } => {
                let i = job.0 as usize;
                if let Some(p) = self.states[i].as_ref().and_then(|s| s.placed) {
                    // The job's rollout GPUs wait for these weights unless another member
                    // can use the block meanwhile.
                    if !p.colocated && self.block_members(p.group, p.block) == 1 {
                        let n = p.block_width * gpus.0;
                        self.metrics.sync(Pool::Rollout, n, duration);
                        if self.lone(p.group) {
                            self.metrics.lone_active(Pool::Rollout, n, duration);
                        }
                    }
                }
                self.push(self.now + duration, 2, i, What::Sync, iteration);
            }
            Action::Completed { job, .. } => self.complete(job),
        }
    }

    /// The job has left its dispatcher: free its place and let waiting jobs in.
    fn release(&mut self, job: JobId, g: GroupId) {
        self.running -= 1;
        self.reclaim_from(g);
        if let Ok(dep) = self.placer.depart(job) {
            if dep.dissolved {
                self.dispatchers.remove(&g);
            }
        }
        self.follow_order(g);
        if self.colocation() && !self.consolidating && self.placer.group(g).is_some_and(|grp| grp.runs_alone()) {
            let ev = Done { group: g, job: JobId(u32::MAX), what: What::ConsolidateGroup, iteration: 0, epoch: 0 };
            self.queue.push(self.now, CLASS_OTHER, ev);
        }
        self.record_nodes();
        // Fixed pools: released nodes may let waiting jobs in, oldest first; in the middle of
        // a consolidation move they are the mover's until it is placed again.
        if !self.consolidating {
            self.admit_waiting();
        }
    }

    /// Takes a running job out of its group (failure or migration); its in-flight iteration
    /// is lost.
    fn unplace(&mut self, i: usize) {
        let Some(s) = self.states[i].as_mut() else { return };
        let Some(p) = s.placed.take() else { return };
        s.epoch += 1;
        s.rolling = false;
        self.forget_drain(i);
        self.return_loans(i);
        let job = JobId(i as u32);
        self.leave_dispatcher(p.group, job);
        self.release(job, p.group);
    }

    /// Job `job` leaves group `g`'s dispatcher (its nodes stay held until released); a move
    /// deferred for it goes with its place.
    fn leave_dispatcher(&mut self, g: GroupId, job: JobId) {
        self.deferred.remove(&job);
        if let Some(d) = self.dispatchers.get_mut(&g) {
            if let Ok(actions) = d.handle(self.now, Input::Leave { job }) {
                self.apply(g, actions);
            }
        }
    }
}

/// Per-phase median of measured iterations (callers hold at least one).
fn median(v: &VecDeque<PhaseTimes>) -> PhaseTimes {
    PhaseTimes::median_of(v.iter().map(|p| p.rollout), v.iter().map(|p| p.train)).expect("measured iterations")
}
