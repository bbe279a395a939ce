//! Prototype-compatible mode: the research prototype's simplifying assumptions, so our
//! placement and dispatch can be checked number for number against it on identical inputs.
//!
//! - Lifetimes are the trace's arrival/departure times; slowdown is lost throughput.
//! - Cost rate per second: 1 per training node, 1/3 per rollout node; total cost = sum over
//!   the intervals between trace events of (sum of group rates) x interval length.
//! - Baselines are analytic: co-located = 1 training node per job (2 for 32B); solo-disagg =
//!   1 + 1/3 per job (x2 for 32B); iterations = floor(lifetime / solo iteration time) with
//!   the `colo` or `disagg` profile.
//! - Deterministic `disagg` durations; no sync and no switch costs; at most 5 jobs per group
//!   instead of a memory model; every group has one training node (32B jobs too).
//! - A candidate group is simulated for 100 iterations of every member with the same
//!   dispatcher in plain-FIFO mode, ties by (time, event kind, job id); the period is the
//!   makespan / 100, infeasible if any member's period >= SLO x its solo iteration time.
//! - Direct packing tries every choice of existing rollout node(s) of each non-full group,
//!   rollout scaling adds new node(s), else a new group; the smallest cost increase wins, a
//!   new group only if strictly cheaper, ties to the earliest group and candidate.
//! - On departure the group is re-simulated, unused rollout nodes disappear, empty groups
//!   vanish, nothing is repacked.

use crate::metrics::Admissions;
use rand::Rng;
use serde::Serialize;
use weave_core::{JobId, JobSpec, Lifetime, Micros, PhaseTimes};
use weave_dispatch::timing::{run_group_unlogged, Lane};
use weave_dispatch::{Fairness, SwitchCosts, TimingMember};
use weave_model::{named_stream, Deployment, ProfileModel};
use weave_trace::Trace;

#[derive(Clone, Debug, Serialize)]
pub struct ProtoConfig {
    /// SLO range for jobs whose trace gives none.
    pub slo_lo: f64,
    pub slo_hi: f64,
    /// `Some(v)`: every job gets SLO v, overriding the trace.
    pub slo_fixed: Option<f64>,
    pub max_members: usize,
    pub sim_iterations: u64,
    pub seed: u64,
}

impl Default for ProtoConfig {
    fn default() -> Self {
        ProtoConfig { slo_lo: 1.1, slo_hi: 2.0, slo_fixed: None, max_members: 5, sim_iterations: 100, seed: 1 }
    }
}

#[derive(Clone, Debug)]
struct PJob {
    arrival: Micros,
    departure: Micros,
    width: u32,
    disagg: PhaseTimes,
    colo: PhaseTimes,
    slo: f64,
}

impl PJob {
    fn solo(&self) -> Micros {
        self.disagg.solo()
    }

    fn lifetime(&self) -> Micros {
        self.departure.saturating_sub(self.arrival)
    }

    /// Node-multiplier of a baseline: 32B jobs take two of everything.
    fn scale(&self) -> f64 {
        self.width as f64
    }
}

fn prepare(trace: &Trace, profile: &ProfileModel, cfg: &ProtoConfig) -> Vec<PJob> {
    trace
        .jobs
        .iter()
        .map(|j: &JobSpec| {
            let disagg = match j.phase_times {
                Some(t) => t,
                None => profile.estimate(Deployment::Disagg, j).times,
            };
            let colo = profile.estimate(Deployment::Colo, j).times;
            let departure = match j.lifetime {
                Lifetime::SoloUntil(t) => t,
                // Our own format may give iterations instead: the solo run's end.
                Lifetime::Iterations(n) => j.arrival + Micros(disagg.solo().0.saturating_mul(n)),
            };
            let slo = match (cfg.slo_fixed, j.slo) {
                (Some(v), _) => v,
                (None, Some(s)) => s.get(),
                (None, None) => {
                    named_stream(cfg.seed, "prototype-slo", j.id.0 as u64).random_range(cfg.slo_lo..=cfg.slo_hi)
                }
            };
            PJob { arrival: j.arrival, departure, width: j.rollout_nodes, disagg, colo, slo }
        })
        .collect()
}

#[derive(Clone, Debug)]
struct PGroup {
    /// Rollout node ids (global, never reused).
    nodes: Vec<u32>,
    /// (job index, its rollout node ids).
    members: Vec<(usize, Vec<u32>)>,
    period: Micros,
    train_busy: f64,
    /// Busy fraction of each rollout node, in `nodes` order.
    node_busy: Vec<f64>,
}

impl PGroup {
    fn rate(&self) -> f64 {
        1.0 + self.nodes.len() as f64 / 3.0
    }
}

/// The simulated steady state of a candidate membership.
struct Sim {
    period: Micros,
    train_busy: f64,
    node_busy: Vec<f64>,
}

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

