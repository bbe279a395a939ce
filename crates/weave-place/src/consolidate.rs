//! Consolidation: keeping groups full as jobs come and go.
//!
//! Groups fragment as partners leave: a lone member of a disaggregated group pays for a
//! rollout node and a training node that idle half the time, which is worse than running
//! co-located. Consolidation finds jobs that run alone (co-located, or the only member of a
//! group) and moves them where the same work costs less:
//!
//! - on an arrival, the new job may form a group with a job that runs alone (the new job
//!   opens the group, the lone job moves in);
//! - when a group is left with one member, a job that runs alone elsewhere may move in, or
//!   the member may move into another group or to co-located mode.
//!
//! Every comparison is cost per unit of work over the jobs a move touches: dollars per hour
//! over the work rate (solo-job equivalents, see [`Prediction::work`]), with each mover's
//! one-time cost (checkpoint, cold start, the lost partial iteration) spread over the
//! horizon it still has to run. Only jobs the caller lists as movable (their cooldown over,
//! the churn budget not spent) ever move. Every target is checked by the placer with the
//! same residency and SLO rules as admission.

mod drive;
pub use drive::{
    iteration_ended, lone_group, pairing_on_arrival, partner_joins, periodic_pass, ConsolidationDriver, Deferred,
};

use crate::group::{predict_with_bounds, shape, slo_holds, within_lower_bound, Block, Group, Member, Prediction};
use crate::job::PlaceJob;
use crate::placer::{OptionCost, Placer, Target};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use weave_core::{Bytes, GroupId, JobId, Micros, Money, NodeId, Pool};

/// What moving a job costs once, and how long the saving would last.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MoveCost {
    pub once: Money,
    /// The job's expected remaining run time.
    pub horizon: Micros,
    /// The time the move costs the job itself: its cold start and the lost partial iteration.
    pub delay: Micros,
    /// Iterations it still has to run, and the SLO slack it has banked (see [`Progress`]).
    pub remaining: u64,
    pub slack: Option<Micros>,
}

/// What the driver knows of a job that may move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Iterations it still has to run.
    pub remaining: u64,
    /// How much longer its SLO allows it to have taken than it has (its allowed slowdown
    /// times its solo time so far, less its life so far); `None`: not known, not checked.
    pub slack: Option<Micros>,
}

impl MoveCost {
    /// Whether the job's SLO absorbs the move to a place where an iteration takes `period`:
    /// the slack banked so far plus what the target leaves on each remaining iteration covers
    /// the move's delay. (The target's steady state alone is what admission checks.)
    pub fn affordable(&self, job: &PlaceJob, period: Micros) -> bool {
        let Some(banked) = self.slack else { return true };
        let per_iteration = job.slo * job.solo().0 as f64 - period.0 as f64;
        banked.0 as f64 + self.remaining as f64 * per_iteration >= self.delay.0 as f64
    }

    /// The one-time cost as dollars per hour over the horizon.
    fn per_hour(&self) -> f64 {
        let h = self.horizon.as_hours_f64();
        if h <= 0.0 {
            f64::INFINITY
        } else {
            self.once.as_dollars() / h
        }
    }
}

impl MoveCost {
    /// A move costs the job a cold start on its new nodes and, on average, half an
    /// iteration of lost work, both at the price of its own nodes; the saving lasts for its
    /// remaining iterations at its solo pace.
    pub fn estimate(job: &PlaceJob, progress: Progress, prices: (Money, Money)) -> MoveCost {
        let remaining_iterations = progress.remaining;
        let solo = job.solo();
        let lost = job.costs.rollout_cold + job.costs.train_cold + Micros(solo.0 / 2);
        let per_hour = prices.0 .0 * job.rollout_width as i64 + prices.1 .0 * job.train_width as i64;
        let once = Money((per_hour as i128 * lost.0 as i128 / Micros::PER_HOUR as i128) as i64);
        MoveCost {
            once,
            horizon: Micros(solo.0.saturating_mul(remaining_iterations)),
            delay: lost,
            remaining: remaining_iterations,
            slack: progress.slack,
        }
    }
}

/// Jobs that may move now, with their move costs.
pub type Movable = BTreeMap<JobId, MoveCost>;

