//! Group timing: the steady state of a candidate group.
//!
//! Closed form [paper, Theorem 1], extended with switch and sync costs (the prototype ignored
//! both): member j's co-executed cycle is `T'(j) = roll + s_r + train + s_t + sync`, where
//! `s_r` is its rollout switch when its nodes are shared and `s_t` its training switch when
//! the group has other members (round-robin hands the pool over every phase). With
//! `T_cycle = max_j T'(j)` and
//! `T_load = max(sum_j (train + s_t), max over rollout nodes n of sum_{j on n} (roll + s_r))`,
//! the group is saturated when `T_load >= T_cycle`; otherwise the meta-iteration lasts
//! `T_cycle` and every member completes one iteration per meta-iteration.
//!
//! The closed form is a bound, not a prediction: the dispatcher's greedy first-come order can
//! miss it (`tests/counterexample.rs`). What the group really runs is predicted by
//! [`evaluate`]: the cyclic order that minimises the period ([`crate::order::best`]) and that
//! order's exact period, the maximum cycle mean of its event graph ([`crate::cycle`]). The
//! dispatcher follows the same order, so the prediction is what it runs with deterministic
//! durations; [`simulate`] drives it event by event, the test oracle.

use crate::memory::GroupLimits;
use crate::{Action, Dispatcher, Fairness, Input, MemberSpec, Phase, SwitchCosts};
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{Bytes, EventQueue, JobId, Micros};
use weave_model::SwitchKind;

/// One member as the timing model sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingMember {
    pub job: JobId,
    pub rollout: Micros,
    pub train: Micros,
    /// Group-local rollout nodes (sorted, non-empty).
    pub nodes: Vec<u32>,
    pub costs: SwitchCosts,
    pub sync: Micros,
    /// State cached in host DRAM (warm switches); `false` = every switch is cold.
    pub resident: bool,
    /// Bounded staleness k (0: on-policy); see [`crate::MemberSpec::staleness`].
    pub staleness: u32,
}

impl TimingMember {
    /// Solo iteration: the job alone on its own nodes never switches. With staleness k its
    /// rollouts run up to k iterations ahead, so the period is the longest of the rollout,
    /// the training with its sync, and the whole iteration spread over k + 1 iterations
    /// (rounded up to the microsecond).
    pub fn solo(&self) -> Micros {
        solo_period(self.rollout, self.train + self.sync, self.staleness)
    }

