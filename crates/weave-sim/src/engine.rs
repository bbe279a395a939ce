//! The discrete-event replay of group-based policies: arrivals go through the real placer,
//! each group runs the real dispatcher, and phase durations come from each job's own runtime
//! stream while admission uses the conservative estimate.

use crate::metrics::{JobOutcome, Metrics};
use crate::workload::{draw_iteration, SimJob};
use crate::{CapacityMode, EventRecord, SimConfig};
use std::collections::{BTreeMap, VecDeque};
use weave_core::{ClusterConfig, EventQueue, GroupId, JobId, Micros, PhaseTimes, Pool};
use weave_dispatch::from_model::switch_costs;
use weave_dispatch::{Action, Dispatcher, GroupLimits, Input, MemberSpec, Phase};
use weave_model::Stream;
use weave_place::{PlaceError, PlacePolicy, Placer, PlacerConfig};

/// A completion inside a group. Kept small: the event heap moves these around a lot.
#[derive(Clone, Copy)]
struct Done {
    group: GroupId,
    job: JobId,
    what: What,
    iteration: u64,
}

#[derive(Clone, Copy)]
enum What {
    Switch(Phase),
    Phase(Phase),
    Sync,
}

impl Done {
    fn input(self) -> Input {
        let (job, iteration) = (self.job, self.iteration);
        match self.what {
            What::Switch(phase) => Input::SwitchFinished { job, phase, iteration },
            What::Phase(phase) => Input::PhaseFinished { job, phase, iteration },
            What::Sync => Input::SyncFinished { job, iteration },
        }
    }
}

struct JobState {
    rng: Stream,
    /// Durations of the current iteration (disaggregated, at the job's own widths).
    current: PhaseTimes,
    admitted: Micros,
    last_train_end: Micros,
    solo_sum: Micros,
    within_slo: u64,
    done: u64,
    group: GroupId,
    block_width: u32,
    pool_width: u32,
}

