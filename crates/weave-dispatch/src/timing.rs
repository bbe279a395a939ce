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

pub use crate::load::{
    bound_scaled, bounds, is_full, is_saturated, overheads, solo_period, solo_period_f64, TimingMember,
};
use crate::load::{loads, memo_key, Loads, MEMO_LIMIT};
use crate::memory::GroupLimits;
use crate::{Action, Dispatcher, Fairness, Input, MemberSpec, Phase};
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{Bytes, EventQueue, JobId, Micros};

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

thread_local! {
    static SIMULATED: std::cell::RefCell<std::collections::HashMap<Vec<u64>, GroupTiming>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
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