    fn switch(&self, phase: Phase) -> Micros {
        self.costs.get(phase, if self.resident { SwitchKind::Warm } else { SwitchKind::Cold })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberTiming {
    pub job: JobId,
    pub solo: Micros,
    /// Steady-state co-executed iteration time.
    pub coexec: Micros,
    pub slowdown: f64,
}

/// Time shares of one resource over a meta-iteration (they sum to 1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolUse {
    /// `training` or `r<i>`.
    pub resource: String,
    pub busy: f64,
    pub switching: f64,
    pub idle: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupTiming {
    pub meta_iteration: Micros,
    pub t_cycle: Micros,
    pub t_load: Micros,
    pub saturated: bool,
    /// `closed-form` or `event-level`.
    pub method: &'static str,
    pub members: Vec<MemberTiming>,
    pub pools: Vec<PoolUse>,
}

impl GroupTiming {
    pub fn max_slowdown(&self) -> f64 {
        self.members.iter().map(|m| m.slowdown).fold(0.0, f64::max)
    }
}

/// A job's solo period: rollouts `roll` apart, trainings with their sync `train` apart, with
/// staleness k (see [`TimingMember::solo`]); `roll + train` when k = 0.
pub fn solo_period(roll: Micros, train: Micros, staleness: u32) -> Micros {
    pipelined(roll, train, staleness, true)
}

/// [`solo_period`] in floating point, unrounded (admission's variation samples scale
/// durations by factors): `roll + train` when k = 0, exactly.
pub fn solo_period_f64(roll: f64, train: f64, staleness: u32) -> f64 {
    if staleness == 0 {
        return roll + train;
    }
    ((roll + train) / f64::from(staleness + 1)).max(roll).max(train)
}

/// The period of one job's two lanes on their own: rollouts `roll` apart, trainings (with
/// sync) `train` apart, and rollout n waiting for training n - k - 1: max(roll, train,
/// (roll + train) / (k + 1)), the last rounded up or down.
fn pipelined(roll: Micros, train: Micros, staleness: u32, round_up: bool) -> Micros {
    let k1 = u64::from(staleness) + 1;
    let total = (roll + train).0;
    let spread = if round_up { total.div_ceil(k1) } else { total / k1 };
    Micros(spread).max(roll).max(train)
}

fn rollout_shared(members: &[TimingMember], j: usize) -> bool {
    members.iter().enumerate().any(|(i, m)| i != j && m.nodes.iter().any(|n| members[j].nodes.contains(n)))
}

/// Per-member cycle with overheads, and the two loads.
struct Loads {
    roll_sw: Vec<Micros>,
    train_sw: Vec<Micros>,
    t_cycle: Micros,
    t_load: Micros,
    /// `t_cycle` as if every member were on-policy (rollout, training and sync in a row).
    t_cycle_sync: Micros,
}

/// Each member's rollout and training switch in steady state: a rollout switches when a node
/// is shared, a training phase when the group has other members.
pub fn overheads(members: &[TimingMember]) -> (Vec<Micros>, Vec<Micros>) {
    let l = loads(members);
    (l.roll_sw, l.train_sw)
}

fn loads(members: &[TimingMember]) -> Loads {
    loads_scaled(members, None)
}

/// [`loads`] with each member's rollout and training scaled by `factors[j]` (one iteration's
/// draw relative to the estimate).
fn loads_scaled(members: &[TimingMember], factors: Option<&[(f64, f64)]>) -> Loads {
    let many = members.len() > 1;
    let scaled = |j: usize| -> (Micros, Micros) {
        let m = &members[j];
        match factors {
            Some(f) => (m.rollout.scale(f[j].0), m.train.scale(f[j].1)),
            None => (m.rollout, m.train),
        }
    };
    let roll_sw: Vec<Micros> = (0..members.len())
        .map(|j| if rollout_shared(members, j) { members[j].switch(Phase::Rollout) } else { Micros::ZERO })
        .collect();
    let train_sw: Vec<Micros> =
        members.iter().map(|m| if many { m.switch(Phase::Train) } else { Micros::ZERO }).collect();
    let mut t_cycle = Micros::ZERO;
    let mut t_cycle_sync = Micros::ZERO;
    let mut train_load = Micros::ZERO;
    let mut node_load: BTreeMap<u32, Micros> = BTreeMap::new();
    for (j, m) in members.iter().enumerate() {
        let (roll, train) = scaled(j);
        // A lower bound: the spread over k + 1 iterations rounds down.
        t_cycle = t_cycle.max(pipelined(roll + roll_sw[j], train + train_sw[j] + m.sync, m.staleness, false));
        t_cycle_sync = t_cycle_sync.max(roll + roll_sw[j] + train + train_sw[j] + m.sync);
        train_load += train + train_sw[j];
        for n in &m.nodes {
            *node_load.entry(*n).or_default() += roll + roll_sw[j];
        }
    }
    let t_load = node_load.values().copied().fold(train_load, Micros::max);
    Loads { roll_sw, train_sw, t_cycle, t_load, t_cycle_sync }
}

/// `max(T_cycle, T_load)` for one iteration's draws: `factors[j]` scales member j's rollout
/// and training. Admission averages this over sampled draws to see what variation costs.
pub fn bound_scaled(members: &[TimingMember], factors: &[(f64, f64)]) -> Micros {
    let l = loads_scaled(members, Some(factors));
    l.t_cycle.max(l.t_load)
}

/// `(T_cycle, T_load)` with switch and sync costs: `max(T_cycle, T_load)` is a lower bound on
/// any schedule's meta-iteration.
pub fn bounds(members: &[TimingMember]) -> (Micros, Micros) {
    let l = loads(members);
    (l.t_cycle, l.t_load)
}

/// True when the brief's theorem does not apply.
pub fn is_saturated(members: &[TimingMember]) -> bool {
    let l = loads(members);
    l.t_load >= l.t_cycle
}

/// Whether the group leaves no idle bubble a newcomer could fill: its load reaches its
/// members' synchronous cycle (the paper's saturation, `is_saturated` when all are on-policy).
/// A stale member's pipelined cycle equals its bottleneck's load by construction, so judged by
/// that every group with one would look full, even with a pool mostly idle.
pub fn is_full(members: &[TimingMember]) -> bool {
    let l = loads(members);
    l.t_load >= l.t_cycle_sync
}

/// The closed form; `None` for a saturated (or empty) group.
pub fn closed_form(members: &[TimingMember]) -> Option<GroupTiming> {
    if members.is_empty() {
        return None;
    }
    let l = loads(members);
    if l.t_load >= l.t_cycle {
        return None;
    }
    Some(steady(members, &l, l.t_cycle, "closed-form"))
}

/// A group in which every member runs one iteration per `meta` (one phase per round on every
/// resource).
fn steady(members: &[TimingMember], l: &Loads, meta: Micros, method: &'static str) -> GroupTiming {
    let frac = |t: Micros| t.0 as f64 / meta.0.max(1) as f64;
    let mut pools = Vec::new();
    let train_busy: Micros = members.iter().map(|m| m.train).sum();
    let train_sw: Micros = l.train_sw.iter().copied().sum();
    pools.push(pool_use("training".into(), frac(train_busy), frac(train_sw)));
    let mut nodes: BTreeMap<u32, (Micros, Micros)> = BTreeMap::new();
    for (j, m) in members.iter().enumerate() {
        for n in &m.nodes {
            let e = nodes.entry(*n).or_default();
            e.0 += m.rollout;
            e.1 += l.roll_sw[j];
        }
    }
    pools.extend(nodes.into_iter().map(|(n, (b, s))| pool_use(format!("r{n}"), frac(b), frac(s))));
    GroupTiming {
        meta_iteration: meta,
        t_cycle: l.t_cycle,
        t_load: l.t_load,
        saturated: l.t_load >= l.t_cycle,
        method,
        members: members.iter().map(|m| member_timing(m, meta)).collect(),
        pools,
    }
}

fn pool_use(resource: String, busy: f64, switching: f64) -> PoolUse {
    PoolUse { resource, busy, switching, idle: (1.0 - busy - switching).max(0.0) }
}

fn member_timing(m: &TimingMember, coexec: Micros) -> MemberTiming {
    let solo = m.solo();
    MemberTiming { job: m.job, solo, coexec, slowdown: coexec.0 as f64 / solo.0.max(1) as f64 }
}

/// The group's steady state under the order the dispatcher follows ([`crate::order::best`]):
/// its exact period, every member one iteration per period.
pub fn evaluate(members: &[TimingMember]) -> GroupTiming {
    let (_, period) = crate::order::best(members);
    steady(members, &loads(members), Micros(period.ceil_micros()), "cycle-mean")
}

/// Event-level evaluation, the oracle [`evaluate`] is tested against: drives the real
/// dispatcher (in the order [`crate::order::best`] chooses) with deterministic durations for
/// `iterations` per member and averages the second half, which after the transient is the
/// exact period up to the window's rounding.
///
/// Memoised per thread: the run is a pure function of the members' durations, costs, node
/// sets and the order of their ids (the dispatcher looks at ids only to order members), so
/// the memo is keyed by exactly that and returns what a fresh run would, with the callers'
/// own ids. Admission and consolidation evaluate the same group shapes over and over.
pub fn simulate(members: &[TimingMember], iterations: u64) -> GroupTiming {
    let key = memo_key(members, iterations);
    let cached = SIMULATED.with(|m| m.borrow().get(&key).cloned());
    let mut t = match cached {
        Some(t) => t,
        None => {
            let t = simulate_uncached(members, iterations);
            SIMULATED.with(|m| {
                let mut m = m.borrow_mut();
                if m.len() >= MEMO_LIMIT {
                    m.clear();
                }
                m.insert(key, t.clone());
            });
            t
        }
    };
    for (mt, m) in t.members.iter_mut().zip(members) {
        mt.job = m.job;
    }
    t
}

/// Entries a per-thread memo holds before it starts over.
pub(crate) const MEMO_LIMIT: usize = 1 << 16;

thread_local! {
    static SIMULATED: std::cell::RefCell<std::collections::HashMap<Vec<u64>, GroupTiming>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Everything [`simulate`]'s (and the order search's) result depends on: per member (in
/// order) the rank of its id, its durations, costs, residency, staleness and nodes; and the
/// iteration count.
pub(crate) fn memo_key(members: &[TimingMember], iterations: u64) -> Vec<u64> {
    let mut key = Vec::with_capacity(members.len() * 10 + 1);
    key.push(iterations);
    for m in members {
        let rank = members.iter().filter(|o| o.job < m.job).count() as u64;
        let c = m.costs;
        key.extend([
            rank,
            m.rollout.0,
            m.train.0,
            m.sync.0,
            c.rollout_warm.0,
            c.rollout_cold.0,
            c.train_warm.0,
            c.train_cold.0,
        ]);
        key.push(m.resident as u64);
        key.push(u64::from(m.staleness));
        key.push(m.nodes.len() as u64);
        key.extend(m.nodes.iter().map(|&n| n as u64));
    }
    key
}

fn simulate_uncached(members: &[TimingMember], iterations: u64) -> GroupTiming {
    let l = loads(members);
    let run = run_group_unlogged(members, iterations.max(8), Fairness::RoundRobin);
    let lo = (iterations.max(8) / 2) as usize;
    // Stop short of the last iterations: as members finish, the others run alone.
    let hi = iterations.max(8) as usize - 3;
    let mut out = Vec::new();
    for m in members {
        let ends = &run.train_ends[&m.job];
        let period = Micros((ends[hi].0 - ends[lo].0) / (hi - lo) as u64);
        out.push(member_timing(m, period));
    }
    let meta = out.iter().map(|m| m.coexec).fold(Micros::ZERO, Micros::max);
    // Measure pool use over whole meta-iterations of the slowest member, in steady state.
    let slowest = out.iter().max_by_key(|m| m.coexec).map(|m| m.job);
    let pools = match slowest {
        Some(job) => run.usage(run.train_ends[&job][lo], run.train_ends[&job][hi]),
        None => Vec::new(),
    };
    GroupTiming {
        meta_iteration: meta,
        t_cycle: l.t_cycle,
        t_load: l.t_load,
        saturated: l.t_load >= l.t_cycle,
        method: "event-level",
        members: out,
        pools,
    }
}

/// The exact period a run settled into, from one member's training ends: the smallest `c` such
/// that the last `c * SETTLED` iterations before the final three (where members finish) all
/// advance by the same amount every `c` iterations; `None` if no `c <= max_cycle` shows that.
pub fn settled_period(ends: &[Micros], max_cycle: usize) -> Option<crate::cycle::Period> {
    const SETTLED: usize = 6;
    let hi = ends.len().checked_sub(3)?;
    (1..=max_cycle).find_map(|c| {
        let lo = hi.checked_sub(c * SETTLED)?;
        let step = ends[lo + c].0.checked_sub(ends[lo].0)?;
        (lo..hi - c)
            .all(|i| ends[i + c].0.checked_sub(ends[i].0) == Some(step))
            .then(|| crate::cycle::Period::new(step, c as u64))
    })
}

/// A resource of a group: the training pool or one rollout node. Orders training first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    Training,
    Rollout(u32),
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lane::Training => f.write_str("training"),
            Lane::Rollout(n) => write!(f, "r{n}"),
        }
    }
}

