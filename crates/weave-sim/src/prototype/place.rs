//! Placement under the prototype's rules: its Weave, Random and MostIdle.

use super::group::{combinations, rate, PGroup, Sim, SimMemo};
use super::{PJob, ProtoConfig, ProtoPolicyKind};
use rand::Rng;
use weave_model::{named_stream, Stream};

/// Admission kinds, as the admission split counts them.
pub const DIRECT: usize = 0;
pub const SCALING: usize = 1;
pub const NEW_GROUP: usize = 2;

/// Groups and who is where. Emptied groups stay in the list (indices name groups) but are
/// never candidates again: the prototype deletes them.
pub struct State<'a> {
    pub jobs: &'a [PJob],
    pub cfg: &'a ProtoConfig,
    pub policy: ProtoPolicyKind,
    pub groups: Vec<PGroup>,
    pub job_group: Vec<Option<usize>>,
    /// Each member's period as its throughput sees it: set when its group changes by a join,
    /// not refreshed after departures (the prototype's accounting).
    pub member_period: Vec<weave_core::Micros>,
    next_node: u32,
    pub admissions: [u64; 3],
    memo: SimMemo,
    seed: u64,
}

/// The best candidate so far during one Weave admission.
struct Choice {
    delta: f64,
    group: usize,
    members: Vec<(usize, Vec<u32>)>,
    nodes: Vec<u32>,
    kind: usize,
    sim: Sim,
}

impl<'a> State<'a> {
    pub fn new(jobs: &'a [PJob], cfg: &'a ProtoConfig, policy: ProtoPolicyKind, seed: u64) -> Self {
        State {
            jobs,
            cfg,
            policy,
            groups: Vec::new(),
            job_group: vec![None; jobs.len()],
            member_period: vec![weave_core::Micros::ZERO; jobs.len()],
            next_node: 0,
            admissions: [0; 3],
            memo: SimMemo::default(),
            seed,
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.groups.len()).filter(|&g| !self.groups[g].members.is_empty()).collect()
    }

    fn fresh_nodes(&self, w: usize) -> Vec<u32> {
        (0..w as u32).map(|i| self.next_node + i).collect()
    }

    fn simulate(&mut self, nodes: &[u32], members: &[(usize, Vec<u32>)]) -> Sim {
        self.memo.simulate(self.jobs, nodes, members, self.cfg.sim_iterations)
    }

    pub fn admit(&mut self, j: usize) {
        match self.policy {
            ProtoPolicyKind::Weave => self.admit_weave(j),
            ProtoPolicyKind::Random | ProtoPolicyKind::MostIdle => self.admit_baseline(j),
        }
    }

    /// Direct packing on every choice of existing nodes of each group below the cap, then
    /// rollout scaling; the smallest float delta `rate(R') - group cost` wins (a later one
    /// only when strictly smaller); a new group only if `rate(w)` is strictly below it.
    fn admit_weave(&mut self, j: usize) {
        let w = self.jobs[j].width as usize;
        let mut best: Option<Choice> = None;
        for gi in self.live() {
            let g = &self.groups[gi];
            if g.members.len() >= self.cfg.max_members {
                continue;
            }
            let direct_delta = rate(g.nodes.len()) - g.cost;
            let mut candidates: Vec<(f64, Vec<u32>, Vec<u32>, usize)> =
                combinations(&g.nodes, w).into_iter().map(|c| (direct_delta, c, g.nodes.clone(), DIRECT)).collect();
            let fresh = self.fresh_nodes(w);
            let mut grown = g.nodes.clone();
            grown.extend(&fresh);
            candidates.push((rate(grown.len()) - g.cost, fresh, grown, SCALING));
            let base = g.members.clone();
            for (delta, mine, nodes, kind) in candidates {
                if best.as_ref().is_some_and(|b| b.delta <= delta) {
                    continue;
                }
                let mut members = base.clone();
                members.push((j, mine));
                // No run beats its busiest resource or its slowest member: where that bound
                // already breaks an SLO the simulation could only say the same.
                if !feasible(self.jobs, &members, lower_bound(self.jobs, &members)) {
                    continue;
                }
                let s = self.simulate(&nodes, &members);
                if feasible(self.jobs, &members, s.period) {
                    best = Some(Choice { delta, group: gi, members, nodes, kind, sim: s });
                }
            }
        }
        match best {
            Some(c) if rate(w) >= c.delta => {
                self.groups[c.group].cost += c.delta;
                self.join(c.group, c.members, c.nodes, c.sim, c.kind);
            }
            _ => self.open_group(j),
        }
    }