pub struct Engine<'a> {
    jobs: &'a [SimJob],
    cluster: &'a ClusterConfig,
    cfg: &'a SimConfig,
    resident: bool,
    states: Vec<Option<JobState>>,
    placer: Placer,
    dispatchers: BTreeMap<GroupId, Dispatcher>,
    queue: EventQueue<Done>,
    /// Jobs are in arrival order: arrivals are read from here rather than queued, so the
    /// event heap holds only what is in flight.
    next_arrival: usize,
    waiting: VecDeque<usize>,
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
        let placer = Placer::new(placer_cfg);
        Engine {
            jobs,
            cluster,
            cfg,
            resident,
            states: jobs.iter().map(|_| None).collect(),
            placer,
            dispatchers: BTreeMap::new(),
            queue: EventQueue::new(),
            next_arrival: 0,
            waiting: VecDeque::new(),
            metrics: Metrics::default(),
            events: Vec::new(),
            actions: Vec::new(),
            now: Micros::ZERO,
        }
    }

    fn gpus(&self) -> (u32, u32) {
        (self.cluster.rollout.gpus_per_node, self.cluster.training.gpus_per_node)
    }

    /// Runs to the end; calls `progress(done, total)` now and then.
    pub fn run(&mut self, progress: &mut dyn FnMut(usize, usize)) {
        let mut finished = 0usize;
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
                if self.admit(i).is_err() {
                    self.waiting.push_back(i);
                }
                continue;
            }
            let (t, done) = self.queue.pop().expect("peeked");
            self.now = t;
            if self.dispatch(done.group, done.input()) {
                finished += 1;
                if finished.is_multiple_of(256) {
                    progress(finished, self.jobs.len());
                }
            }
        }
        // Jobs still waiting can never run (fixed pools too small for them).
        self.metrics.rejected += self.waiting.len() as u64;
        self.metrics.nodes(self.now, self.placer.nodes_in_use(), self.gpus());
        self.metrics.end = self.now;
        progress(self.jobs.len(), self.jobs.len());
    }

    /// Tries to place job `i`; `Err` when it must wait for capacity.
    fn admit(&mut self, i: usize) -> Result<(), ()> {
        let job = &self.jobs[i];
        let decision = match self.placer.admit(job.place.clone()) {
            Ok(d) => d,
            Err(PlaceError::NoCapacity(_)) => return Err(()),
            Err(_) => {
                self.metrics.rejected += 1;
                return Ok(());
            }
        };
        self.metrics.admitted(decision.kind);
        self.metrics.nodes(self.now, self.placer.nodes_in_use(), self.gpus());
        self.metrics.queue_delays.push(self.now.saturating_sub(job.spec.arrival));
        let pool_width = decision.training_nodes.len() as u32;
        let block_width = decision.rollout_nodes.len() as u32;
        self.states[i] = Some(JobState {
            rng: job.runtime_stream(self.cfg.seed),
            current: job.disagg,
            admitted: self.now,
            last_train_end: self.now,
            solo_sum: Micros::ZERO,
            within_slo: 0,
            done: 0,
            group: decision.group,
            block_width,
            pool_width,
        });
        let spec = MemberSpec {
            job: JobId(i as u32),
            rollout_nodes: vec![decision.block],
            costs: switch_costs(job.spec.job_type.model),
            sync: job.sync,
            resident: self.resident,
            rollout_state: job.place.rollout_state,
            train_state: weave_core::Bytes(job.place.train_state_total.0 / pool_width.max(1) as u64),
            iterations: Some(job.iterations),
            start_iteration: 0,
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
        Ok(())
    }

    /// Feeds one input to a group's dispatcher; true if a job completed.
    fn dispatch(&mut self, g: GroupId, input: Input) -> bool {
        if let Input::PhaseFinished { job, phase: Phase::Train, iteration } = input {
            self.iteration_done(job.0 as usize, iteration);
        }
        // One action buffer serves every event (taken out while in use).
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let d = self.dispatchers.get_mut(&g).expect("events only for live groups");
        d.handle_into(self.now, input, &mut actions).expect("the engine reports only what the dispatcher started");
        let completed = actions.iter().any(|a| matches!(a, Action::Completed { .. }));
        self.apply(g, actions.drain(..));
        self.actions = actions;
        completed
    }

    fn iteration_done(&mut self, i: usize, iteration: u64) {
        let job = &self.jobs[i];
        let s = self.states[i].as_mut().expect("running job");
        let took = self.now.saturating_sub(s.last_train_end);
        let solo = job.solo_iteration(s.current, iteration);
        s.solo_sum += solo;
        if took.0 as f64 <= job.slo * solo.0 as f64 {
            s.within_slo += 1;
        }
        s.done = iteration + 1;
        s.last_train_end = self.now;
    }

    fn apply(&mut self, g: GroupId, actions: impl IntoIterator<Item = Action>) {
        if self.cfg.events {
            if let Some(d) = self.dispatchers.get_mut(&g) {
                let group = g;
                self.events.extend(d.take_log().into_iter().map(|e| EventRecord { group, entry: e }));
            }
        }
        for a in actions {
            self.schedule(g, a);
        }
    }

    fn schedule(&mut self, g: GroupId, a: Action) {
        let gpus = self.gpus();
        match a {
            Action::BeginSwitch { job, phase, iteration, duration, .. } => {
                let s = self.states[job.0 as usize].as_ref().expect("running job");
                let (pool, n, class) = match phase {
                    Phase::Rollout => (Pool::Rollout, s.block_width * gpus.0, 4),
                    Phase::Train => (Pool::Training, s.pool_width * gpus.1, 3),
                };
                self.metrics.switching(pool, n, duration);
                self.queue.push(
                    self.now + duration,
                    class,
                    Done { group: g, job, what: What::Switch(phase), iteration },
                );
            }
            Action::StartRollout { job, iteration, .. } => {
                let i = job.0 as usize;
                let (disagg, _) = {
                    let s = self.states[i].as_mut().expect("running job");
                    draw_iteration(&self.jobs[i], &self.cfg.runtime, iteration, &mut s.rng)
                };
                let s = self.states[i].as_mut().expect("running job");
                s.current = disagg;
                let n = s.block_width * gpus.0;
                self.metrics.busy(Pool::Rollout, n, disagg.rollout);
                self.queue.push(
                    self.now + disagg.rollout,
                    1,
                    Done { group: g, job, what: What::Phase(Phase::Rollout), iteration },
                );
            }
            Action::StartTraining { job, iteration } => {
                let i = job.0 as usize;
                let s = self.states[i].as_ref().expect("running job");
                // Data parallelism adjusted to the group's pool.
                let own = self.jobs[i].spec.train_nodes as u64;
                let d = Micros(s.current.train.0 * own / s.pool_width.max(1) as u64);
                self.metrics.busy(Pool::Training, s.pool_width * gpus.1, d);
                self.queue.push(self.now + d, 0, Done { group: g, job, what: What::Phase(Phase::Train), iteration });
            }
            Action::BeginSync { job, iteration, duration } => {
                self.queue.push(self.now + duration, 2, Done { group: g, job, what: What::Sync, iteration });
            }
            Action::Completed { job, .. } => self.complete(job),
        }
    }

    fn complete(&mut self, job: JobId) {
        let i = job.0 as usize;
        let s = self.states[i].take().expect("running job");
        let spec = &self.jobs[i];
        let life = self.now.saturating_sub(s.admitted);
        self.metrics.jobs.push(JobOutcome {
            name: spec.spec.name.clone(),
            slo: spec.slo,
            iterations: s.done,
            slowdown: life.0 as f64 / s.solo_sum.0.max(1) as f64,
            iterations_within_slo: s.within_slo,
            queued: s.admitted.saturating_sub(spec.spec.arrival),
        });
        let dep = self.placer.depart(job).expect("placed");
        if dep.dissolved {
            self.dispatchers.remove(&s.group);
        }
        self.metrics.nodes(self.now, self.placer.nodes_in_use(), self.gpus());
        // Fixed pools: released nodes may let waiting jobs in, oldest first.
        while let Some(&next) = self.waiting.front() {
            if self.admit(next).is_err() {
                break;
            }
            self.waiting.pop_front();
        }
    }
}