/// Group predictions with one more member of a given shape, by (group, block, shape): valid
/// while the placer does not change, so a scan over many jobs predicts each case once. Clear
/// it after every move.
pub type Predictions = BTreeMap<(GroupId, Option<u32>, [u64; 10]), Prediction>;

/// Besides arrivals and departures, jobs that run alone are looked at this often (the
/// replay's default and the server's `--consolidate-every`).
pub const PASS_INTERVAL: Micros = Micros(Micros::PER_HOUR / 2);

/// How much moving consolidation may do.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChurnLimits {
    /// A job that moved is not moved again within this time.
    pub cooldown: Micros,
    /// At most this many moves per hour.
    pub max_moves_per_hour: u32,
}

impl Default for ChurnLimits {
    fn default() -> Self {
        ChurnLimits { cooldown: Micros(2 * Micros::PER_HOUR), max_moves_per_hour: 30 }
    }
}

/// The moves made so far, against [`ChurnLimits`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Churn {
    pub limits: ChurnLimits,
    recent: VecDeque<Micros>,
    last: BTreeMap<JobId, Micros>,
}

impl Churn {
    pub fn new(limits: ChurnLimits) -> Churn {
        Churn { limits, ..Churn::default() }
    }

    /// Whether the hourly budget has room for another move at `now`.
    pub fn budget_left(&mut self, now: Micros) -> bool {
        let hour = Micros(Micros::PER_HOUR);
        while self.recent.front().is_some_and(|&t| now.saturating_sub(t) >= hour) {
            self.recent.pop_front();
        }
        (self.recent.len() as u32) < self.limits.max_moves_per_hour
    }

    /// Whether `job` moved within its cooldown.
    pub fn cooling(&self, job: JobId, now: Micros) -> bool {
        self.last.get(&job).is_some_and(|&t| now.saturating_sub(t) < self.limits.cooldown)
    }

    pub fn record(&mut self, job: JobId, now: Micros) {
        self.recent.push_back(now);
        self.last.insert(job, now);
    }

    /// A deferred move took effect: its job (by its id now) cools down from `now`; the hourly
    /// budget counted the move when it was decided.
    pub fn cool(&mut self, job: JobId, now: Micros) {
        self.last.insert(job, now);
    }

    /// Forgets a job that left for good.
    pub fn forget(&mut self, job: JobId) {
        self.last.remove(&job);
    }
}

/// The jobs that may move at `now`: running alone (co-located or the only member of a group),
/// out of their cooldown, while the hourly budget lasts; `progress` gives what the driver
/// knows of a job (`None`: not movable).
pub fn movable(
    placer: &Placer,
    churn: &mut Churn,
    now: Micros,
    progress: impl Fn(JobId) -> Option<Progress>,
) -> Movable {
    let mut out = Movable::new();
    if !churn.budget_left(now) {
        return out;
    }
    let prices = prices(placer);
    for g in placer.groups().filter(|g| g.runs_alone()) {
        let job = &g.members[0].job;
        if churn.cooling(job.id, now) {
            continue;
        }
        if let Some(p) = progress(job.id) {
            out.insert(job.id, MoveCost::estimate(job, p, prices));
        }
    }
    out
}

/// A planned move: `job` leaves where it runs and goes to `target`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub job: JobId,
    pub target: Target,
    /// Dollars per hour per unit of work of the touched jobs, before and after (the move's
    /// one-time cost included).
    pub before: f64,
    pub after: f64,
}

/// How a new job should be admitted to pair with a job that runs alone: the new job opens a
/// group of its own (isolated), then `partner` moves onto its rollout block (`direct`) or
/// onto a new block of its own.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pairing {
    pub partner: JobId,
    pub direct: bool,
    pub before: f64,
    pub after: f64,
}

/// A job running alone: its group, what the group costs per hour and its work rate.
struct Alone<'a> {
    job: &'a PlaceJob,
    group: GroupId,
    cost: f64,
    work: f64,
}

fn ratio(cost: f64, work: f64) -> f64 {
    if work <= 0.0 {
        f64::INFINITY
    } else {
        cost / work
    }
}

/// Movable jobs that run alone (co-located, or the only member of a group), in job order.
fn alone<'a>(placer: &'a Placer, movable: &Movable) -> Vec<Alone<'a>> {
    let (pr, pt) = prices(placer);
    movable
        .keys()
        .filter_map(|&j| {
            let g = placer.group(placer.group_of(j)?)?;
            g.runs_alone().then(|| Alone {
                job: &g.members[0].job,
                group: g.id,
                cost: g.hourly_cost(pr, pt).as_dollars(),
                work: g.work(),
            })
        })
        .collect()
}

