//! The discrete-event replay of group-based policies: arrivals go through the real placer,
//! each group runs the real dispatcher, and phase durations come from each job's own runtime
//! stream while admission uses the conservative estimate. Optionally jobs are re-estimated
//! from what they measure, re-grouped when their group violates an SLO, and fail and come
//! back from checkpoints.

use crate::dynamics::{exp_wait, Regroup};
use crate::metrics::{JobOutcome, Metrics};
use crate::workload::{draw_iteration, SimJob, SoloPipeline};
use crate::{CapacityMode, EventRecord, SimConfig};
use rand::Rng;
use std::collections::{BTreeMap, VecDeque};
use weave_core::{ClusterConfig, EventQueue, GroupId, JobId, Micros, PhaseTimes, Pool};
use weave_dispatch::{Action, Dispatcher, GroupLimits, Input, MemberSpec, Phase};
use weave_model::{named_stream, Stream, SwitchKind};
use weave_place::consolidate;
use weave_place::{PlaceError, PlaceJob, PlacePolicy, Placer, PlacerConfig, Target};

mod consolidation;
mod sharing;

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

struct JobState {
    rng: Stream,
    fail_rng: Stream,
    /// Each started iteration's drawn durations (disaggregated at the job's own widths, and
    /// co-located), from its rollout's start until it is done: with bounded staleness later
    /// rollouts start before an iteration trains.
    draws: BTreeMap<u64, (PhaseTimes, PhaseTimes)>,
    /// Versions behind summed over its rollouts, and the rollouts counted (bounded staleness).
    lag: (u64, u64),
    first_admitted: Micros,
    last_train_end: Micros,
    solo_sum: Micros,
    within_slo: u64,
    done: u64,
    checkpoint: u64,
    /// A bounded-staleness job's solo run on its own draws (its solo reference).
    solo_pipeline: SoloPipeline,
    /// `solo_sum`, `within_slo` and the solo pipeline at the last checkpoint: a preemption
    /// rolls them back with the work, since a solo run would never have lost it (a failure
    /// does not: solo fails too).
    at_checkpoint: (Micros, u64, SoloPipeline),
    /// Times preempted: to reclaim borrowed capacity, and outranked within its tenant.
    preempted: (u32, u32),
    /// Training GPU-time charged busy since its last checkpoint (what a preemption wastes).
    train_busy_unsaved: u128,
    /// The next finished iteration is the first since (re)admission: it paid a cold start.
    fresh: bool,
    placed: Option<Placed>,
    epoch: u32,
    measured: VecDeque<PhaseTimes>,
    restarts: u32,
    last_move: Option<Micros>,
    /// When its current admission began (preemption's minimum run time counts from here).
    admitted_at: Micros,
    /// The next fresh start follows a failure: a solo run would have paid its cold start too,
    /// so it is added to the solo reference. A move the scheduler chose is not excused.
    excused: bool,
    /// The job's own predicted slowdown at its last admission.
    predicted: f64,
    /// The current rollout's start and its duration without migration.
    rollout_started: Micros,
    rollout_plain: Micros,
    /// When its current training phase started.
    train_started: Micros,
}

impl JobState {
    /// Iteration `k`'s drawn durations, disaggregated and co-located (the estimates if it has
    /// not started).
    fn drawn(&self, k: u64, job: &SimJob) -> (PhaseTimes, PhaseTimes) {
        self.draws.get(&k).copied().unwrap_or((job.disagg, job.colo))
    }

    /// Its checkpoint is now: a later preemption or failure resumes here, and its SLO's solo
    /// reference and unsaved training time roll back to here.
    fn save_checkpoint(&mut self) {
        self.checkpoint = self.done;
        self.at_checkpoint = (self.solo_sum, self.within_slo, self.solo_pipeline.clone());
        self.train_busy_unsaved = 0;
    }
}

