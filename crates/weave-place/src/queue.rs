//! One pass over the sharing queue, for the replay and the server alike: the policy's order,
//! quotas, preemption for the first job that finds no room, and EASY backfill behind it. The
//! driver (the replay's engine, the server's plane) says what waits and runs and carries out
//! starts and preemptions; every decision is here or in [`crate::share`].

use crate::share::{Claim, Nodes, ShareMode, SharePolicy, Usage, Waiting};
use weave_core::{Micros, Priority};

/// Why a waiting job did not start in a pass (the server shows it to the job's owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Its tenant's quota (with what it may borrow) does not cover it.
    OverQuota,
    /// Starting it would push back the blocked job ahead of it (backfill refused).
    WouldDelayHead,
    /// It is the first job that finds no room.
    NoRoom,
    /// Without backfill: jobs ahead of it are waiting for free nodes.
    BehindHead,
}

/// What the queue pass needs from its driver. Indices `k` are into [`QueueDriver::waiting`].
pub trait QueueDriver {
    fn policy(&self) -> &SharePolicy;
    /// Quota in use per tenant now.
    fn usage(&self) -> Usage;
    /// The waiting jobs as the policy sees them.
    fn waiting(&self) -> Vec<Waiting>;
    /// The order to consider them in (by tenants' use now, or by recent use with decay).
    fn order(&self, waiting: &[Waiting], usage: &Usage) -> Vec<usize>;
    /// Admits waiting job `k` now; false (it keeps waiting) if the placer finds no room.
    fn try_start(&mut self, k: usize) -> bool;
    /// Preempts what [`SharePolicy::preemption`] picks for `w`; false if nothing would do.
    fn preempt_for(&mut self, w: Waiting, usage: &Usage, claim: Claim) -> bool;
    /// When a job needing `demand` could start at the latest as running jobs end.
    fn shadow(&self, demand: Nodes) -> Micros;
    /// EASY's test: whether waiting job `k` may start now behind a blocked head needing
    /// `head` that could start at `at`.
    fn keeps_head(&self, k: usize, head: Nodes, at: Micros) -> bool;
    /// Told why waiting job `k` did not start.
    fn blocked(&mut self, _k: usize, _why: Blocked) {}
}

/// Starts one waiting job if any may start; false when nothing more can start now. A job over
/// its tenant's quota waits without holding up other tenants; the first that finds no room
/// may preempt, and holds up the rest (with backfill: the rest may start if they leave its
/// projected start where it was). A job of higher priority than that head may still preempt
/// behind it, taking only what its victims free.
pub fn start_one<D: QueueDriver>(d: &mut D) -> bool {
    let usage = d.usage();
    let waiting = d.waiting();
    let mode = d.policy().mode;
    let (preempt, backfill) = (mode >= ShareMode::Preemption, mode >= ShareMode::Backfill);
    let mut head: Option<Head> = None;
    for k in d.order(&waiting, &usage) {
        let w = waiting[k];
        // A job that outranks the blocked head may still preempt, for what its victims free.
        let claim = match head {
            None => Some(Claim::Head),
            Some(h) if w.priority > h.priority => Some(Claim::BehindHead),
            Some(_) => None,
        };
        let preempt_and_start =
            |d: &mut D| preempt && claim.is_some_and(|c| d.preempt_for(w, &usage, c)) && d.try_start(k);
        if !d.policy().may_start(w.tenant, w.demand, &usage) {
            // Over quota: it may displace its own tenant's lower-priority jobs.
            if preempt_and_start(d) {
                return true;
            }
            d.blocked(k, Blocked::OverQuota);
            continue;
        }
        if let Some(h) = head {
            let keeps = backfill && d.keeps_head(k, h.demand, h.at);
            if keeps && d.try_start(k) || preempt_and_start(d) {
                return true;
            }
            if !keeps {
                d.blocked(k, if backfill { Blocked::WouldDelayHead } else { Blocked::BehindHead });
            }
            continue;
        }
        if d.try_start(k) || preempt_and_start(d) {
            return true;
        }
        d.blocked(k, Blocked::NoRoom);
        let at = if backfill { d.shadow(w.demand) } else { Micros(u64::MAX) };
        head = Some(Head { demand: w.demand, priority: w.priority, at });
    }
    false
}

/// The first waiting job that found no room.
#[derive(Clone, Copy)]
struct Head {
    demand: Nodes,
    priority: Priority,
    /// With backfill, when it could start at the latest.
    at: Micros,
}