/// What one deterministic run of a group produced.
pub struct GroupRun {
    /// End time of every training phase, per member, by iteration.
    pub train_ends: BTreeMap<JobId, Vec<Micros>>,
    /// (resource, start, end, is_switch) intervals.
    pub intervals: Vec<(Lane, Micros, Micros, bool)>,
    /// Every dispatcher decision, for timelines and golden tests.
    pub log: Vec<crate::LogEntry>,
    pub end: Micros,
}

impl GroupRun {
    fn usage(&self, start: Micros, end: Micros) -> Vec<PoolUse> {
        let span = end.saturating_sub(start).0.max(1) as f64;
        let mut acc: BTreeMap<Lane, (u64, u64)> = BTreeMap::new();
        for (res, a, b, is_switch) in &self.intervals {
            let clipped = (*b).min(end).saturating_sub((*a).max(start)).0;
            let e = acc.entry(*res).or_default();
            if *is_switch {
                e.1 += clipped;
            } else {
                e.0 += clipped;
            }
        }
        // Training first, then rollout nodes in numeric order (the lanes' order).
        acc.iter()
            .map(|(lane, (busy, sw))| pool_use(lane.to_string(), *busy as f64 / span, *sw as f64 / span))
            .collect()
    }
}

/// Runs every member for `iterations` iterations from a cold start, all joining at time 0.
pub fn run_group(members: &[TimingMember], iterations: u64) -> GroupRun {
    run_group_with(members, iterations, Fairness::RoundRobin)
}