pub struct Engine<'a> {
    jobs: &'a [SimJob],
    cluster: &'a ClusterConfig,
    cfg: &'a SimConfig,
    resident: bool,
    migration: bool,
    /// Per rollout block: until when migrated stragglers occupy part of it, and what share.
    stragglers: BTreeMap<(GroupId, u32), (Micros, f64)>,
    states: Vec<Option<JobState>>,
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
    /// Tenants sharing fixed pools (quotas, priorities, preemption, backfill); `None`: one queue.
    share: Option<sharing::Sharing>,
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
            jobs,
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
            share: cfg.share.clone().map(|p| sharing::Sharing::new(p, jobs)),
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
                if self.current(i, ev) && !self.left_group(i) {
                    self.migration_point(i, ev.iteration);
                }
                false
            }
            _ => {
                if !self.current(i, ev) || self.left_group(i) {
                    return false;
                }
                let input = ev.input().expect("dispatcher event");
                self.dispatch(ev.group, input)
            }
        }
    }

    /// At a rollout's migration trigger: if another job waits for the block, move the
    /// stragglers to a few workers and hand the block on; otherwise finish in place.
    fn migration_point(&mut self, i: usize, iteration: u64) {
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
    fn can_afford_migration(&self, i: usize, iteration: u64) -> bool {
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
        self.share_advance();
    }

    fn block_members(&self, g: GroupId, block: u32) -> usize {
        self.placer.group(g).map_or(0, |grp| grp.members.iter().filter(|m| m.block == block).count())
    }

    /// Whether `ev` belongs to job `i`'s current placement.
    fn current(&self, i: usize, ev: Done) -> bool {
        self.states[i].as_ref().is_some_and(|s| s.epoch == ev.epoch && s.placed.is_some_and(|p| p.group == ev.group))
    }

    fn admit_or_wait(&mut self, i: usize) {
        if self.never_fits(i) {
            // As the server refuses it (409): waiting, it would hold up the queue for good.
            self.metrics.rejected += 1;
            return;
        }
        if self.sharing() {
            self.waiting.push_back(i);
            self.schedule_queue();
            return;
        }
        if self.pair_on_arrival(i) {
            return;
        }
        if self.admit(i).is_err() {
            self.waiting.push_back(i);
        }
    }

    /// Whether job `i` needs more nodes than the fixed pools have.
    fn never_fits(&self, i: usize) -> bool {
        let s = &self.jobs[i].spec;
        self.placer.config().capacity.is_some_and(|(r, t)| s.rollout_nodes > r || s.train_nodes > t)
    }

    /// The estimate admission uses: conservative at first, re-estimated from measurements.
    fn estimate(&self, i: usize) -> PhaseTimes {
        let job = &self.jobs[i];
        match self.states[i].as_ref() {
            Some(s) if self.cfg.reestimate && !s.measured.is_empty() => median(&s.measured),
            _ => job.place.times,
        }
    }

    /// Job `i`'s placement view with its current estimate.
    fn place_job(&self, i: usize) -> PlaceJob {
        let mut place = self.jobs[i].place.clone();
        place.times = self.estimate(i);
        place.variation = self.variations[i].clone();
        place
    }

    /// Tries to place job `i`; `Err` when it must wait for capacity.
    fn admit(&mut self, i: usize) -> Result<(), ()> {
        self.admit_at(i, None)
    }

    /// Places job `i` where admission decides (`target` = `None`) or at `target`; `Err` when
    /// it must wait for capacity or the target is not feasible.
    fn admit_at(&mut self, i: usize, target: Option<Target>) -> Result<(), ()> {
        let job = &self.jobs[i];
        let place = self.place_job(i);
        let placed = match target {
            None => self.placer.admit(place),
            Some(t) => self.placer.admit_to(place, t),
        };
        let decision = match placed {
            Ok(d) => d,
            Err(PlaceError::NoCapacity(_)) => return Err(()),
            Err(PlaceError::Infeasible { .. }) => return Err(()),
            Err(_) => {
                self.metrics.rejected += 1;
                return Ok(());
            }
        };
        let colocated = decision.kind == weave_place::DecisionKind::Colocated;
        // The admission split counts where jobs start; moves and restarts are counted apart.
        if self.states[i].as_ref().is_none_or(|s| s.epoch == 0) {
            self.metrics.admitted(decision.kind);
        }
        self.record_nodes();
        let placed = Placed {
            group: decision.group,
            block: decision.block,
            block_width: decision.rollout_nodes.len() as u32,
            pool_width: decision.training_nodes.len() as u32,
            colocated,
        };
        let now = self.now;
        let seed = self.cfg.seed;
        let s = self.states[i].get_or_insert_with(|| JobState {
            rng: job.runtime_stream(seed),
            fail_rng: named_stream(seed, "job-failure", i as u64),
            draws: BTreeMap::new(),
            lag: (0, 0),
            first_admitted: now,
            last_train_end: now,
            solo_sum: Micros::ZERO,
            within_slo: 0,
            solo_pipeline: SoloPipeline::default(),
            at_checkpoint: (Micros::ZERO, 0, SoloPipeline::default()),
            preempted: (0, 0),
            train_busy_unsaved: 0,
            done: 0,
            checkpoint: 0,
            fresh: true,
            placed: None,
            epoch: 0,
            measured: VecDeque::new(),
            restarts: 0,
            last_move: None,
            admitted_at: now,
            excused: false,
            predicted: 0.0,
            rollout_started: Micros::ZERO,
            rollout_plain: Micros::ZERO,
            train_started: Micros::ZERO,
        });
        // Queueing delay counts the first admission only (epoch 0: never placed before).
        let first = s.epoch == 0;
        if first {
            self.metrics.queue_delays.push(now.saturating_sub(job.spec.arrival));
        }
        s.admitted_at = now;
        s.placed = Some(placed);
        s.predicted = decision.slowdowns.iter().find(|(j, _)| j.0 as usize == i).map_or(0.0, |(_, x)| *x);
        s.epoch += 1;
        s.fresh = true;
        s.last_train_end = now;
        let start_iteration = s.done;
        self.running += 1;
        if first {
            self.share_first_admission(i, now.saturating_sub(job.spec.arrival));
        }
        if first && self.cfg.fixed_lifetimes {
            self.push(job.spec.arrival + job.lifetime(), CLASS_OTHER, i, What::LifetimeOver, 0);
        }
        if let Some(f) = self.cfg.failures {
            let s = self.states[i].as_mut().expect("just set");
            let wait = exp_wait(f.job_rate_per_hour, &mut s.fail_rng);
            self.push(now + wait, CLASS_OTHER, i, What::JobFailure, 0);
        }
        let spec = MemberSpec {
            job: JobId(i as u32),
            rollout_nodes: vec![decision.block],
            costs: job.place.costs,
            // Co-located: the update is local (the profile includes it).
            sync: if colocated { Micros::ZERO } else { job.sync },
            resident: self.resident,
            // Co-located, both phases take turns on the same GPUs: on-policy.
            staleness: if colocated { 0 } else { job.spec.staleness },
            rollout_state: job.place.rollout_state,
            train_state: weave_core::Bytes(job.place.train_state_total.0 / placed.pool_width.max(1) as u64),
            // Fixed lifetimes: the job runs until its lifetime is over.
            iterations: (!self.cfg.fixed_lifetimes).then_some(job.iterations),
            start_iteration,
        };
        let limits = GroupLimits {
            rollout_dram: self.cluster.rollout.host_dram(),
            train_dram: self.cluster.training.host_dram(),
        };
        let logging = self.cfg.events;
        let d = self.dispatchers.entry(decision.group).or_insert_with(|| {
            let mut d = Dispatcher::new(limits);
            d.set_logging(logging);
            d
        });
        let actions =
            d.handle(self.now, Input::Join(spec)).expect("the placer checked residency with the same figures");
        self.apply(decision.group, actions);
        self.follow_order(decision.group);
        Ok(())
    }

    /// The group's dispatcher follows the cyclic order of the placer's current prediction
    /// (what admission predicted is what runs).
    fn follow_order(&mut self, g: GroupId) {
        let (Some(group), Some(d)) = (self.placer.group(g), self.dispatchers.get_mut(&g)) else { return };
        let Some(reorder) = group.reorder(d) else { return };
        let actions = d.handle(self.now, reorder).expect("a reorder is always accepted");
        self.apply(g, actions);
    }

    /// Feeds one input to a group's dispatcher; true if a job completed.
    fn dispatch(&mut self, g: GroupId, input: Input) -> bool {
        let finished_iteration = match input {
            Input::PhaseFinished { job, phase: Phase::Train, iteration } => Some((job.0 as usize, iteration)),
            _ => None,
        };
        if let Some((i, k)) = finished_iteration {
            self.iteration_done(i, k);
            if self.yield_at_iteration_end(i) {
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

    fn iteration_done(&mut self, i: usize, iteration: u64) {
        let job = &self.jobs[i];
        let s = self.states[i].as_mut().expect("running job");
        let took = self.now.saturating_sub(s.last_train_end);
        let (drawn, _) = s.draws.remove(&iteration).unwrap_or((job.disagg, job.colo));
        let restart = s.fresh && iteration > 0 && s.excused;
        let solo = if job.spec.staleness == 0 {
            let solo = job.solo_iteration(drawn, iteration);
            // A restart after a failure paid a cold start, as a solo restart would.
            solo + if restart { job.cold_start } else { Micros::ZERO }
        } else {
            if restart {
                // A solo run restarting from its checkpoint refills its pipeline too.
                s.solo_pipeline = SoloPipeline::default();
            }
            let mut d = drawn;
            if iteration == 0 || restart {
                // Each lane loads its state cold before its first phase, as the solo run's do.
                d.rollout += job.place.costs.rollout_cold;
                d.train += job.place.costs.train_cold;
            }
            s.solo_pipeline.next(job.spec.staleness, d, job.sync_after(iteration))
        };
        s.fresh = false;
        s.excused = false;
        s.solo_sum += solo;
        if took.0 as f64 <= job.slo * solo.0 as f64 {
            s.within_slo += 1;
        }
        s.done = iteration + 1;
        s.last_train_end = self.now;
        let every = match (&self.cfg.failures, &self.cfg.share) {
            (Some(f), _) => Some(f.checkpoint_every),
            (None, Some(p)) => Some(p.checkpoint_every),
            _ => None,
        };
        if every.is_some_and(|e| s.done.is_multiple_of(e.max(1))) {
            s.save_checkpoint();
        }
        s.measured.push_back(drawn);
        if s.measured.len() > MEASURED_KEPT {
            s.measured.pop_front();
        }
        if self.cfg.reestimate {
            let est = median(&s.measured);
            self.placer.update_times(JobId(i as u32), est);
        }
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
                let shape = self.jobs[i].migration;
                let shared = self.migration && shape.release < 1.0 && self.block_members(p.group, p.block) > 1;
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

    fn complete(&mut self, job: JobId) {
        let i = job.0 as usize;
        self.forget_drain(i);
        let s = self.states[i].take().expect("running job");
        self.record_outcome(i, &s, false);
        let g = s.placed.expect("placed").group;
        self.release(job, g);
    }

    /// Fixed lifetimes: job `i` leaves now, with the iterations it finished (its current one
    /// is cut); true if it was still there.
    fn lifetime_over(&mut self, i: usize) -> bool {
        if self.states[i].is_none() {
            return false;
        }
        self.unplace(i);
        self.waiting.retain(|&w| w != i);
        let s = self.states[i].take().expect("known job");
        self.record_outcome(i, &s, false);
        true
    }

    fn record_outcome(&mut self, i: usize, s: &JobState, failed: bool) {
        let spec = &self.jobs[i];
        let life = self.now.saturating_sub(s.first_admitted);
        self.metrics.jobs.push(JobOutcome {
            name: spec.spec.name.clone(),
            slo: spec.slo,
            iterations: s.done,
            slowdown: life.0 as f64 / s.solo_sum.0.max(1) as f64,
            iterations_within_slo: s.within_slo,
            queued: s.first_admitted.saturating_sub(spec.spec.arrival),
            predicted_slowdown: s.predicted,
            placements: s.epoch.div_ceil(2).max(1),
            reclaimed: s.preempted.0,
            outranked: s.preempted.1,
            passed_over: self.share.as_ref().is_some_and(|sh| sh.passed_over.contains(&i)),
            staleness: spec.spec.staleness,
            versions_behind: (spec.spec.staleness > 0).then(|| s.lag.0 as f64 / s.lag.1.max(1) as f64),
        });
        if failed {
            self.metrics.events.failed_permanently += 1;
        }
        self.metrics.end = self.now;
    }

    /// The job has left its dispatcher: free its place and let waiting jobs in.
    fn release(&mut self, job: JobId, g: GroupId) {
        self.running -= 1;
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

    fn admit_waiting(&mut self) {
        if self.sharing() {
            self.schedule_queue();
            return;
        }
        while let Some(&next) = self.waiting.front() {
            if self.admit(next).is_err() {
                break;
            }
            self.waiting.pop_front();
        }
    }

    /// Takes a running job out of its group (failure or migration); its in-flight iteration
    /// is lost.
    fn unplace(&mut self, i: usize) {
        let Some(s) = self.states[i].as_mut() else { return };
        let Some(p) = s.placed.take() else { return };
        s.epoch += 1;
        self.forget_drain(i);
        let job = JobId(i as u32);
        self.leave_dispatcher(p.group, job);
        self.release(job, p.group);
    }

    /// Job `job` leaves group `g`'s dispatcher (its nodes stay held until released).
    fn leave_dispatcher(&mut self, g: GroupId, job: JobId) {
        if let Some(d) = self.dispatchers.get_mut(&g) {
            if let Ok(actions) = d.handle(self.now, Input::Leave { job }) {
                self.apply(g, actions);
            }
        }
    }

    fn fail(&mut self, i: usize) {
        let Some(f) = self.cfg.failures else { return };
        self.unplace(i);
        let s = self.states[i].as_mut().expect("known job");
        self.metrics.events.lost_iterations += s.done - s.checkpoint;
        s.done = s.checkpoint;
        // The failure threw that work away, not a later preemption.
        s.train_busy_unsaved = 0;
        s.excused = true;
        s.restarts += 1;
        self.metrics.events.restarts += 1;
        if s.restarts > f.max_restarts {
            let s = self.states[i].take().expect("known job");
            self.record_outcome(i, &s, true);
        } else {
            self.pending_readmits += 1;
            self.push(self.now + f.restart_delay, CLASS_OTHER, i, What::Readmit, 0);
        }
    }

    /// A random held node fails: every job with state on it fails.
    fn node_failure(&mut self) {
        let (r, t) = self.placer.nodes_in_use();
        if r + t == 0 {
            return;
        }
        let mut u = self.node_rng.random_range(0..r + t);
        let mut victims: Vec<usize> = Vec::new();
        'groups: for g in self.placer.groups() {
            for b in &g.blocks {
                let n = b.nodes.len() as u32;
                if u < n {
                    victims.extend(g.members.iter().filter(|m| m.block == b.id).map(|m| m.job.id.0 as usize));
                    break 'groups;
                }
                u -= n;
            }
            let n = g.training_nodes.len() as u32;
            if u < n {
                victims.extend(g.members.iter().map(|m| m.job.id.0 as usize));
                break;
            }
            u -= n;
        }
        self.metrics.events.node_failures += 1;
        for v in victims {
            self.fail(v);
        }
    }

    /// If group `g` violates a member's SLO under current estimates, moves one member out:
    /// the one whose departure leaves the rest with the smallest worst slowdown.
    fn repair(&mut self, g: GroupId) {
        let Some(group) = self.placer.group(g) else { return };
        if group.members.len() < 2 {
            return;
        }
        let violating =
            group.members.iter().enumerate().any(|(k, m)| {
                group.prediction.coexec[k].0 as f64 > m.job.slo * m.job.solo().0 as f64 * VIOLATION_MARGIN
            });
        if !violating {
            return;
        }
        let cooldown = Micros(2 * Micros::PER_HOUR);
        let mut best: Option<(f64, usize)> = None;
        for (k, m) in group.members.iter().enumerate() {
            let i = m.job.id.0 as usize;
            if self.states[i].as_ref().and_then(|s| s.last_move).is_some_and(|t| self.now.saturating_sub(t) < cooldown)
            {
                continue;
            }
            let rest: Vec<_> = group
                .members
                .iter()
                .enumerate()
                .filter(|(x, _)| *x != k)
                .map(|(_, o)| o.job.timing_member(o.block, group.train_width(), self.resident))
                .collect();
            let p = weave_place::group::predict(&rest);
            let worst = group
                .members
                .iter()
                .filter(|o| o.job.id != m.job.id)
                .zip(&p.coexec)
                .map(|(o, c)| c.0 as f64 / (o.job.slo * o.job.solo().0 as f64))
                .fold(0.0, f64::max);
            if best.is_none_or(|(b, _)| worst < b) {
                best = Some((worst, i));
            }
        }
        if let Some((_, i)) = best {
            self.migrate(i);
        }
    }

    fn migrate(&mut self, i: usize) {
        self.unplace(i);
        let s = self.states[i].as_mut().expect("known job");
        s.last_move = Some(self.now);
        self.metrics.events.migrations += 1;
        self.admit_or_wait(i);
    }

    /// The periodic policy: repair violating groups, then re-pack everything if a fresh
    /// packing saves more over the horizon than moving costs.
    fn periodic_regroup(&mut self) {
        let Regroup::Periodic { horizon, .. } = self.cfg.regroup else { return };
        let groups: Vec<GroupId> = self.placer.groups().map(|g| g.id).collect();
        for g in groups {
            self.repair(g);
        }
        let running: Vec<usize> =
            (0..self.jobs.len()).filter(|&i| self.states[i].as_ref().is_some_and(|s| s.placed.is_some())).collect();
        if running.len() < 2 {
            return;
        }
        let mut scratch = Placer::new(self.placer.config().clone());
        for &i in &running {
            let mut p = self.jobs[i].place.clone();
            p.times = self.estimate(i);
            if scratch.admit(p).is_err() {
                return;
            }
        }
        let saving = (self.placer.hourly_cost() - scratch.hourly_cost()).as_dollars();
        if saving <= 0.0 {
            return;
        }
        // Moving a job costs a cold start on its nodes plus, on average, half an iteration.
        let hour = |t: Micros| t.as_hours_f64();
        let (pr, pt) =
            (self.placer.config().rollout_node_price.as_dollars(), self.placer.config().train_node_price.as_dollars());
        let cost: f64 = running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i];
                let t = j.cold_start + Micros(j.disagg.solo().0 / 2);
                hour(t) * (pr * j.spec.rollout_nodes as f64 + pt * j.spec.train_nodes as f64)
            })
            .sum();
        if saving * hour(horizon) <= cost {
            return;
        }
        for &i in &running {
            self.unplace(i);
        }
        for &i in &running {
            let s = self.states[i].as_mut().expect("known job");
            s.last_move = Some(self.now);
            self.metrics.events.migrations += 1;
            self.admit_or_wait(i);
        }
        self.metrics.events.repacks += 1;
    }
}

/// Per-phase median of measured iterations.
fn median(v: &VecDeque<PhaseTimes>) -> PhaseTimes {
    let mut r: Vec<Micros> = v.iter().map(|p| p.rollout).collect();
    let mut t: Vec<Micros> = v.iter().map(|p| p.train).collect();
    r.sort_unstable();
    t.sort_unstable();
    PhaseTimes { rollout: r[r.len() / 2], train: t[t.len() / 2] }
}