fn feasible(jobs: &[PJob], members: &[(usize, Vec<u32>)], period: Micros) -> bool {
    members.iter().all(|(j, _)| (period.0 as f64) < jobs[*j].slo * jobs[*j].solo().0 as f64)
}

/// All `k`-subsets of `items`, in lexicographic order.
fn combinations(items: &[u32], k: usize) -> Vec<Vec<u32>> {
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

#[derive(Clone, Debug, Serialize)]
pub struct ProtoPolicy {
    pub policy: String,
    /// Cost units: 1 per training node-second, 1/3 per rollout node-second.
    pub cost: f64,
    pub iterations: u64,
    pub iterations_per_cost_hour: f64,
    pub vs_solo_disagg: f64,
    pub vs_colocated: f64,
    pub rollout_utilisation: Option<f64>,
    pub training_utilisation: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProtoReport {
    pub jobs: usize,
    pub policies: Vec<ProtoPolicy>,
    pub admissions: Admissions,
    /// Jobs whose group period reached SLO x solo at some point of their life.
    pub slo_violations: usize,
    pub mean_group_size: f64,
}

/// The best candidate so far during one admission.
struct Choice {
    cost: f64,
    group: usize,
    members: Vec<(usize, Vec<u32>)>,
    nodes: Vec<u32>,
    /// 0 = direct packing, 1 = rollout scaling.
    kind: usize,
    sim: Sim,
}

struct State<'a> {
    jobs: &'a [PJob],
    cfg: &'a ProtoConfig,
    groups: Vec<PGroup>,
    job_group: Vec<Option<usize>>,
    next_node: u32,
    admissions: [u64; 3],
}

impl State<'_> {
    fn resim(&mut self, g: usize) {
        let grp = &self.groups[g];
        let s = simulate(self.jobs, &grp.nodes, &grp.members, self.cfg.sim_iterations);
        let grp = &mut self.groups[g];
        grp.period = s.period;
        grp.train_busy = s.train_busy;
        grp.node_busy = s.node_busy;
    }

    fn admit(&mut self, j: usize) {
        let job = &self.jobs[j];
        let w = job.width as usize;
        let mut best: Option<Choice> = None;
        for (gi, g) in self.groups.iter().enumerate() {
            if g.members.len() >= self.cfg.max_members {
                continue;
            }
            let mut candidates: Vec<(f64, Vec<u32>, Vec<u32>, usize)> =
                combinations(&g.nodes, w).into_iter().map(|c| (0.0, c, g.nodes.clone(), 0)).collect();
            let fresh: Vec<u32> = (0..w as u32).map(|i| self.next_node + i).collect();
            let mut grown = g.nodes.clone();
            grown.extend(&fresh);
            candidates.push((w as f64 / 3.0, fresh, grown, 1));
            for (cost, mine, nodes, kind) in candidates {
                if best.as_ref().is_some_and(|b| b.cost <= cost) {
                    continue;
                }
                let mut members = g.members.clone();
                members.push((j, mine));
                let s = simulate(self.jobs, &nodes, &members, self.cfg.sim_iterations);
                if feasible(self.jobs, &members, s.period) {
                    best = Some(Choice { cost, group: gi, members, nodes, kind, sim: s });
                }
            }
        }
        let new_group_cost = 1.0 + w as f64 / 3.0;
        match best {
            Some(c) if c.cost < new_group_cost => {
                if c.kind == 1 {
                    self.next_node += w as u32;
                }
                let g = &mut self.groups[c.group];
                g.members = c.members;
                g.nodes = c.nodes;
                g.period = c.sim.period;
                g.train_busy = c.sim.train_busy;
                g.node_busy = c.sim.node_busy;
                self.job_group[j] = Some(c.group);
                self.admissions[c.kind] += 1;
            }
            _ => {
                let nodes: Vec<u32> = (0..w as u32).map(|i| self.next_node + i).collect();
                self.next_node += w as u32;
                let members = vec![(j, nodes.clone())];
                let s = simulate(self.jobs, &nodes, &members, self.cfg.sim_iterations);
                self.groups.push(PGroup {
                    nodes,
                    members,
                    period: s.period,
                    train_busy: s.train_busy,
                    node_busy: s.node_busy,
                });
                self.job_group[j] = Some(self.groups.len() - 1);
                self.admissions[2] += 1;
            }
        }
    }

    fn depart(&mut self, j: usize) {
        let Some(gi) = self.job_group[j].take() else { return };
        let g = &mut self.groups[gi];
        g.members.retain(|(m, _)| *m != j);
        let used: Vec<u32> =
            g.nodes.iter().copied().filter(|n| g.members.iter().any(|(_, ns)| ns.contains(n))).collect();
        g.nodes = used;
        if g.members.is_empty() {
            g.nodes.clear();
            g.node_busy.clear();
        } else {
            self.resim(gi);
        }
    }
}

