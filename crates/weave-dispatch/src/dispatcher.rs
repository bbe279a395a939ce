//! The dispatcher state machine.
//!
//! Each member cycles through: ready for rollout -> (switch) -> rollout -> ready for training
//! -> (switch) -> training -> weight sync -> ready for rollout of the next iteration. The
//! barrier is structural: a member's training can only start from "rollout finished" of the
//! same iteration, and its next rollout only from "sync finished".
//!
//! Round-robin: every resource (the training pool, each rollout node) counts the phases it
//! served per member. A member may take a resource only if it is not ahead of any other member
//! sharing that resource, so in each meta-iteration every member runs one rollout and one
//! training phase [paper, Theorem 1]. Within a round the resource follows the group's cyclic
//! order ([`Input::Reorder`], the order [`crate::order::best`] finds): the member due next is
//! the one with the fewest phases served and, among those, the earliest in the order. A
//! resource waits for its due member (greedy first-come order can settle into a slower cycle:
//! `tests/counterexample.rs`), so the group runs exactly the schedule whose period
//! [`crate::cycle`] computes. Members not yet in the order are served first-come among
//! themselves, after the ordered ones. A member joins level with the most-served member on
//! every resource it uses, so a round is the same round on all resources.
//!
//! Sync is a network transfer into the job's host buffers: it occupies neither pool's GPUs,
//! only the job's own critical path.

mod resource;

use crate::memory::{GroupLimits, MemoryLedger};
use crate::order::GroupOrder;
use crate::{Action, DispatchError, Fairness, Input, LogEntry, LogKind, MemberSpec, Phase, MAX_STALENESS};
use resource::Resource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weave_core::{JobId, Micros};
use weave_model::SwitchKind;

/// What one of a member's two lanes (its rollouts, its trainings) is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum LaneState {
    Idle,
    Switching,
    Running,
    /// Training lane only: the weights of the training just done are being synced.
    Syncing,
}

/// A member: two lanes, rollouts and trainings. Rollout n needs weights version n - k synced
/// (`n <= iteration + staleness`); training n needs rollout n finished (`rolled > n`). At
/// staleness 0 the lanes alternate, rollout, training, sync, which is the on-policy barrier.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Member {
    spec: MemberSpec,
    /// Trainings done and synced: the next training's iteration and the newest weights.
    iteration: u64,
    /// Rollouts finished: the next rollout's iteration (or the running one's).
    rolled: u64,
    rollout: LaneState,
    train: LaneState,
    /// When each lane's next phase became startable (FIFO order among ready members).
    rollout_seq: u64,
    train_seq: u64,
    /// Joined a group whose training pool had already served someone (not one formed at
    /// once): until its first training it holds no one up ([`Dispatcher::holds_no_one_up`]).
    late: bool,
}

impl Member {
    fn rollout_ready(&self) -> bool {
        self.rollout == LaneState::Idle
            && self.spec.iterations.is_none_or(|n| self.rolled < n)
            && self.rolled <= self.iteration + u64::from(self.spec.staleness)
    }

    fn train_ready(&self) -> bool {
        self.train == LaneState::Idle && self.rolled > self.iteration
    }

    fn lane(&self, phase: Phase) -> LaneState {
        match phase {
            Phase::Rollout => self.rollout,
            Phase::Train => self.train,
        }
    }

    fn lane_mut(&mut self, phase: Phase) -> &mut LaneState {
        match phase {
            Phase::Rollout => &mut self.rollout,
            Phase::Train => &mut self.train,
        }
    }

    /// The iteration the lane's current or next phase belongs to.
    fn lane_iteration(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Rollout => self.rolled,
            Phase::Train => self.iteration,
        }
    }
}

/// What a member's next rollout waits for ([`Dispatcher::rollout_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutHold {
    /// It has no rollout left.
    NoneLeft,
    /// The training of `iteration` (running, or waiting for the training pool) and its sync.
    Training { running: bool, iteration: u64 },
}