fn prices(placer: &Placer) -> (Money, Money) {
    (placer.config().rollout_node_price, placer.config().train_node_price)
}

/// A group holding `job` alone on nodes of its own, as admission would open it (the nodes
/// are placeholders: only their number matters to the timing and memory models).
fn opened_by(placer: &Placer, job: &PlaceJob) -> Group {
    let node = |pool, index| NodeId { pool, index };
    let resident = placer.config().residency.resident;
    let used = |b: Bytes| if resident { b } else { Bytes(0) };
    let training_nodes: Vec<NodeId> = (0..job.train_width).map(|i| node(Pool::Training, u32::MAX - i)).collect();
    let nodes: Vec<NodeId> = (0..job.rollout_width).map(|i| node(Pool::Rollout, u32::MAX - i)).collect();
    let mut g = Group {
        id: GroupId(u32::MAX),
        training_nodes,
        blocks: vec![Block { id: 0, nodes, used: used(job.rollout_state) }],
        next_block: 1,
        members: vec![Member { job: job.clone(), block: 0 }],
        train_used: used(Bytes(job.train_state_total.0 / job.train_width.max(1) as u64)),
        prediction: crate::group::predict(&[job.timing_member(0, job.train_width, resident)]),
        colocated: false,
    };
    g.refresh(resident);
    g
}

/// On arrival: whether `job` should open a group that a job running alone moves into,
/// rather than take `best` (what admission would do on its own).
pub fn pair_for_arrival(placer: &Placer, job: &PlaceJob, best: OptionCost, movable: &Movable) -> Option<Pairing> {
    if best.cost_per_hour == Money::ZERO {
        return None;
    }
    best_partner(placer, job, (best.cost_per_hour.as_dollars(), best.work), None, movable)
}

/// Two jobs that both run alone may do better together: `job` (running alone, movable)
/// opens a new group of its own and the partner moves in. Both pay their moves.
pub fn pair_alone(placer: &Placer, job: JobId, movable: &Movable) -> Option<Pairing> {
    let mc = movable.get(&job)?;
    let me = alone(placer, movable).into_iter().find(|a| a.job.id == job)?;
    best_partner(placer, me.job, (me.cost, me.work), Some(mc), movable)
}

/// The partner among movable jobs running alone that saves most when it moves onto a group
/// `opener` opens (on the opener's block or a new one), given what the opener costs and
/// yields where it would be otherwise (`opener_now`) and its own move cost if it moves too.
fn best_partner(
    placer: &Placer,
    opener: &PlaceJob,
    opener_now: (f64, f64),
    opener_moves: Option<&MoveCost>,
    movable: &Movable,
) -> Option<Pairing> {
    let opener_move = opener_moves.map_or(0.0, MoveCost::per_hour);
    let (pr, pt) = prices(placer);
    let res = placer.config().residency;
    let opened = opened_by(placer, opener);
    let own_cost = opened.hourly_cost(pr, pt).as_dollars();
    let alone = alone(placer, movable);
    // Rank every (partner, block) by its cost per unit of work under the timing model,
    // predicting once per partner shape; then check SLOs (with variation) best first.
    let mut memo: BTreeMap<([u64; 10], bool), Prediction> = BTreeMap::new();
    let mut ranked: Vec<(f64, usize, bool, f64)> = Vec::new();
    for (k, a) in alone.iter().enumerate().filter(|(_, a)| a.job.id != opener.id) {
        let before = ratio(opener_now.0 + a.cost, opener_now.1 + a.work);
        for direct in [true, false] {
            if !direct && !placer.config().scaling {
                continue;
            }
            let Some(members) = opened.with_candidate(a.job, direct.then_some(0), &res) else { continue };
            let Some(b) = within_lower_bound(&members, &[opener, a.job]) else { continue };
            let extra = if direct { 0.0 } else { pr.as_dollars() * a.job.rollout_width as f64 };
            let cost = own_cost + extra + opener_move + movable[&a.job.id].per_hour();
            // No schedule beats the bound: skip what could not win even at full speed.
            let bound = b.0.max(b.1).0.max(1) as f64;
            if ratio(cost, (opener.solo().0 + a.job.solo().0) as f64 / bound) >= before {
                continue;
            }
            let p = memo.entry((shape(a.job), direct)).or_insert_with(|| predict_with_bounds(&members, b));
            let after = ratio(cost, p.work([opener, a.job]));
            if after < before {
                ranked.push((after, k, direct, before));
            }
        }
    }
    ranked.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(y.2.cmp(&x.2)));
    ranked.into_iter().find_map(|(after, k, direct, before)| {
        let a = &alone[k];
        let members = opened.with_candidate(a.job, direct.then_some(0), &res)?;
        let jobs = [opener, a.job];
        let (t_cycle, t_load) = within_lower_bound(&members, &jobs)?;
        let p = &memo[&(shape(a.job), direct)];
        // Every mover's SLO must also absorb its move.
        let affordable = movable[&a.job.id].affordable(a.job, p.meta_iteration)
            && opener_moves.is_none_or(|m| m.affordable(opener, p.meta_iteration));
        (affordable && slo_holds(&members, &jobs, p, t_cycle.max(t_load))).then_some(Pairing {
            partner: a.job.id,
            direct,
            before,
            after,
        })
    })
}

