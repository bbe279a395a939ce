//! A co-execution group as the placer sees it: a training pool, rollout blocks (node sets
//! whose members share all of them), members, and what they cost.

use crate::job::PlaceJob;
use serde::{Deserialize, Serialize};
use weave_core::{Bytes, GroupId, JobId, Micros, NodeId};
use weave_dispatch::order::GroupOrder;
use weave_dispatch::timing::{self, bounds};
use weave_dispatch::{Dispatcher, Input, TimingMember};

/// Rollout nodes used together: every member of a block runs its rollout on all of them.
/// Blocks never partially overlap (members sharing a node share all of the block's nodes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// Group-local id, never reused within the group (the dispatcher's rollout node index).
    pub id: u32,
    pub nodes: Vec<NodeId>,
    /// Cached rollout state on each node of the block.
    pub used: Bytes,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub job: PlaceJob,
    /// Id of the block the member's rollout runs on.
    pub block: u32,
}

/// The predicted steady state of a group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub meta_iteration: Micros,
    /// Co-executed iteration time per member, in member order.
    pub coexec: Vec<Micros>,
    /// No idle bubble left for a newcomer (the paper's saturation, judged on the members'
    /// synchronous cycles; see `weave_dispatch::timing::is_full`): placement skips the group.
    pub saturated: bool,
    /// Share of the training pool's time that is busy (training or switching).
    pub train_busy: f64,
    /// The cyclic order the group's dispatcher follows to run this prediction.
    pub order: GroupOrder,
}

impl Prediction {
    /// Slowdown of member `i` against its solo iteration.
    pub fn slowdown(&self, i: usize, job: &PlaceJob) -> f64 {
        self.coexec[i].0 as f64 / job.solo().0.max(1) as f64
    }