/// The intra-group dispatcher. Deterministic: the same inputs give the same actions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Dispatcher {
    members: BTreeMap<JobId, Member>,
    train: Resource,
    /// Per rollout node in use by a member. Keyed by node, not indexed: elastic pools never
    /// reuse node numbers, so a vector sized to the largest number grows with the server's age
    /// (a long-running server's every new group paid for every node ever rented).
    rollout: BTreeMap<u32, Resource>,
    memory: MemoryLedger,
    /// The cyclic order last given ([`Input::Reorder`]).
    order: GroupOrder,
    /// The dispatcher before cyclic orders: a newcomer joins level with each resource's own
    /// most-served member (kept only as the baseline `weave bench timing` measures against).
    per_resource_join: bool,
    fairness: Fairness,
    seq: u64,
    now: Micros,
    logging: bool,
    log: Vec<LogEntry>,
}

impl Dispatcher {
    pub fn new(limits: GroupLimits) -> Self {
        Dispatcher {
            members: BTreeMap::new(),
            train: Resource::default(),
            rollout: BTreeMap::new(),
            memory: MemoryLedger::new(limits),
            order: GroupOrder::default(),
            per_resource_join: false,
            fairness: Fairness::RoundRobin,
            seq: 0,
            now: Micros::ZERO,
            logging: true,
            log: Vec::new(),
        }
    }

    /// Chooses how ready members are ordered (round-robin unless told otherwise).
    pub fn set_fairness(&mut self, fairness: Fairness) {
        self.fairness = fairness;
    }

    /// Makes newcomers join level per resource, as the first-come dispatcher before cyclic
    /// orders did (a measurement baseline; see the field).
    pub fn set_per_resource_join(&mut self, on: bool) {
        self.per_resource_join = on;
    }

    /// Turns the decision log on or off (long simulations that need no timeline turn it off).
    pub fn set_logging(&mut self, on: bool) {
        self.logging = on;
    }

    /// Takes the decision log accumulated so far.
    pub fn take_log(&mut self) -> Vec<LogEntry> {
        std::mem::take(&mut self.log)
    }

    pub fn members(&self) -> impl Iterator<Item = JobId> + '_ {
        self.members.keys().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Host DRAM in use on each rollout node and on each training node.
    pub fn memory(&self) -> &MemoryLedger {
        &self.memory
    }

    /// Whether a member other than `job` is ready for a rollout that needs rollout node `node`
    /// (so handing the node on early would let it start).
    pub fn rollout_waiting(&self, node: u32, job: JobId) -> bool {
        let Some(r) = self.rollout.get(&node) else { return false };
        self.members.values().any(|m| {
            m.spec.job != job && m.rollout_ready() && m.spec.rollout_nodes.contains(&node) && self.due(r, m.spec.job)
        })
    }

    /// Why a member's next rollout cannot start before one of its own trainings ends, if it
    /// cannot: its rollout nodes are idle for it until then (what lending across groups uses).
    /// `None` when its next rollout may start soon: ready, switching or running, or only a
    /// sync away.
    pub fn rollout_hold(&self, job: JobId) -> Option<RolloutHold> {
        let m = self.members.get(&job)?;
        if m.rollout != LaneState::Idle {
            return None;
        }
        if m.spec.iterations.is_some_and(|n| m.rolled >= n) {
            return Some(RolloutHold::NoneLeft);
        }
        if m.rollout_ready() || m.train == LaneState::Syncing {
            return None;
        }
        Some(RolloutHold::Training { running: m.train == LaneState::Running, iteration: m.iteration })
    }

    /// The cyclic order the resources follow, as last given.
    pub fn order(&self) -> &GroupOrder {
        &self.order
    }

    /// Completed iterations of a member.
    pub fn iteration(&self, job: JobId) -> Option<u64> {
        self.members.get(&job).map(|m| m.iteration)
    }

    /// A member's next rollout that has not begun (switching in counts as begun): the first
    /// iteration a job joining its shared-base pack now takes part in.
    pub fn next_rollout(&self, job: JobId) -> Option<u64> {
        self.members.get(&job).map(|m| m.rolled + u64::from(m.rollout != LaneState::Idle))
    }

    /// Gives a member more iterations to run (a shared-base pack that a job joined). Refused
    /// (false) for a non-member, one that runs until it leaves, fewer iterations than it has,
    /// or once its last rollout has started: so no lane's readiness changes here.
    pub fn extend_iterations(&mut self, job: JobId, iterations: u64) -> bool {
        let Some(m) = self.members.get_mut(&job) else { return false };
        let Some(n) = m.spec.iterations else { return false };
        let begun = m.rolled + u64::from(m.rollout != LaneState::Idle);
        if iterations < n || begun >= n {
            return false;
        }
        m.spec.iterations = Some(iterations);
        true
    }

