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

use crate::group::{Block, Group, Member};
use crate::job::PlaceJob;
use crate::placer::{OptionCost, Placer, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{Bytes, GroupId, JobId, Micros, Money, NodeId, Pool};

/// What moving a job costs once, and how long the saving would last.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MoveCost {
    pub once: Money,
    /// The job's expected remaining run time.
    pub horizon: Micros,
}

impl MoveCost {
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

/// Jobs that may move now, with their move costs.
pub type Movable = BTreeMap<JobId, MoveCost>;

/// A planned move: `job` leaves where it runs and goes to `target`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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

fn dollars(m: Money) -> f64 {
    m.as_dollars()
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
            (g.members.len() == 1).then(|| Alone {
                job: &g.members[0].job,
                group: g.id,
                cost: dollars(g.hourly_cost(pr, pt)),
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
    best_partner(placer, job, (dollars(best.cost_per_hour), best.work), 0.0, movable)
}

/// Two jobs that both run alone may do better together: `job` (running alone, movable)
/// opens a new group of its own and the partner moves in. Both pay their moves.
pub fn pair_alone(placer: &Placer, job: JobId, movable: &Movable) -> Option<Pairing> {
    let mc = movable.get(&job)?;
    let me = alone(placer, movable).into_iter().find(|a| a.job.id == job)?;
    best_partner(placer, me.job, (me.cost, me.work), mc.per_hour(), movable)
}

/// The partner among movable jobs running alone that saves most when it moves onto a group
/// `opener` opens (on the opener's block or a new one), given what the opener costs and
/// yields where it would be otherwise (`opener_now`) and its own move cost per hour.
fn best_partner(
    placer: &Placer,
    opener: &PlaceJob,
    opener_now: (f64, f64),
    opener_move: f64,
    movable: &Movable,
) -> Option<Pairing> {
    let (pr, pt) = prices(placer);
    let res = placer.config().residency;
    let opened = opened_by(placer, opener);
    let own_cost = dollars(opened.hourly_cost(pr, pt));
    let mut chosen: Option<Pairing> = None;
    for a in alone(placer, movable).into_iter().filter(|a| a.job.id != opener.id) {
        let mc = movable[&a.job.id];
        let before = ratio(opener_now.0 + a.cost, opener_now.1 + a.work);
        for direct in [true, false] {
            if !direct && !placer.config().scaling {
                continue;
            }
            let Some(p) = opened.try_add(a.job, direct.then_some(0), &res) else { continue };
            let extra = if direct { 0.0 } else { dollars(pr) * a.job.rollout_width as f64 };
            let after = ratio(own_cost + extra + opener_move + mc.per_hour(), p.work([opener, a.job]));
            if after < before && chosen.is_none_or(|c| after < c.after) {
                chosen = Some(Pairing { partner: a.job.id, direct, before, after });
            }
        }
    }
    chosen
}

/// A group `lonely` has one member left: the best move among pulling a job that runs alone
/// into it, moving its member into another group, or moving its member to co-located mode.
pub fn for_lone_group(placer: &Placer, lonely: GroupId, movable: &Movable) -> Option<Move> {
    let g = placer.group(lonely).filter(|g| g.members.len() == 1 && !g.colocated)?;
    let (pr, pt) = prices(placer);
    let g_cost = dollars(g.hourly_cost(pr, pt));
    let g_work = g.work();
    let mut best: Option<Move> = None;
    let mut consider = |m: Move| {
        if m.after < m.before && best.is_none_or(|b| m.after < b.after) {
            best = Some(m);
        }
    };
    // Pull a job that runs alone elsewhere into this group.
    for a in alone(placer, movable).into_iter().filter(|a| a.group != lonely) {
        for block in g.blocks.iter().map(|b| Some(b.id)).chain([None]) {
            let target = Target::Group { group: lonely, block };
            let Some(o) = placer.option_at(a.job, target) else { continue };
            let before = ratio(g_cost + a.cost, g_work + a.work);
            let after = ratio(g_cost + dollars(o.cost_per_hour) + movable[&a.job.id].per_hour(), g_work + o.work);
            consider(Move { job: a.job.id, target, before, after });
        }
    }
    // Or move the member out.
    let member = &g.members[0].job;
    if let Some(mc) = movable.get(&member.id) {
        if let Some(o) = placer.option_at(member, Target::Colocated) {
            let after = ratio(dollars(o.cost_per_hour) + mc.per_hour(), o.work);
            consider(Move { job: member.id, target: Target::Colocated, before: ratio(g_cost, g_work), after });
        }
        if let Some((target, o, other)) = best_group_for(placer, member, lonely) {
            let before = ratio(g_cost + other.0, g_work + other.1);
            let after = ratio(other.0 + dollars(o.cost_per_hour) + mc.per_hour(), other.1 + o.work);
            consider(Move { job: member.id, target, before, after });
        }
    }
    best
}

/// A job running co-located may join a group: the best such move, if it saves.
pub fn for_colocated(placer: &Placer, job: JobId, movable: &Movable) -> Option<Move> {
    let mc = movable.get(&job)?;
    let gid = placer.group_of(job)?;
    let g = placer.group(gid).filter(|g| g.colocated)?;
    let (pr, pt) = prices(placer);
    let own = (dollars(g.hourly_cost(pr, pt)), g.work());
    let member = &g.members[0].job;
    let (target, o, other) = best_group_for(placer, member, gid)?;
    let before = ratio(own.0 + other.0, own.1 + other.1);
    let after = ratio(other.0 + dollars(o.cost_per_hour) + mc.per_hour(), other.1 + o.work);
    (after < before).then_some(Move { job, target, before, after })
}

/// Where `job` would go among the open groups other than `except`, as admission scans them
/// (the first feasible direct option, else the first feasible scaling option), with that
/// group's hourly cost and work rate.
fn best_group_for(placer: &Placer, job: &PlaceJob, except: GroupId) -> Option<(Target, OptionCost, (f64, f64))> {
    let (pr, pt) = prices(placer);
    let mut scaling = None;
    for g in placer.groups().filter(|g| g.id != except && !g.colocated && !g.prediction.saturated) {
        let group_view = (dollars(g.hourly_cost(pr, pt)), g.work());
        for b in &g.blocks {
            let target = Target::Group { group: g.id, block: Some(b.id) };
            if let Some(o) = placer.option_at(job, target).filter(|o| o.work > 0.0) {
                return Some((target, o, group_view));
            }
        }
        if scaling.is_none() {
            let target = Target::Group { group: g.id, block: None };
            scaling = placer.option_at(job, target).map(|o| (target, o, group_view));
        }
    }
    scaling
}