    /// The prototype's Random and MostIdle: a uniform draw among "a new group" and every
    /// existing group decides whether to open one; Random then takes the drawn group and a
    /// uniform choice among every set of its existing nodes of the job's width plus one set of
    /// new nodes; MostIdle takes the group with the lowest mean utilisation and its least-used
    /// rollout node, or new nodes when that node is busy >= 0.8 or the job needs more than
    /// one. Neither checks the group cap or the SLOs.
    fn admit_baseline(&mut self, j: usize) {
        let live = self.live();
        let mut rng = self.stream(j);
        let draw = rng.random_range(0..=live.len());
        if draw == live.len() {
            self.open_group(j);
            return;
        }
        let w = self.jobs[j].width as usize;
        let (gi, mine) = match self.policy {
            ProtoPolicyKind::Random => {
                let gi = live[draw];
                let mut choices = combinations(&self.groups[gi].nodes, w);
                choices.push(self.fresh_nodes(w));
                let k = rng.random_range(0..choices.len());
                (gi, choices.swap_remove(k))
            }
            _ => {
                let gi = *live
                    .iter()
                    .min_by(|a, b| self.groups[**a].utilisation().total_cmp(&self.groups[**b].utilisation()))
                    .expect("a live group was drawn");
                let g = &self.groups[gi];
                let least = (0..g.nodes.len()).min_by(|a, b| g.node_busy[*a].total_cmp(&g.node_busy[*b]));
                match least {
                    Some(n) if w == 1 && g.node_busy[n] < 0.8 => (gi, vec![g.nodes[n]]),
                    _ => (gi, self.fresh_nodes(w)),
                }
            }
        };
        let g = &self.groups[gi];
        let kind = if mine.iter().all(|n| g.nodes.contains(n)) { DIRECT } else { SCALING };
        let mut nodes = g.nodes.clone();
        nodes.extend(mine.iter().copied().filter(|n| !g.nodes.contains(n)));
        let mut members = g.members.clone();
        members.push((j, mine));
        let s = self.simulate(&nodes, &members);
        let delta = rate(nodes.len()) - self.groups[gi].cost;
        self.groups[gi].cost += delta;
        self.join(gi, members, nodes, s, kind);
    }

    fn stream(&self, j: usize) -> Stream {
        let purpose = if self.policy == ProtoPolicyKind::Random { "prototype-random" } else { "prototype-most-idle" };
        named_stream(self.seed, purpose, j as u64)
    }

    fn join(&mut self, gi: usize, members: Vec<(usize, Vec<u32>)>, nodes: Vec<u32>, sim: Sim, kind: usize) {
        let new_nodes = nodes.iter().filter(|n| **n >= self.next_node).count() as u32;
        self.next_node += new_nodes;
        let j = members.last().expect("the joining job").0;
        for (m, _) in &members {
            self.member_period[*m] = sim.period;
        }
        let g = &mut self.groups[gi];
        g.members = members;
        g.nodes = nodes;
        g.period = sim.period;
        g.train_busy = sim.train_busy;
        g.node_busy = sim.node_busy;
        self.job_group[j] = Some(gi);
        self.admissions[kind] += 1;
    }

    fn open_group(&mut self, j: usize) {
        let w = self.jobs[j].width as usize;
        let nodes = self.fresh_nodes(w);
        self.next_node += w as u32;
        let members = vec![(j, nodes.clone())];
        let s = self.simulate(&nodes, &members);
        self.member_period[j] = s.period;
        self.groups.push(PGroup::new(nodes, members, s));
        self.job_group[j] = Some(self.groups.len() - 1);
        self.admissions[NEW_GROUP] += 1;
    }

    /// The job leaves: unused rollout nodes go, the group is re-simulated (its members'
    /// throughput periods are not refreshed), an emptied group is gone for good.
    pub fn depart(&mut self, j: usize) {
        let Some(gi) = self.job_group[j].take() else { return };
        let g = &mut self.groups[gi];
        g.members.retain(|(m, _)| *m != j);
        let used: Vec<u32> =
            g.nodes.iter().copied().filter(|n| g.members.iter().any(|(_, ns)| ns.contains(n))).collect();
        g.nodes = used;
        if g.members.is_empty() {
            g.nodes.clear();
            g.node_busy.clear();
            return;
        }
        g.cost = rate(g.nodes.len());
        let (nodes, members) = (g.nodes.clone(), g.members.clone());
        let s = self.simulate(&nodes, &members);
        let g = &mut self.groups[gi];
        g.period = s.period;
        g.train_busy = s.train_busy;
        g.node_busy = s.node_busy;
    }
}