/// A group `lonely` has one member left: the best move among pulling a job that runs alone
/// into it, moving its member into another group, or moving its member to co-located mode.
pub fn for_lone_group(placer: &Placer, lonely: GroupId, movable: &Movable) -> Option<Move> {
    let g = placer.group(lonely).filter(|g| g.is_lone())?;
    let (pr, pt) = prices(placer);
    let g_cost = g.hourly_cost(pr, pt).as_dollars();
    let g_work = g.work();
    let mut best: Option<Move> = None;
    let mut consider = |m: Move| {
        if m.after < m.before && best.is_none_or(|b| m.after < b.after) {
            best = Some(m);
        }
    };
    // Pull a job that runs alone elsewhere into this group: rank every (job, block) under the
    // timing model (once per job shape), then confirm the best with the placer's own check.
    let res = placer.config().residency;
    let alone = alone(placer, movable);
    let mut memo: BTreeMap<([u64; 10], Option<u32>), Prediction> = BTreeMap::new();
    let mut ranked: Vec<(f64, usize, Option<u32>)> = Vec::new();
    let before_of = |a: &Alone| ratio(g_cost + a.cost, g_work + a.work);
    for (k, a) in alone.iter().enumerate().filter(|(_, a)| a.group != lonely) {
        for block in g.blocks.iter().map(|b| Some(b.id)).chain([None]) {
            let Some(members) = g.with_candidate(a.job, block, &res) else { continue };
            let jobs = g.jobs_with(a.job);
            let Some(b) = within_lower_bound(&members, &jobs) else { continue };
            let extra = if block.is_none() { pr.as_dollars() * a.job.rollout_width as f64 } else { 0.0 };
            let cost = g_cost + extra + movable[&a.job.id].per_hour();
            let bound = b.0.max(b.1).0.max(1) as f64;
            if ratio(cost, jobs.iter().map(|j| j.solo().0 as f64).sum::<f64>() / bound) >= before_of(a) {
                continue;
            }
            let p = memo.entry((shape(a.job), block)).or_insert_with(|| predict_with_bounds(&members, b));
            let after = ratio(cost, p.work(jobs));
            if after < before_of(a) {
                ranked.push((after, k, block));
            }
        }
    }
    ranked.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let pulled = ranked.into_iter().find_map(|(_, k, block)| {
        let a = &alone[k];
        let target = Target::Group { group: lonely, block };
        let o = placer.option_at(a.job, target)?;
        if !movable[&a.job.id].affordable(a.job, o.period) {
            return None;
        }
        let after = ratio(g_cost + o.cost_per_hour.as_dollars() + movable[&a.job.id].per_hour(), g_work + o.work);
        Some(Move { job: a.job.id, target, before: before_of(a), after })
    });
    if let Some(m) = pulled {
        consider(m);
    }
    // Or move the member out.
    let member = &g.members[0].job;
    if let Some(mc) = movable.get(&member.id) {
        if let Some(o) = placer.option_at(member, Target::Colocated).filter(|o| mc.affordable(member, o.period)) {
            let after = ratio(o.cost_per_hour.as_dollars() + mc.per_hour(), o.work);
            consider(Move { job: member.id, target: Target::Colocated, before: ratio(g_cost, g_work), after });
        }
        if let Some(m) = best_group_move(placer, member, lonely, (g_cost, g_work), mc, &mut Predictions::new()) {
            consider(m);
        }
    }
    best
}