    /// Work rate of the members: the sum over members of solo / co-executed iteration, i.e.
    /// how many solo jobs' worth of progress the group makes per unit of time.
    pub fn work<'a>(&self, jobs: impl IntoIterator<Item = &'a PlaceJob>) -> f64 {
        jobs.into_iter().zip(&self.coexec).map(|(j, c)| j.solo().0 as f64 / c.0.max(1) as f64).sum()
    }

    /// A job co-located on its own training nodes; `None` without a co-located profile.
    pub fn colocated(job: &PlaceJob) -> Option<Prediction> {
        let it = job.colo_iteration()?;
        Some(Prediction {
            meta_iteration: it,
            coexec: vec![it],
            saturated: true,
            train_busy: 1.0,
            order: GroupOrder { train: vec![job.id], rollout: Default::default() },
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub id: GroupId,
    pub training_nodes: Vec<NodeId>,
    pub blocks: Vec<Block>,
    pub next_block: u32,
    pub members: Vec<Member>,
    /// Cached training state on each training node.
    pub train_used: Bytes,
    pub prediction: Prediction,
    /// A co-located deployment: one member running both phases on the training nodes (no
    /// rollout blocks, never shared).
    pub colocated: bool,
}

/// Host DRAM per node and whether states stay resident (warm switching).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Residency {
    pub rollout_dram: Bytes,
    pub train_dram: Bytes,
    /// `false` = cold time slicing: nothing is cached, memory is not a constraint, every switch
    /// is cold.
    pub resident: bool,
    /// The research prototype's stand-in for host DRAM: at most this many members per group
    /// (`None`: only host DRAM limits a group).
    pub max_members: Option<usize>,
}

impl Group {
    /// The input that makes `dispatcher` (this group's) follow the cyclic order of the
    /// current prediction, if it does not already: what admission predicted is what runs.
    /// The replay and the server give it after a join, a departure and re-estimation.
    pub fn reorder(&self, dispatcher: &Dispatcher) -> Option<Input> {
        (dispatcher.order() != &self.prediction.order).then(|| Input::Reorder(self.prediction.order.clone()))
    }

    pub fn train_width(&self) -> u32 {
        self.training_nodes.len() as u32
    }

    pub fn rollout_node_count(&self) -> u32 {
        self.blocks.iter().map(|b| b.nodes.len() as u32).sum()
    }

    /// Hourly cost of the nodes the group holds.
    pub fn hourly_cost(
        &self,
        rollout_node_price: weave_core::Money,
        train_node_price: weave_core::Money,
    ) -> weave_core::Money {
        weave_core::Money(
            rollout_node_price.0 * self.rollout_node_count() as i64 + train_node_price.0 * self.train_width() as i64,
        )
    }

    /// Whether its rollout nodes are on the preemptible tier (its members all are).
    pub fn spot(&self) -> bool {
        self.members.first().is_some_and(|m| m.job.spot)
    }

    /// The members' work rate (see [`Prediction::work`]).
    pub fn work(&self) -> f64 {
        self.prediction.work(self.members.iter().map(|m| &m.job))
    }

    /// One member: co-located, or alone in a disaggregated group. Consolidation looks at
    /// these jobs.
    pub fn runs_alone(&self) -> bool {
        self.members.len() == 1
    }

    /// A disaggregated group with one member: its pools idle in each other's phases.
    pub fn is_lone(&self) -> bool {
        self.runs_alone() && !self.colocated
    }

    pub fn member_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.members.iter().map(|m| m.job.id)
    }

    pub fn block(&self, id: u32) -> Option<&Block> {
        self.blocks.iter().find(|b| b.id == id)
    }

    /// The members' timing view, plus an optional candidate on block `block`.
    pub fn timing_members(&self, extra: Option<(&PlaceJob, u32)>, resident: bool) -> Vec<TimingMember> {
        let w = self.train_width();
        let mut v: Vec<TimingMember> = self.members.iter().map(|m| m.job.timing_member(m.block, w, resident)).collect();
        if let Some((job, block)) = extra {
            v.push(job.timing_member(block, w, resident));
        }
        v
    }

    /// Whether `job` fits on block `block` (an existing id, or `None` for a new block of its
    /// own width) without breaking residency or any member's SLO; the prediction if so.
    pub fn try_add(&self, job: &PlaceJob, block: Option<u32>, res: &Residency) -> Option<Prediction> {
        let members = self.with_candidate(job, block, res)?;
        predict_within_slo(&members, &self.jobs_with(job))
    }

    /// The members' timing view with `job` on block `block` (or a new block of its width), if
    /// the block exists, has the job's width and its host DRAM takes the job; SLOs unchecked.
    pub fn with_candidate(&self, job: &PlaceJob, block: Option<u32>, res: &Residency) -> Option<Vec<TimingMember>> {
        let existing = match block {
            Some(id) => Some(self.block(id)?),
            None => None,
        };
        if existing.is_some_and(|b| b.nodes.len() as u32 != job.rollout_width) {
            return None;
        }
        if res.max_members.is_some_and(|cap| self.members.len() >= cap) {
            return None;
        }
        if res.resident && !self.memory_fits(job, existing, res) {
            return None;
        }
        Some(self.timing_members(Some((job, block.unwrap_or(self.next_block))), res.resident))
    }

    /// The members' placement views and then `job`'s (the order of [`Group::with_candidate`]).
    pub fn jobs_with<'a>(&'a self, job: &'a PlaceJob) -> Vec<&'a PlaceJob> {
        self.members.iter().map(|m| &m.job).chain(std::iter::once(job)).collect()
    }

    fn memory_fits(&self, job: &PlaceJob, block: Option<&Block>, res: &Residency) -> bool {
        let rollout_used = block.map_or(Bytes(0), |b| b.used);
        let train_add = job.train_state_total.0 / self.train_width().max(1) as u64;
        rollout_used.0.saturating_add(job.rollout_state.0) <= res.rollout_dram.0
            && self.train_used.0.saturating_add(train_add) <= res.train_dram.0
    }

    /// Recomputes the cached prediction (after a departure; SLOs are not re-checked here).
    pub fn refresh(&mut self, resident: bool) {
        if self.colocated {
            if let Some(p) = self.members.first().and_then(|m| Prediction::colocated(&m.job)) {
                self.prediction = p;
            }
            return;
        }
        let members = self.timing_members(None, resident);
        self.prediction = predict(&members);
    }
}

/// The prediction for `members`, or `None` if any `jobs[i]` would exceed its SLO.
pub fn predict_within_slo(members: &[TimingMember], jobs: &[&PlaceJob]) -> Option<Prediction> {
    let bounds = within_lower_bound(members, jobs)?;
    let p = predict_with_bounds(members, bounds);
    slo_holds(members, jobs, &p, bounds.0.max(bounds.1)).then_some(p)
}

/// Cheap rejection: `(T_cycle, T_load)` if no member's SLO is already broken by the bound
/// `max(T_cycle, T_load)` that no schedule beats.
pub fn within_lower_bound(members: &[TimingMember], jobs: &[&PlaceJob]) -> Option<(Micros, Micros)> {
    let (t_cycle, t_load) = bounds(members);
    let lower = t_cycle.max(t_load);
    (!jobs.iter().any(|j| lower.0 as f64 > j.slo * j.solo().0 as f64)).then_some((t_cycle, t_load))
}

