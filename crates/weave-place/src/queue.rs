//! One pass over the sharing queue, for the replay and the server alike: the policy's order,
//! quotas, preemption for the first job that finds no room, and EASY backfill behind it. The
//! driver (the replay's engine, the server's plane) says what waits and runs and carries out
//! starts and preemptions; every decision is here or in [`crate::share`].

use crate::placer::Placer;
use crate::share::{self, Claim, Nodes, ShareMode, SharePolicy, Usage, Waiting};
use weave_core::{JobId, Micros, Priority};

/// Why a waiting job did not start in a pass (the server shows it to the job's owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Its tenant's quota (with what it may borrow) does not cover it.
    OverQuota,
    /// Starting it would push back a blocked job ahead of it (backfill refused).
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
    fn placer(&self) -> &Placer;
    fn now(&self) -> Micros;
    /// When running job `job` ends at the latest (`None`: not in view).
    fn running_end(&self, job: JobId) -> Option<Micros>;
    /// How long waiting job `k` holds its nodes at most once started (`None`: for good).
    fn duration(&self, k: usize) -> Option<Micros>;
    /// Told why waiting job `k` did not start.
    fn blocked(&mut self, _k: usize, _why: Blocked) {}
    /// Told that a job was just backfilled past the blocked jobs in `promised`: each (by its
    /// [`Waiting::arrival`]) with the start projected for it then, which the backfill left
    /// where it was. A later start means something pushed it back (the replay checks).
    fn backfilled(&mut self, _promised: &[(u64, Micros)]) {}
}

/// How many blocked jobs backfill protects: each waiting job that finds no room, in the queue's
/// order, up to this many, keeps its projected start (conservative backfill to this depth, as
/// schedulers bound their backfill passes); jobs further back are not protected.
pub const RESERVATIONS: usize = 8;

/// Starts one waiting job if any may start; false when nothing more can start now. A job over
/// its tenant's quota waits without holding up other tenants; the first that finds no room
/// may preempt, and holds up the rest. With backfill, a later job may start if it leaves the
/// projected start of every blocked job ahead of it (up to [`RESERVATIONS`]) where it was. A
/// job of higher priority than that head may still preempt behind it, taking only what its
/// victims free.
pub fn start_one<D: QueueDriver>(d: &mut D) -> bool {
    let usage = d.usage();
    let waiting = d.waiting();
    let mode = d.policy().mode;
    let (preempt, backfill) = (mode >= ShareMode::Preemption, mode >= ShareMode::Backfill);
    // The first job that found no room, by priority.
    let mut head: Option<Priority> = None;
    let mut reserved = Reserved::default();
    for k in d.order(&waiting, &usage) {
        let w = waiting[k];
        // A job that outranks the blocked head may still preempt, for what its victims free.
        let claim = match head {
            None => Some(Claim::Head),
            Some(p) if w.priority > p => Some(Claim::BehindHead),
            Some(_) => None,
        };
        let preempt_and_start =
            |d: &mut D| preempt && claim.is_some_and(|c| d.preempt_for(w, &usage, c)) && d.try_start(k);
        if !d.policy().may_start_waiting(&w, &usage) {
            // Over quota: it may displace its own tenant's lower-priority jobs.
            if preempt_and_start(d) {
                return true;
            }
            d.blocked(k, Blocked::OverQuota);
            continue;
        }
        if head.is_some() {
            // Its demand and duration, asked once (the server estimates the duration by placing it).
            let job = backfill.then(|| (w.demand, d.duration(k)));
            let keeps = job.is_some_and(|job| reserved.keeps(d, job));
            if keeps && d.try_start(k) {
                d.backfilled(&reserved.promised());
                return true;
            }
            if preempt_and_start(d) {
                return true;
            }
            d.blocked(
                k,
                if !backfill {
                    Blocked::BehindHead
                } else if keeps {
                    Blocked::NoRoom
                } else {
                    Blocked::WouldDelayHead
                },
            );
            if let Some(job) = job {
                reserved.add(d, w.arrival, job);
            }
        } else {
            if d.try_start(k) || preempt_and_start(d) {
                return true;
            }
            d.blocked(k, Blocked::NoRoom);
            head = Some(w.priority);
            if backfill {
                reserved.add(d, w.arrival, (w.demand, d.duration(k)));
            }
        }
    }
    false
}

/// The blocked jobs backfill protects and their projected starts.
#[derive(Default)]
struct Reserved {
    jobs: Vec<Job>,
    /// Their [`Waiting::arrival`]s.
    arrivals: Vec<u64>,
    starts: Vec<Option<Micros>>,
}

/// A waiting job as the projections see it: its demand and how long it holds it.
type Job = (Nodes, Option<Micros>);

impl Reserved {
    fn add(&mut self, d: &impl QueueDriver, arrival: u64, job: Job) {
        if self.jobs.len() < RESERVATIONS {
            self.jobs.push(job);
            self.arrivals.push(arrival);
            self.starts = share::projected_starts(d.placer(), d.now(), |j| d.running_end(j), &self.jobs);
        }
    }

    /// Each reserved job with a projected start, by arrival.
    fn promised(&self) -> Vec<(u64, Micros)> {
        self.arrivals.iter().zip(&self.starts).filter_map(|(&a, s)| s.map(|s| (a, s))).collect()
    }

    fn keeps(&self, d: &impl QueueDriver, job: Job) -> bool {
        share::backfill_keeps_reserved(d.placer(), d.now(), |j| d.running_end(j), job, &self.jobs, &self.starts)
    }
}