    /// Sets a member's bounded staleness from now on (a move waiting for a stale job's
    /// iteration to end drains its rollout lane with 0, so that no rollout of a later
    /// iteration is under way when its training ends). A rollout already running goes on.
    pub fn set_staleness(&mut self, job: JobId, staleness: u32) {
        if let Some(m) = self.members.get_mut(&job) {
            m.spec.staleness = staleness.min(MAX_STALENESS);
        }
    }

    /// Whether a member holds work a move now would throw away: a phase switching in or
    /// running, a training's weights still syncing, or a finished rollout not yet trained on.
    pub fn holds_work(&self, job: JobId) -> bool {
        self.members
            .get(&job)
            .is_some_and(|m| m.rollout != LaneState::Idle || m.train != LaneState::Idle || m.rolled > m.iteration)
    }

    /// Whether a member whose training is running holds work beyond it: a rollout under way or
    /// one finished for a later iteration (only a job with staleness can).
    pub fn holds_work_beyond_training(&self, job: JobId) -> bool {
        self.members.get(&job).is_some_and(|m| m.rollout != LaneState::Idle || m.rolled > m.iteration + 1)
    }

    /// Handles one input at time `now` (monotonic, from the driver) and returns the actions to
    /// take, in order. An input that would break a barrier is refused and changes nothing.
    pub fn handle(&mut self, now: Micros, input: Input) -> Result<Vec<Action>, DispatchError> {
        let mut actions = Vec::new();
        self.handle_into(now, input, &mut actions)?;
        Ok(actions)
    }

    /// [`Dispatcher::handle`] appending to a caller's buffer (hot loops reuse one). On error
    /// nothing is appended and no member's state changes.
    pub fn handle_into(&mut self, now: Micros, input: Input, out: &mut Vec<Action>) -> Result<(), DispatchError> {
        self.now = self.now.max(now);
        let actions = out;
        match input {
            Input::Join(spec) => self.join(spec)?,
            Input::Reorder(order) => self.reorder(order),
            Input::Leave { job } => self.leave(job)?,
            Input::SwitchFinished { job, phase, iteration } => self.switch_finished(job, phase, iteration, actions)?,
            Input::PhaseFinished { job, phase, iteration } => self.phase_finished(job, phase, iteration, actions)?,
            Input::SyncFinished { job, iteration } => self.sync_finished(job, iteration)?,
            Input::RolloutReleased { job, iteration } => self.rollout_released(job, iteration)?,
        }
        self.pump(actions);
        Ok(())
    }

    fn join(&mut self, spec: MemberSpec) -> Result<(), DispatchError> {
        let job = spec.job;
        if self.members.contains_key(&job) {
            return Err(DispatchError::AlreadyMember(job));
        }
        if spec.rollout_nodes.is_empty() || spec.rollout_nodes.windows(2).any(|w| w[0] >= w[1]) {
            return Err(DispatchError::BadSpec { job, reason: "rollout nodes must be a non-empty sorted set".into() });
        }
        if spec.iterations.is_some_and(|n| spec.start_iteration >= n) {
            return Err(DispatchError::BadSpec { job, reason: "no iterations left to run".into() });
        }
        if spec.staleness > MAX_STALENESS {
            let reason = format!("staleness {} is above the largest allowed, {MAX_STALENESS}", spec.staleness);
            return Err(DispatchError::BadSpec { job, reason });
        }
        if spec.resident {
            self.memory
                .admit(job, &spec.rollout_nodes, spec.rollout_state, spec.train_state)
                .map_err(|reason| DispatchError::Residency { job, reason })?;
        }
        // A newcomer joins at the back of the round in progress (one less than the most
        // served: the members at that level are already through it), at one level on every
        // resource it uses, so its k-th rollout and k-th training fall in the same round
        // everywhere (the timing model's rounds) and it starts without waiting a round.
        // Levels taken per resource instead can order it before a partner on the pool but
        // after it on their shared rollout node; first-come round-robin then serialised the
        // two for good (a 444 s meta-iteration became 683 s in a wild-trace replay).
        let late = self.train.level() > 0;
        let level = spec
            .rollout_nodes
            .iter()
            .filter_map(|n| self.rollout.get(n).map(Resource::level))
            .fold(self.train.level(), u64::max)
            .saturating_sub(1);
        let per_resource = self.per_resource_join;
        let level_on = |r: &Resource| if per_resource { r.level() } else { level };
        self.train.add_member(job, level_on(&self.train));
        for &n in &spec.rollout_nodes {
            let r = self.rollout.entry(n).or_default();
            let l = level_on(r);
            r.add_member(job, l);
        }
        self.record(job, LogKind::Join, None, spec.start_iteration, &spec.rollout_nodes, None);
        let seq = self.next_seq();
        let iteration = spec.start_iteration;
        let (rollout, train) = (LaneState::Idle, LaneState::Idle);
        let (rolled, rollout_seq, train_seq) = (iteration, seq, seq);
        let member = Member { spec, iteration, rolled, rollout, train, rollout_seq, train_seq, late };
        self.members.insert(job, member);
        Ok(())
    }