/// A lower bound on the simulated period (makespan / iterations): every member runs its
/// iterations one after another, and the training node and each rollout node serve every
/// phase that needs them.
fn lower_bound(jobs: &[PJob], members: &[(usize, Vec<u32>)]) -> weave_core::Micros {
    use weave_core::Micros;
    let mut bound = Micros::ZERO;
    let mut train = Micros::ZERO;
    let mut nodes: Vec<(u32, Micros)> = Vec::new();
    for (j, ns) in members {
        let d = jobs[*j].disagg;
        bound = bound.max(d.rollout + d.train);
        train += d.train;
        for n in ns {
            match nodes.iter_mut().find(|(m, _)| m == n) {
                Some((_, load)) => *load += d.rollout,
                None => nodes.push((*n, d.rollout)),
            }
        }
    }
    nodes.into_iter().map(|(_, l)| l).fold(bound.max(train), Micros::max)
}

fn feasible(jobs: &[PJob], members: &[(usize, Vec<u32>)], period: weave_core::Micros) -> bool {
    members.iter().all(|(j, _)| (period.0 as f64) < jobs[*j].slo * jobs[*j].solo().0 as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weave_core::{Micros, PhaseTimes};

    fn job(slo: f64) -> PJob {
        let d = PhaseTimes { rollout: Micros::from_secs(300), train: Micros::from_secs(30) };
        PJob { arrival: Micros::ZERO, departure: Micros::from_secs(10_000), width: 1, disagg: d, colo: d, slo }
    }

    /// G0 holds two rollout nodes, G1 three, one job on each node; sharing a node doubles a
    /// rollout (600 s > 1.5 x 330 s), so the newcomer can only scale. With a flat 1/3 per node
    /// both groups' deltas are equal and the earlier group would win; in the prototype's float
    /// arithmetic rate(4) - rate(3) = 0.33333333333333304 is strictly below rate(3) - rate(2)
    /// = 0.3333333333333335, so the later group wins.
    #[test]
    fn the_prototypes_float_deltas_decide_ties_between_scaling_candidates() {
        assert!(rate(4) - rate(3) < rate(3) - rate(2));
        let jobs: Vec<PJob> = (0..6).map(|_| job(1.5)).collect();
        let cfg = ProtoConfig::default();
        let mut st = State::new(&jobs, &cfg, ProtoPolicyKind::Weave, 1);
        for (members, first) in [(vec![0usize, 1], 0u32), (vec![2, 3, 4], 2)] {
            let nodes: Vec<u32> = (first..first + members.len() as u32).collect();
            let members: Vec<(usize, Vec<u32>)> = members.into_iter().zip(&nodes).map(|(j, n)| (j, vec![*n])).collect();
            let s = st.simulate(&nodes, &members);
            for (j, _) in &members {
                st.job_group[*j] = Some(st.groups.len());
            }
            st.groups.push(PGroup::new(nodes, members, s));
        }
        st.next_node = 5;
        st.admit(5);
        assert_eq!(st.job_group[5], Some(1), "the later group's smaller float delta wins");
        assert_eq!(st.admissions, [0, 1, 0]);
        assert_eq!(st.groups[1].nodes, vec![2, 3, 4, 5]);
    }

    /// MostIdle never shares a node for a job that needs two, and the draw of "a new group"
    /// has probability 1 / (groups + 1): with no group, every job opens one.
    #[test]
    fn most_idle_opens_new_nodes_for_wide_jobs() {
        let mut jobs: Vec<PJob> = (0..3).map(|_| job(1.5)).collect();
        jobs[2].width = 2;
        let cfg = ProtoConfig::default();
        for seed in 1..20 {
            let mut st = State::new(&jobs, &cfg, ProtoPolicyKind::MostIdle, seed);
            st.admit(0);
            assert_eq!(st.admissions, [0, 0, 1]);
            st.admit(1);
            st.admit(2);
            let g = st.job_group[2].unwrap();
            let mine = &st.groups[g].members.iter().find(|(j, _)| *j == 2).unwrap().1;
            assert_eq!(mine.len(), 2);
            // Its two nodes are new: nobody else runs on them.
            assert!(st.groups[g]
                .members
                .iter()
                .filter(|(j, _)| *j != 2)
                .all(|(_, ns)| ns.iter().all(|n| !mine.contains(n))));
        }
    }
}