/// Whether prediction `p` of `members` keeps every job within its SLO, deterministically and
/// under its sampled variation; `bound` is `max(T_cycle, T_load)`.
pub fn slo_holds(members: &[TimingMember], jobs: &[&PlaceJob], p: &Prediction, bound: Micros) -> bool {
    let ok = jobs.iter().zip(&p.coexec).all(|(j, c)| c.0 as f64 <= j.slo * j.solo().0 as f64);
    if !ok {
        return false;
    }
    if jobs.len() > 1 && jobs.iter().any(|j| !j.variation.samples.is_empty()) {
        let risky = stochastic_slowdowns(members, jobs, p, bound);
        if jobs.iter().zip(&risky).any(|(j, s)| *s > j.slo) {
            return false;
        }
        if !joins_fit_slack(jobs, &risky) {
            return false;
        }
    }
    true
}

/// A member whose promised slowdown is closer than this to its SLO is also checked for what
/// a partner's arrival costs it once ([`joins_fit_slack`]); others have room to spare.
pub const TIGHT_SLACK: f64 = 0.05;

/// Whether each tight member's SLO also holds with the wait a partner's arrival adds once.
///
/// The steady state is not all a member sees: a newcomer joins at the back of the round in
/// progress, so the members it shares the training pool with wait for its first rollout
/// (cold), then for its first training and, levelling the round, one more (both cold). A
/// replay showed it (`weave sweep staleness`, 100% of jobs at k = 1): job47, allowed 0.12%
/// over its solo time, waited 618 s once when job57 joined and ended at 1.0048 although the
/// steady state left it at 1.000. Over a member's life that wait is a share of its iterations'
/// solo time; bounded here by the slowest partner's first rollout and two trainings with
/// cold switches and its sync.
fn joins_fit_slack(jobs: &[&PlaceJob], promised: &[f64]) -> bool {
    jobs.iter().zip(promised).enumerate().all(|(j, (job, s))| {
        if job.slo - s >= TIGHT_SLACK {
            return true;
        }
        let wait = jobs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != j)
            .map(|(_, o)| {
                let c = o.costs;
                c.rollout_cold.0 + o.times.rollout.0 + 2 * (c.train_cold.0 + o.times.train.0) + o.sync.0
            })
            .max()
            .unwrap_or(0);
        let life = job.variation.iterations.max(1) as f64 * job.solo().0.max(1) as f64;
        s + wait as f64 / life <= job.slo
    })
}

/// What the timing model sees of a job (its member view without the id): jobs with equal
/// shapes get equal predictions in the same place, so scans over many candidates predict
/// once per shape.
pub fn shape(job: &PlaceJob) -> [u64; 10] {
    let c = job.costs;
    [
        job.times.rollout.0,
        job.times.train.0,
        job.sync.0,
        job.rollout_width as u64,
        // The staleness shares a slot with the width (both small): equal shapes must time alike.
        job.train_width as u64 | (u64::from(job.staleness) << 32),
        c.rollout_warm.0,
        c.rollout_cold.0,
        c.train_warm.0 ^ (c.train_cold.0 << 32),
        job.rollout_state.0,
        job.train_state_total.0,
    ]
}

/// Share of a member's single iterations admission expects within its SLO.
pub const ITERATION_QUANTILE: f64 = 0.8;

/// Each member's slowdown over its life under run-time variation, at the confidence its
/// `variation.z` asks for.
///
/// Draws are taken in lockstep (sample k of every member forms one iteration of the group):
/// the group's period in that iteration is bounded below by `max(T_cycle, T_load)` of the
/// drawn durations, and a member's slowdown is the group's mean period over its own mean solo
/// iteration. Variation costs twice: the slowest member sets the pace in each iteration (the
/// mean of a maximum exceeds the maximum of means), and draws below the conservative estimate
/// shrink a member's own solo time but not its partners'. The deterministic schedule's excess
/// over its bound (`coexec / bound`) carries over; the life average's spread shrinks with
/// the square root of the member's iterations.
pub fn stochastic_slowdowns(members: &[TimingMember], jobs: &[&PlaceJob], p: &Prediction, bound: Micros) -> Vec<f64> {
    let n = jobs.iter().map(|j| j.variation.samples.len()).max().unwrap_or(0);
    let mut factors = vec![(1.0, 1.0); jobs.len()];
    let mut periods = Vec::with_capacity(n);
    let mut solos: Vec<Vec<f64>> = vec![Vec::with_capacity(n); jobs.len()];
    for k in 0..n {
        for (j, job) in jobs.iter().enumerate() {
            let s = &job.variation.samples;
            factors[j] = if s.is_empty() { (1.0, 1.0) } else { s[k % s.len()] };
            solos[j].push(sampled_solo(job, factors[j]));
        }
        periods.push(timing::bound_scaled(members, &factors).0 as f64);
    }
    jobs.iter()
        .enumerate()
        .map(|(j, job)| {
            let excess = p.coexec[j].0 as f64 / bound.0.max(1) as f64;
            slowdown_at_risk(job, &periods, &solos[j], excess)
        })
        .collect()
}