    fn reorder(&mut self, order: GroupOrder) {
        self.train.set_order(&order.train);
        for (n, r) in &mut self.rollout {
            r.set_order(order.rollout.get(n).map_or(&[][..], |v| v.as_slice()));
        }
        self.order = order;
    }

    fn leave(&mut self, job: JobId) -> Result<(), DispatchError> {
        let m = self.members.remove(&job).ok_or(DispatchError::UnknownJob(job))?;
        self.release_member(job, &m.spec.rollout_nodes);
        self.record(job, LogKind::Leave, None, m.iteration, &[], None);
        Ok(())
    }

    fn release_member(&mut self, job: JobId, nodes: &[u32]) {
        self.train.remove_member(job);
        for &n in nodes {
            let r = self.node(n);
            r.remove_member(job);
            // A node no member uses any more is forgotten (its last holder left with it).
            if r.served.is_empty() {
                self.rollout.remove(&n);
            }
        }
        self.memory.evict(job);
    }

    /// The member, if its `phase` lane is in state `want` for `iteration`; a barrier error
    /// otherwise.
    fn member_in(
        &mut self,
        job: JobId,
        phase: Phase,
        want: LaneState,
        iteration: u64,
    ) -> Result<&mut Member, DispatchError> {
        let m = self.members.get_mut(&job).ok_or(DispatchError::UnknownJob(job))?;
        let (state, at) = (m.lane(phase), m.lane_iteration(phase));
        if state != want || at != iteration {
            let reason = format!(
                "expected {phase:?} {want:?} of iteration {iteration}, but that lane is {state:?} in iteration {at} \
                 (trainings done {}, rollouts done {})",
                m.iteration, m.rolled
            );
            return Err(DispatchError::Barrier { job, reason });
        }
        Ok(m)
    }

    fn switch_finished(
        &mut self,
        job: JobId,
        phase: Phase,
        iteration: u64,
        actions: &mut Vec<Action>,
    ) -> Result<(), DispatchError> {
        let m = self.member_in(job, phase, LaneState::Switching, iteration)?;
        *m.lane_mut(phase) = LaneState::Running;
        let nodes = m.spec.rollout_nodes.clone();
        actions.push(self.start_action(job, phase, iteration, nodes));
        Ok(())
    }

    fn start_action(&mut self, job: JobId, phase: Phase, iteration: u64, nodes: Vec<u32>) -> Action {
        self.record(job, LogKind::PhaseStart, Some(phase), iteration, &nodes, None);
        match phase {
            Phase::Rollout => {
                let weights = self.members.get(&job).map_or(iteration, |m| m.iteration);
                Action::StartRollout { job, iteration, weights, nodes }
            }
            Phase::Train => Action::StartTraining { job, iteration },
        }
    }

