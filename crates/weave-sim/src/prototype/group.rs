//! The prototype's groups and their simulated steady state.

use super::PJob;
use std::collections::HashMap;
use weave_core::{JobId, Micros};
use weave_dispatch::timing::{run_group_unlogged, Lane};
use weave_dispatch::{Fairness, SwitchCosts, TimingMember};

/// The prototype's hourly rate of a group with `rollout_nodes` rollout nodes and one training
/// node, in its own float arithmetic: `1.0 * 1.0 + R * (1.0 / 3.0)`. 1/3 rounds differently
/// for different R, which decides ties between candidates exactly as the prototype does.
pub fn rate(rollout_nodes: usize) -> f64 {
    1.0 * 1.0 + rollout_nodes as f64 * (1.0 / 3.0)
}

#[derive(Clone, Debug)]
pub struct PGroup {
    /// Rollout node ids (global, never reused).
    pub nodes: Vec<u32>,
    /// (job index, its rollout node ids).
    pub members: Vec<(usize, Vec<u32>)>,
    pub period: Micros,
    pub train_busy: f64,
    /// Busy fraction of each rollout node, in `nodes` order.
    pub node_busy: Vec<f64>,
    /// The prototype's running cost of the group: `+= delta` on a join, `rate(R)` again on a
    /// departure.
    pub cost: f64,
}

impl PGroup {
    /// A group of `members` on `nodes` with its simulated steady state, at its plain rate.
    pub fn new(nodes: Vec<u32>, members: Vec<(usize, Vec<u32>)>, sim: Sim) -> PGroup {
        PGroup {
            cost: rate(nodes.len()),
            nodes,
            members,
            period: sim.period,
            train_busy: sim.train_busy,
            node_busy: sim.node_busy,
        }
    }

    pub fn rate(&self) -> f64 {
        rate(self.nodes.len())
    }

    /// Mean utilisation over the rollout nodes and the training node.
    pub fn utilisation(&self) -> f64 {
        (self.node_busy.iter().sum::<f64>() + self.train_busy) / (self.node_busy.len() + 1) as f64
    }
}

/// The simulated steady state of a membership.
#[derive(Clone, Debug)]
pub struct Sim {
    pub period: Micros,
    pub train_busy: f64,
    pub node_busy: Vec<f64>,
}

/// Simulations by membership. A run depends only on the members' durations, their node sets
/// (as positions in the group's node list) and the order of their job ids (the FIFO ties), so
/// equal keys give equal runs: the memo returns exactly what a fresh run would.
#[derive(Default)]
pub struct SimMemo {
    runs: HashMap<Vec<u64>, Sim>,
}

impl SimMemo {
    pub fn simulate(&mut self, jobs: &[PJob], nodes: &[u32], members: &[(usize, Vec<u32>)], iterations: u64) -> Sim {
        let local = |n: &u32| nodes.iter().position(|x| x == n).expect("member nodes are group nodes") as u64;
        let mut key = vec![iterations, nodes.len() as u64];
        for (j, ns) in members {
            let rank = members.iter().filter(|(o, _)| o < j).count() as u64;
            key.extend([rank, jobs[*j].disagg.rollout.0, jobs[*j].disagg.train.0, ns.len() as u64]);
            key.extend(ns.iter().map(local));
        }
        if let Some(s) = self.runs.get(&key) {
            return s.clone();
        }
        let s = simulate(jobs, nodes, members, iterations);
        self.runs.insert(key, s.clone());
        s
    }
}

/// 100 iterations of every member with the dispatcher in plain-FIFO mode; the period is the
/// makespan over the iteration count.
fn simulate(jobs: &[PJob], nodes: &[u32], members: &[(usize, Vec<u32>)], iterations: u64) -> Sim {
    let local = |n: &u32| nodes.iter().position(|x| x == n).expect("member nodes are group nodes") as u32;
    let tm: Vec<TimingMember> = members
        .iter()
        .map(|(j, ns)| TimingMember {
            job: JobId(*j as u32),
            rollout: jobs[*j].disagg.rollout,
            train: jobs[*j].disagg.train,
            nodes: ns.iter().map(local).collect(),
            costs: SwitchCosts::default(),
            sync: Micros::ZERO,
            resident: true,
            staleness: 0,
        })
        .collect();
    let run = run_group_unlogged(&tm, iterations, Fairness::Fifo);
    let period = Micros(run.end.0 / iterations.max(1));
    let span = run.end.0.max(1) as f64;
    let mut node_busy = vec![0.0; nodes.len()];
    let mut train_busy = 0.0;
    for (lane, a, b, _) in &run.intervals {
        let f = (b.0 - a.0) as f64 / span;
        match lane {
            Lane::Rollout(i) => node_busy[*i as usize] += f,
            Lane::Training => train_busy += f,
        }
    }
    Sim { period, train_busy, node_busy }
}

/// All `k`-subsets of `items`, in lexicographic order.
pub fn combinations(items: &[u32], k: usize) -> Vec<Vec<u32>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        for mut rest in combinations(&items[i + 1..], k - 1) {
            rest.insert(0, items[i]);
            out.push(rest);
        }
    }
    out
}
