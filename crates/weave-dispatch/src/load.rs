//! A member as the timing model sees it, and what follows from the members alone, without a
//! schedule: each member's steady-state switches, the cycle and load bounds, saturation, a
//! job's solo period, and the key under which a group's timing is memoised. Below both the
//! order search and the group timing that uses it.

use crate::Phase;
use crate::SwitchCosts;
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{JobId, Micros};
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
pub(crate) struct Loads {
    pub(crate) roll_sw: Vec<Micros>,
    pub(crate) train_sw: Vec<Micros>,
    pub(crate) t_cycle: Micros,
    pub(crate) t_load: Micros,
    /// `t_cycle` as if every member were on-policy (rollout, training and sync in a row).
    pub(crate) t_cycle_sync: Micros,
}

/// Each member's rollout and training switch in steady state: a rollout switches when a node
/// is shared, a training phase when the group has other members.
pub fn overheads(members: &[TimingMember]) -> (Vec<Micros>, Vec<Micros>) {
    let l = loads(members);
    (l.roll_sw, l.train_sw)
}

pub(crate) fn loads(members: &[TimingMember]) -> Loads {
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

/// Entries a per-thread memo holds before it starts over.
pub(crate) const MEMO_LIMIT: usize = 1 << 16;

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