/// A job running co-located may join a group: the best such move, if it saves.
pub fn for_colocated(placer: &Placer, job: JobId, movable: &Movable, memo: &mut Predictions) -> Option<Move> {
    let mc = movable.get(&job)?;
    let gid = placer.group_of(job)?;
    let g = placer.group(gid).filter(|g| g.colocated)?;
    let (pr, pt) = prices(placer);
    let own = (g.hourly_cost(pr, pt).as_dollars(), g.work());
    best_group_move(placer, &g.members[0].job, gid, own, mc, memo)
}

/// The best move of `job` (now in group `except`, costing and yielding `own`) into another
/// open group, if it lowers the cost per unit of work of the jobs it touches.
///
/// Branch and bound: every (group, block) is first ranked by a bound that needs no schedule
/// (no member's period beats `max(T_cycle, T_load)`, so the work rate is at most
/// `sum(solo) / bound`); only candidates whose bound could still win get the placer's exact
/// check (timing, SLOs with variation, capacity), best bound first.
fn best_group_move(
    placer: &Placer,
    job: &PlaceJob,
    except: GroupId,
    own: (f64, f64),
    mc: &MoveCost,
    memo: &mut Predictions,
) -> Option<Move> {
    let move_per_hour = mc.per_hour();
    let (pr, pt) = prices(placer);
    let res = placer.config().residency;
    // (bound on the cost per unit of work, group, block, the group's cost and work now)
    type Ranked = (f64, GroupId, Option<u32>, (f64, f64));
    let mut ranked: Vec<Ranked> = Vec::new();
    for g in placer.groups().filter(|g| g.id != except && !g.colocated && !g.prediction.saturated) {
        let view = (g.hourly_cost(pr, pt).as_dollars(), g.work());
        let before = ratio(own.0 + view.0, own.1 + view.1);
        let scaling = placer.config().scaling.then_some(None);
        for block in g.blocks.iter().map(|b| Some(b.id)).chain(scaling) {
            let Some(members) = g.with_candidate(job, block, &res) else { continue };
            let jobs = g.jobs_with(job);
            let Some((t_cycle, t_load)) = within_lower_bound(&members, &jobs) else { continue };
            let bound = t_cycle.max(t_load).0.max(1) as f64;
            let work_ub: f64 = jobs.iter().map(|j| j.solo().0 as f64 / bound).sum();
            let extra = if block.is_none() { pr.as_dollars() * job.rollout_width as f64 } else { 0.0 };
            let after_lb = ratio(view.0 + extra + move_per_hour, work_ub);
            if after_lb < before {
                ranked.push((after_lb, g.id, block, view));
            }
        }
    }
    ranked.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(y.2.is_some().cmp(&x.2.is_some())));
    let mut best: Option<Move> = None;
    for (after_lb, group, block, view) in ranked {
        if best.is_some_and(|b| after_lb >= b.after) {
            break;
        }
        // The placer's own checks: nodes, memory, timing (predicted once per shape), SLOs.
        let g = placer.group(group)?;
        if !placer.nodes_available(job, group, block) {
            continue;
        }
        let Some(members) = g.with_candidate(job, block, &res) else { continue };
        let jobs = g.jobs_with(job);
        let Some(b) = within_lower_bound(&members, &jobs) else { continue };
        let p = memo.entry((group, block, shape(job))).or_insert_with(|| predict_with_bounds(&members, b));
        if !mc.affordable(job, p.meta_iteration) || !slo_holds(&members, &jobs, p, b.0.max(b.1)) {
            continue;
        }
        let added = p.work(jobs.iter().copied()) - view.1;
        let extra = if block.is_none() { pr.as_dollars() * job.rollout_width as f64 } else { 0.0 };
        let before = ratio(own.0 + view.0, own.1 + view.1);
        let after = ratio(view.0 + extra + move_per_hour, view.1 + added);
        if added > 0.0 && after < before && best.is_none_or(|b| after < b.after) {
            best = Some(Move { job: job.id, target: Target::Group { group, block }, before, after });
        }
    }
    best
}
