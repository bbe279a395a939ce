//! When consolidation looks and what it then does, written once for the replay's engine and
//! the server's plane (as [`crate::queue::start_one`] is for the sharing queue). The planning
//! functions of [`super`] decide where a job should go; the passes here call them at the
//! right moments and hand each move to the driver, which owns its jobs' progress and carries
//! the move out in its own world (simulated events, or durable records and a `Requeued`
//! driver).
//!
//! A move never throws away work in flight: a job that holds a phase (or a finished rollout
//! whose training has not run) when its move is decided keeps running, and the move takes
//! effect when that iteration ends ([`iteration_ended`], which each driver calls at the same
//! point: the job's training finished with no rollout of a later iteration under way). Until
//! then the move is the driver's, [`Deferred`]; it counts against the churn limits from the
//! moment it is decided.

use super::{for_colocated, for_lone_group, pair_alone, pair_for_arrival, Movable, Move, Pairing, Predictions};
use crate::job::PlaceJob;
use crate::placer::{Placer, Target};
use serde::{Deserialize, Serialize};
use weave_core::{GroupId, JobId};

/// A move decided while its job held work, carried out when the job's iteration ends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Deferred {
    /// The job moves to the move's target.
    Move(Move),
    /// The job (running alone) opens a new group of its own, and the pairing's partner moves
    /// in (itself deferred if it then holds work).
    PairUp { opener: Move, pair: Pairing },
}

impl Deferred {
    /// The job whose move waits.
    pub fn job(&self) -> JobId {
        match self {
            Deferred::Move(m) | Deferred::PairUp { opener: m, .. } => m.job,
        }
    }
}

/// What a consolidation pass needs from the world it runs in.
pub trait ConsolidationDriver {
    fn placer(&self) -> &Placer;
    /// The jobs that may move now: [`super::movable`] with what the driver knows of its jobs'
    /// progress and SLO slack (empty when consolidation is off).
    fn movable(&mut self) -> Movable;
    /// Carries out a planned move: the job, holding no work, leaves where it runs and is
    /// placed at `m.target`, or where admission decides if the target no longer
    /// takes it; the driver records the move against its churn limits unless `counted` (a
    /// deferred move, counted when it was decided). Returns the job's id where it now runs
    /// (the server gives each admission a new one), `None` if it could not be placed again.
    /// Called only for a job that holds no work ([`ConsolidationDriver::holds_work`]).
    fn carry_out(&mut self, m: Move, movable: &Movable, counted: bool) -> Option<JobId>;
    /// Whether moving `job` now would throw work away: a phase granted or running, or a
    /// finished rollout whose training has not run.
    fn holds_work(&self, job: JobId) -> bool;
    /// Keeps `d` until its job's iteration ends, recording it against the churn limits now;
    /// the driver leaves the job out of [`ConsolidationDriver::movable`] meanwhile and drops
    /// `d` if the job leaves its group before then.
    fn defer(&mut self, d: Deferred, movable: &Movable);
    /// The deferred move of `job`, taken out, if any.
    fn take_deferred(&mut self, job: JobId) -> Option<Deferred>;
    /// Drains `job`'s rollout lane while its move waits (`true`: no rollout of a later
    /// iteration starts before its training ends, as on-policy), or gives it back its own
    /// staleness (`false`: the move was dropped).
    fn drain(&mut self, job: JobId, on: bool);
}

/// Whether `m`'s job still fits its target as admission would check it (the group may have
/// changed, or gone, while the move waited).
fn still_fits(placer: &Placer, m: Move) -> bool {
    let member =
        placer.group_of(m.job).and_then(|g| placer.group(g)).and_then(|g| g.members.iter().find(|x| x.job.id == m.job));
    member.is_some_and(|x| placer.option_at(&x.job, m.target).is_some())
}

/// Carries out `m` now, or defers it to the end of the job's iteration if the job holds work.
/// Returns where the job now runs (`None` if deferred or not placed again).
fn move_or_defer<D: ConsolidationDriver>(d: &mut D, m: Move, movable: &Movable) -> Option<JobId> {
    if d.holds_work(m.job) {
        d.defer(Deferred::Move(m), movable);
        d.drain(m.job, true);
        return None;
    }
    d.carry_out(m, movable, false)
}

