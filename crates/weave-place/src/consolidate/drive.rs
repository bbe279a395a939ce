//! When consolidation looks and what it then does, written once for the replay's engine and
//! the server's plane (as [`crate::queue::start_one`] is for the sharing queue). The planning
//! functions of [`super`] decide where a job should go; the passes here call them at the
//! right moments and hand each move to the driver, which owns its jobs' progress and carries
//! the move out in its own world (simulated events, or durable records and a `Requeued`
//! driver).

use super::{for_colocated, for_lone_group, pair_alone, pair_for_arrival, Movable, Move, Pairing, Predictions};
use crate::job::PlaceJob;
use crate::placer::{Placer, Target};
use weave_core::{GroupId, JobId};

/// What a consolidation pass needs from the world it runs in.
pub trait ConsolidationDriver {
    fn placer(&self) -> &Placer;
    /// The jobs that may move now: [`super::movable`] with what the driver knows of its jobs'
    /// progress and SLO slack (empty when consolidation is off).
    fn movable(&mut self) -> Movable;
    /// Carries out a planned move: the job leaves where it runs (its partial iteration is
    /// lost) and is placed at `m.target`, or where admission decides if the target no longer
    /// takes it; the driver records the move against its churn limits. Returns the job's id
    /// where it now runs (the server gives each admission a new one), `None` if it could not
    /// be placed again.
    fn carry_out(&mut self, m: Move, movable: &Movable) -> Option<JobId>;
}

/// A group was left with one member: pull a job that runs alone into it, or move its member
/// into another group or to co-located mode, whichever saves most. True if a job moved.
pub fn lone_group<D: ConsolidationDriver>(d: &mut D, g: GroupId) -> bool {
    let movable = d.movable();
    let Some(m) = for_lone_group(d.placer(), g, &movable) else { return false };
    d.carry_out(m, &movable);
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
    d.carry_out(Move { job: pair.partner, target, before: pair.before, after: pair.after }, movable);
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
            d.carry_out(m, &movable);
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

/// `opener` (running alone) moves to a new group of its own and the partner moves in.
fn pair_up<D: ConsolidationDriver>(d: &mut D, opener: JobId, pair: Pairing, movable: &Movable) {
    let m = Move { job: opener, target: Target::Isolated, before: pair.before, after: pair.after };
    let Some(group) = d.carry_out(m, movable).and_then(|id| d.placer().group_of(id)) else { return };
    partner_joins(d, group, pair, movable);
}