    fn phase_finished(
        &mut self,
        job: JobId,
        phase: Phase,
        iteration: u64,
        actions: &mut Vec<Action>,
    ) -> Result<(), DispatchError> {
        let m = self.member_in(job, phase, LaneState::Running, iteration)?;
        let (sync, last) = (m.spec.sync, m.spec.iterations == Some(iteration + 1));
        match phase {
            Phase::Rollout => {
                let before = (m.rollout_ready(), m.train_ready());
                m.rollout = LaneState::Idle;
                m.rolled += 1;
                // Borrowed out and back to release the nodes without cloning the list.
                let nodes = std::mem::take(&mut m.spec.rollout_nodes);
                self.mark_ready(job, before, true);
                for &n in &nodes {
                    self.node(n).release(job);
                }
                self.record(job, LogKind::PhaseEnd, Some(phase), iteration, &nodes, None);
                if let Some(m) = self.members.get_mut(&job) {
                    m.spec.rollout_nodes = nodes;
                }
            }
            Phase::Train => {
                self.train.release(job);
                self.record(job, LogKind::PhaseEnd, Some(phase), iteration, &[], None);
                if last {
                    let m = self.members.remove(&job).expect("member checked above");
                    self.release_member(job, &m.spec.rollout_nodes);
                    self.record(job, LogKind::Completed, None, iteration + 1, &[], None);
                    actions.push(Action::Completed { job, iterations: iteration + 1 });
                } else {
                    if let Some(m) = self.members.get_mut(&job) {
                        m.train = LaneState::Syncing;
                    }
                    self.record(job, LogKind::SyncStart, None, iteration, &[], None);
                    actions.push(Action::BeginSync { job, iteration, duration: sync });
                }
            }
        }
        Ok(())
    }

    /// Stamps the FIFO place of each lane of `job` that has just become ready (`before`: the
    /// lanes' readiness before the change). A finished rollout stamps training first, with
    /// the current sequence number; a finished sync stamps rollouts first, with the next.
    fn mark_ready(&mut self, job: JobId, before: (bool, bool), train_first: bool) {
        let Some(m) = self.members.get(&job) else { return };
        let now = (m.rollout_ready(), m.train_ready());
        let mut stamps = [(Phase::Train, now.1 && !before.1), (Phase::Rollout, now.0 && !before.0)];
        if !train_first {
            stamps.reverse();
        }
        for (phase, newly) in stamps {
            if !newly {
                continue;
            }
            let seq = if train_first && phase == Phase::Train {
                let s = self.seq;
                self.seq += 1;
                s
            } else {
                self.next_seq()
            };
            let m = self.members.get_mut(&job).expect("member checked above");
            match phase {
                Phase::Rollout => m.rollout_seq = seq,
                Phase::Train => m.train_seq = seq,
            }
        }
    }

    fn rollout_released(&mut self, job: JobId, iteration: u64) -> Result<(), DispatchError> {
        let m = self.member_in(job, Phase::Rollout, LaneState::Running, iteration)?;
        let nodes = m.spec.rollout_nodes.clone();
        for &n in &nodes {
            self.node(n).release(job);
        }
        self.record(job, LogKind::RolloutReleased, Some(Phase::Rollout), iteration, &nodes, None);
        Ok(())
    }

    fn sync_finished(&mut self, job: JobId, iteration: u64) -> Result<(), DispatchError> {
        let m = self.member_in(job, Phase::Train, LaneState::Syncing, iteration)?;
        let before = (m.rollout_ready(), m.train_ready());
        m.iteration += 1;
        m.train = LaneState::Idle;
        self.mark_ready(job, before, false);
        self.record(job, LogKind::SyncEnd, None, iteration, &[], None);
        Ok(())
    }