/// `job`'s iteration ended and it holds no further work (the driver says when: the server
/// after the training's finish, the replay at the training's end): its deferred move, if any,
/// is carried out now (a move into a group it no longer fits, or that is gone, is dropped).
/// True if the job left where it ran.
pub fn iteration_ended<D: ConsolidationDriver>(d: &mut D, job: JobId) -> bool {
    let Some(deferred) = d.take_deferred(job) else { return false };
    debug_assert_eq!(deferred.job(), job);
    let movable = Movable::new();
    match deferred {
        Deferred::Move(m) => {
            if matches!(m.target, Target::Group { .. }) && !still_fits(d.placer(), m) {
                d.drain(job, false);
                return false;
            }
            d.carry_out(m, &movable, true);
            true
        }
        Deferred::PairUp { opener, pair } => {
            pair_up_now(d, opener, pair, &movable, true);
            true
        }
    }
}

/// A group was left with one member: pull a job that runs alone into it, or move its member
/// into another group or to co-located mode, whichever saves most. True if a job moved.
pub fn lone_group<D: ConsolidationDriver>(d: &mut D, g: GroupId) -> bool {
    let movable = d.movable();
    let Some(m) = for_lone_group(d.placer(), g, &movable) else { return false };
    move_or_defer(d, m, &movable);
    true
}

/// On arrival: whether `job` should open a group of its own that a job running alone then
/// moves into (see [`partner_joins`]), rather than go where admission would put it. Returns
/// the pairing and the movable jobs it was chosen among.
pub fn pairing_on_arrival<D: ConsolidationDriver>(d: &mut D, job: &PlaceJob) -> Option<(Pairing, Movable)> {
    let best = d.placer().best_option(job).ok()?;
    let movable = d.movable();
    let pair = pair_for_arrival(d.placer(), job, best, &movable)?;
    Some((pair, movable))
}

/// The partner of a pairing moves into the group `opened` that its opener now runs alone in
/// (on the opener's rollout block or a new one). Nothing moves unless the opener still runs
/// alone in a disaggregated group.
pub fn partner_joins<D: ConsolidationDriver>(d: &mut D, opened: GroupId, pair: Pairing, movable: &Movable) {
    if !d.placer().group(opened).is_some_and(|g| g.is_lone()) {
        return;
    }
    let target = Target::Group { group: opened, block: pair.direct.then_some(0) };
    move_or_defer(d, Move { job: pair.partner, target, before: pair.before, after: pair.after }, movable);
}

/// The periodic pass: every job that runs alone (a lone group's member or a co-located job)
/// is looked at once, in group order; it moves into another group, or a lone group's member
/// takes a job that runs alone in, or two jobs that run alone pair up in a new group.
pub fn periodic_pass<D: ConsolidationDriver>(d: &mut D) {
    let candidates: Vec<(GroupId, JobId, bool)> =
        d.placer().groups().filter(|g| g.runs_alone()).map(|g| (g.id, g.members[0].job.id, g.colocated)).collect();
    // Predictions and the movable jobs stay valid until something moves.
    let mut memo = Predictions::new();
    let mut movable = d.movable();
    for (g, job, colocated) in candidates {
        if movable.is_empty() {
            return;
        }
        if d.placer().group_of(job) != Some(g) {
            continue;
        }
        let planned = if colocated {
            for_colocated(d.placer(), job, &movable, &mut memo)
        } else {
            for_lone_group(d.placer(), g, &movable)
        };
        let moved = if let Some(m) = planned {
            move_or_defer(d, m, &movable);
            true
        } else if let Some(pair) = pair_alone(d.placer(), job, &movable) {
            pair_up(d, job, pair, &movable);
            true
        } else {
            false
        };
        if moved {
            memo.clear();
            movable = d.movable();
        }
    }
}

/// `opener` (running alone) moves to a new group of its own and the partner moves in (both
/// when the opener's iteration ends, if it holds work now).
fn pair_up<D: ConsolidationDriver>(d: &mut D, opener: JobId, pair: Pairing, movable: &Movable) {
    let m = Move { job: opener, target: Target::Isolated, before: pair.before, after: pair.after };
    if d.holds_work(opener) {
        d.defer(Deferred::PairUp { opener: m, pair }, movable);
        d.drain(opener, true);
        return;
    }
    pair_up_now(d, m, pair, movable, false);
}

fn pair_up_now<D: ConsolidationDriver>(
    d: &mut D,
    opener: Move,
    pair: Pairing,
    movable: &Movable,
    counted: bool,
) -> bool {
    let Some(group) = d.carry_out(opener, movable, counted).and_then(|id| d.placer().group_of(id)) else {
        return false;
    };
    partner_joins(d, group, pair, movable);
    true
}