/// [`run_group`] with a choice of fairness. Under `Fifo` (the prototype's rules) same-instant
/// events are ordered by (time, event kind, job id).
pub fn run_group_with(members: &[TimingMember], iterations: u64, fairness: Fairness) -> GroupRun {
    run_logged(members, iterations, fairness, true, true)
}

/// The dispatcher before cyclic orders: round-robin with ties going to the member ready first
/// and newcomers joining level per resource (kept to measure what the order changes).
pub fn run_group_first_come(members: &[TimingMember], iterations: u64) -> GroupRun {
    run_logged(members, iterations, Fairness::RoundRobin, false, false)
}

/// [`run_group_with`] without the decision log (predictions do not need it).
pub fn run_group_unlogged(members: &[TimingMember], iterations: u64, fairness: Fairness) -> GroupRun {
    run_logged(members, iterations, fairness, false, true)
}

fn run_logged(members: &[TimingMember], iterations: u64, fairness: Fairness, log: bool, ordered: bool) -> GroupRun {
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    d.set_fairness(fairness);
    d.set_logging(log);
    d.set_per_resource_join(!ordered);
    let by_job_id = fairness == Fairness::Fifo;
    let by_job: BTreeMap<JobId, &TimingMember> = members.iter().map(|m| (m.job, m)).collect();
    let mut queue: EventQueue<Input> = EventQueue::new();
    let mut run = GroupRun { train_ends: BTreeMap::new(), intervals: Vec::new(), log: Vec::new(), end: Micros::ZERO };
    let mut pending: Vec<Action> = Vec::new();
    for m in members {
        let spec = MemberSpec {
            job: m.job,
            rollout_nodes: m.nodes.clone(),
            costs: m.costs,
            sync: m.sync,
            resident: m.resident,
            staleness: m.staleness,
            rollout_state: Bytes(0),
            train_state: Bytes(0),
            iterations: Some(iterations),
            start_iteration: 0,
        };
        pending.extend(d.handle(Micros::ZERO, Input::Join(spec)).expect("distinct members join"));
        run.train_ends.insert(m.job, Vec::new());
    }
    if fairness == Fairness::RoundRobin && ordered {
        let (order, _) = crate::order::best(members);
        pending.extend(d.handle(Micros::ZERO, Input::Reorder(order)).expect("a reorder is always accepted"));
    }
    let mut now = Micros::ZERO;
    loop {
        for a in pending.drain(..) {
            schedule(&a, now, &by_job, &mut queue, &mut run, by_job_id);
        }
        let Some((t, input)) = queue.pop() else { break };
        now = t;
        if let Input::PhaseFinished { job, phase: Phase::Train, .. } = input {
            run.train_ends.get_mut(&job).expect("member").push(t);
        }
        pending.extend(d.handle(t, input).expect("the driver only reports what the dispatcher started"));
    }
    run.end = now;
    run.log = d.take_log();
    run
}