    /// A member's rollout node (every member's nodes have an entry while it is a member).
    fn node(&mut self, n: u32) -> &mut Resource {
        self.rollout.get_mut(&n).expect("a member's rollout node has a resource")
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Starts every phase that can start now: training first (one pool), then rollouts in
    /// FIFO-ready order on free nodes.
    fn pump(&mut self, actions: &mut Vec<Action>) {
        if self.train.holder.is_none() {
            let next = self
                .members
                .values()
                .filter(|m| m.train_ready() && self.due(&self.train, m.spec.job))
                .min_by_key(|m| m.train_seq)
                .map(|m| m.spec.job);
            if let Some(job) = next {
                self.start(job, Phase::Train, actions);
            }
        }
        // FIFO over members ready for rollout: repeatedly start the earliest-ready one that
        // can start now. Starting a rollout only takes nodes away, so this equals one pass in
        // FIFO order, without allocating.
        while let Some(job) = self
            .members
            .values()
            .filter(|m| m.rollout_ready() && self.can_start_rollout(m))
            .min_by_key(|m| m.rollout_seq)
            .map(|m| m.spec.job)
        {
            self.start(job, Phase::Rollout, actions);
        }
    }

    fn can_start_rollout(&self, m: &Member) -> bool {
        m.spec.rollout_nodes.iter().all(|&n| {
            let r = &self.rollout[&n];
            r.holder.is_none() && self.due(r, m.spec.job)
        })
    }

    /// Whether fairness lets `job` take `r` now.
    fn due(&self, r: &Resource, job: JobId) -> bool {
        self.fairness == Fairness::Fifo || r.eligible(job, |o| self.holds_no_one_up(o))
    }

    /// A member that joined a running group and is still in its first rollout, on rollout
    /// nodes no other member uses, holds no one up on the training pool: waiting for it idled
    /// the pool for its whole first (cold) rollout and then its training (a partner missed
    /// its SLO that way in the default workload with every job at k = 1). Whoever passes it
    /// puts it level with itself ([`Dispatcher::level_passed_newcomers`]), so it is due right
    /// after and waits at most one phase.
    fn holds_no_one_up(&self, job: JobId) -> bool {
        self.members.get(&job).is_some_and(|m| {
            m.late
                && m.iteration == m.spec.start_iteration
                && m.train == LaneState::Idle
                && !m.train_ready()
                && m.spec.rollout_nodes.iter().all(|n| self.rollout.get(n).is_some_and(|r| r.served.len() == 1))
        })
    }

    /// Puts every newcomer `job` passes over on the training pool level with it, on all of
    /// the newcomer's resources alike: raised on the pool alone, its rollouts and trainings
    /// fell into different rounds, and a later partner on its nodes was then served out of
    /// step (tried: 95% of jobs within SLO for the paper's Weave on the default workload).
    fn level_passed_newcomers(&mut self, job: JobId) {
        let taker = self.train.place(job);
        let passed: Vec<(JobId, u64)> = self
            .train
            .served
            .iter()
            .filter(|&(&o, _)| o != job && self.train.place(o) < taker && self.holds_no_one_up(o))
            .map(|(&o, &served)| (o, taker.0 - served))
            .collect();
        for (o, raise) in passed {
            self.train.served.insert(o, taker.0);
            let nodes = self.members[&o].spec.rollout_nodes.clone();
            for n in nodes {
                if let Some(served) = self.node(n).served.get_mut(&o) {
                    *served += raise;
                }
            }
        }
    }

    fn start(&mut self, job: JobId, phase: Phase, actions: &mut Vec<Action>) {
        let m = &self.members[&job];
        let (resident, costs, iteration) = (m.spec.resident, m.spec.costs, m.lane_iteration(phase));
        // Only a rollout names nodes; the training pool is the group's whole pool.
        let nodes = if phase == Phase::Rollout { m.spec.rollout_nodes.clone() } else { Vec::new() };
        let switch = match phase {
            Phase::Train => {
                if self.fairness == Fairness::RoundRobin {
                    self.level_passed_newcomers(job);
                }
                self.train.take(job, resident)
            }
            Phase::Rollout => {
                // All nodes switch in parallel; one cold node makes the switch cold.
                let mut kind = None;
                for &n in &nodes {
                    kind = kind.max(self.node(n).take(job, resident));
                }
                kind
            }
        };
        let m = self.members.get_mut(&job).expect("member exists");
        match switch {
            Some(kind) => {
                *m.lane_mut(phase) = LaneState::Switching;
                let duration = costs.get(phase, kind);
                self.record(job, LogKind::SwitchStart, Some(phase), iteration, &nodes, Some(kind));
                actions.push(Action::BeginSwitch { job, phase, iteration, kind, duration, nodes });
            }
            None => {
                *m.lane_mut(phase) = LaneState::Running;
                let a = self.start_action(job, phase, iteration, nodes);
                actions.push(a);
            }
        }
    }

    fn record(
        &mut self,
        job: JobId,
        kind: LogKind,
        phase: Option<Phase>,
        iteration: u64,
        nodes: &[u32],
        switch: Option<SwitchKind>,
    ) {
        if self.logging {
            let nodes = nodes.to_vec();
            self.log.push(LogEntry { time: self.now, job, kind, phase, iteration, nodes, switch, until: None });
        }
    }
}

#[cfg(test)]
mod tests;