/// A co-located job's slowdown under its sampled variation, as [`stochastic_slowdowns`] for a
/// group: its co-located iteration (rollout then training on its GPUs) over its solo run at
/// the same draws. A stale job's solo overlaps its phases and a co-located one cannot, so the
/// ratio moves with the draws; `None` without samples.
pub fn colocated_slowdown(job: &PlaceJob) -> Option<f64> {
    let colo = job.colo?;
    let samples = &job.variation.samples;
    if samples.is_empty() {
        return None;
    }
    let periods: Vec<f64> = samples.iter().map(|f| colo.rollout.0 as f64 * f.0 + colo.train.0 as f64 * f.1).collect();
    let solos: Vec<f64> = samples.iter().map(|f| sampled_solo(job, *f)).collect();
    Some(slowdown_at_risk(job, &periods, &solos, 1.0))
}

/// Its solo run at these durations, pipelined with its staleness (as `PlaceJob::solo`).
fn sampled_solo(job: &PlaceJob, (fr, ft): (f64, f64)) -> f64 {
    let roll = job.times.rollout.0 as f64 * fr;
    let train = job.times.train.0 as f64 * ft + job.sync.0 as f64;
    timing::solo_period_f64(roll, train, job.staleness)
}

/// The slowdown admission promises for `job` given its sampled `periods` and `solos` (paired
/// by draw) and the deterministic schedule's `excess` over the sampled bound: the life average
/// at the job's confidence, and at least most single iterations.
fn slowdown_at_risk(job: &PlaceJob, periods: &[f64], solos: &[f64], excess: f64) -> f64 {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let n = periods.len();
    let mean_solo = mean(solos).max(1.0);
    let ratio = mean(periods) / mean_solo;
    // Spread of the life average: the delta method on (period - ratio x solo).
    let var = periods.iter().zip(solos).map(|(b, s)| (b - ratio * s).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let spread = var.sqrt() / mean_solo / (job.variation.iterations.max(1) as f64).sqrt();
    let life = excess * ratio + job.variation.z * spread;
    // Iterations are promised too: most single iterations stay within the SLO.
    let mut single: Vec<f64> = periods.iter().zip(solos).map(|(b, s)| excess * b / s.max(1.0)).collect();
    single.sort_by(f64::total_cmp);
    let q = single.get(((single.len() as f64 * ITERATION_QUANTILE) as usize).min(single.len().saturating_sub(1)));
    life.max(q.copied().unwrap_or(0.0))
}

/// The group's steady state: the cyclic order with the shortest period and that period,
/// exact ([`weave_dispatch::order::best`]); the dispatcher follows the same order.
pub fn predict(members: &[TimingMember]) -> Prediction {
    predict_with_bounds(members, bounds(members))
}

/// [`predict`] given `(T_cycle, T_load)` already computed (admission computes them first for
/// its cheap rejection).
pub fn predict_with_bounds(members: &[TimingMember], (t_cycle, t_load): (Micros, Micros)) -> Prediction {
    let (order, period) = weave_dispatch::order::best(members);
    let meta = Micros(period.ceil_micros());
    let (_, train_switches) = weave_dispatch::timing::overheads(members);
    let train_load: Micros = members.iter().map(|m| m.train).sum::<Micros>() + train_switches.into_iter().sum();
    Prediction {
        meta_iteration: meta,
        coexec: vec![meta; members.len()],
        // Closed to newcomers when full; a stale member's own cycle is load-bound (see is_full).
        saturated: if members.iter().any(|m| m.staleness > 0) {
            weave_dispatch::timing::is_full(members)
        } else {
            t_load >= t_cycle
        },
        train_busy: train_load.0 as f64 / meta.0.max(1) as f64,
        order,
    }
}