/// Replays `trace` in prototype mode: Weave's placement under the prototype's rules plus the
/// two analytic baselines.
pub fn run(trace: &Trace, profile: &ProfileModel, cfg: &ProtoConfig) -> ProtoReport {
    let jobs = prepare(trace, profile, cfg);
    let mut st = State {
        jobs: &jobs,
        cfg,
        groups: Vec::new(),
        job_group: vec![None; jobs.len()],
        next_node: 0,
        admissions: [0; 3],
    };
    // Trace events: departures before arrivals at the same instant (frees nodes first).
    let mut events: Vec<(Micros, u8, usize)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        events.push((j.arrival, 1, i));
        events.push((j.departure, 0, i));
    }
    events.sort();
    let mut last = Micros::ZERO;
    let mut cost = 0.0;
    let mut progress = vec![0.0f64; jobs.len()];
    let mut violated = vec![false; jobs.len()];
    let (mut train_busy, mut train_nodes, mut roll_busy, mut roll_nodes) = (0.0, 0.0, 0.0, 0.0);
    let mut group_sizes = (0.0, 0.0);
    for (t, kind, j) in events {
        let dt = t.saturating_sub(last).as_secs_f64();
        if dt > 0.0 {
            for g in st.groups.iter().filter(|g| !g.members.is_empty()) {
                cost += g.rate() * dt;
                train_busy += g.train_busy * dt;
                train_nodes += dt;
                roll_busy += g.node_busy.iter().sum::<f64>() * dt;
                roll_nodes += g.nodes.len() as f64 * dt;
                group_sizes.0 += g.members.len() as f64 * dt;
                group_sizes.1 += dt;
                for (m, _) in &g.members {
                    progress[*m] += dt / g.period.as_secs_f64().max(1e-9);
                    if g.period.0 as f64 >= jobs[*m].slo * jobs[*m].solo().0 as f64 {
                        violated[*m] = true;
                    }
                }
            }
        }
        last = t;
        if kind == 1 {
            st.admit(j);
        } else {
            st.depart(j);
        }
    }
    let weave_iters: u64 = progress.iter().map(|p| p.floor() as u64).sum();
    let floor_div = |a: Micros, b: Micros| a.0 / b.0.max(1);
    let solo_iters: u64 = jobs.iter().map(|j| floor_div(j.lifetime(), j.solo())).sum();
    let colo_iters: u64 = jobs.iter().map(|j| floor_div(j.lifetime(), j.colo.solo())).sum();
    let solo_cost: f64 = jobs.iter().map(|j| j.lifetime().as_secs_f64() * (1.0 + 1.0 / 3.0) * j.scale()).sum();
    let colo_cost: f64 = jobs.iter().map(|j| j.lifetime().as_secs_f64() * j.scale()).sum();
    let eff = |iters: u64, c: f64| if c > 0.0 { iters as f64 / (c / 3_600.0) } else { 0.0 };
    let (e_w, e_s, e_c) = (eff(weave_iters, cost), eff(solo_iters, solo_cost), eff(colo_iters, colo_cost));
    let row = |name: &str, c: f64, iters: u64, e: f64, util: Option<(f64, f64)>| ProtoPolicy {
        policy: name.to_string(),
        cost: c,
        iterations: iters,
        iterations_per_cost_hour: e,
        vs_solo_disagg: e / e_s,
        vs_colocated: e / e_c,
        rollout_utilisation: util.map(|u| u.0),
        training_utilisation: util.map(|u| u.1),
    };
    let solo_util = {
        let total: f64 = jobs.iter().map(|j| j.lifetime().as_secs_f64() * j.scale()).sum();
        let roll: f64 = jobs
            .iter()
            .map(|j| j.lifetime().as_secs_f64() * j.scale() * j.disagg.rollout.0 as f64 / j.solo().0 as f64)
            .sum();
        (roll / total, 1.0 - roll / total)
    };
    ProtoReport {
        jobs: jobs.len(),
        policies: vec![
            row(
                "weave",
                cost,
                weave_iters,
                e_w,
                Some((roll_busy / roll_nodes.max(1e-9), train_busy / train_nodes.max(1e-9))),
            ),
            row("solo-disagg", solo_cost, solo_iters, e_s, Some(solo_util)),
            row("colocated", colo_cost, colo_iters, e_c, Some((1.0, 1.0))),
        ],
        admissions: Admissions {
            direct: st.admissions[0],
            scaling: st.admissions[1],
            isolated: st.admissions[2],
            colocated: 0,
        },
        slo_violations: violated.iter().filter(|v| **v).count(),
        mean_group_size: group_sizes.0 / group_sizes.1.max(1e-9),
    }
}