/// Turns an action into its completion event. Same-instant completions are processed in
/// class order: training end, rollout end, sync end, training switch end, rollout switch end.
fn schedule(
    a: &Action,
    now: Micros,
    by_job: &BTreeMap<JobId, &TimingMember>,
    queue: &mut EventQueue<Input>,
    run: &mut GroupRun,
    by_job_id: bool,
) {
    const TRAINING: &[u32] = &[];
    // (class, input, duration, rollout nodes or none for the training pool, lane used?, switch?)
    let (class, input, dur, nodes, on_lane, is_switch) = match a {
        Action::StartTraining { job, iteration } => {
            let input = Input::PhaseFinished { job: *job, phase: Phase::Train, iteration: *iteration };
            (0, input, by_job[job].train, TRAINING, true, false)
        }
        Action::StartRollout { job, iteration, nodes, .. } => {
            let input = Input::PhaseFinished { job: *job, phase: Phase::Rollout, iteration: *iteration };
            (1, input, by_job[job].rollout, nodes.as_slice(), true, false)
        }
        Action::BeginSync { job, iteration, duration } => {
            (2, Input::SyncFinished { job: *job, iteration: *iteration }, *duration, TRAINING, false, false)
        }
        Action::BeginSwitch { job, phase, iteration, duration, nodes, .. } => {
            let input = Input::SwitchFinished { job: *job, phase: *phase, iteration: *iteration };
            match phase {
                Phase::Train => (3, input, *duration, TRAINING, true, true),
                Phase::Rollout => (4, input, *duration, nodes.as_slice(), true, true),
            }
        }
        Action::Completed { .. } => return,
    };
    let end = now + dur;
    if on_lane {
        if nodes.is_empty() {
            run.intervals.push((Lane::Training, now, end, is_switch));
        }
        for n in nodes {
            run.intervals.push((Lane::Rollout(*n), now, end, is_switch));
        }
    }
    let key = if by_job_id { a.job().0 as u64 } else { 0 };
    queue.push_keyed(end, class, key, input);
}
