//! What the replay keeps per running job (`JobRun`): its streams, progress, placement and SLO
//! bookkeeping. (Not the server's `JobState`, which is a job's lifecycle state.)

use crate::workload::{SimJob, SoloPipeline};
use std::collections::{BTreeMap, VecDeque};
use weave_core::{Micros, PhaseTimes};
use weave_model::Stream;

use super::Placed;

pub(super) struct JobRun {
    pub(super) rng: Stream,
    pub(super) fail_rng: Stream,
    /// Each started iteration's drawn durations (disaggregated at the job's own widths, and
    /// co-located), from its rollout's start until it is done: with bounded staleness later
    /// rollouts start before an iteration trains.
    pub(super) draws: BTreeMap<u64, (PhaseTimes, PhaseTimes)>,
    /// Versions behind summed over its rollouts, and the rollouts counted (bounded staleness).
    pub(super) lag: (u64, u64),
    pub(super) first_admitted: Micros,
    pub(super) last_train_end: Micros,
    pub(super) solo_sum: Micros,
    pub(super) within_slo: u64,
    pub(super) done: u64,
    pub(super) checkpoint: u64,
    /// A bounded-staleness job's solo run on its own draws (its solo reference).
    pub(super) solo_pipeline: SoloPipeline,
    /// `solo_sum`, `within_slo` and the solo pipeline at the last checkpoint: a preemption
    /// rolls them back with the work, since a solo run would never have lost it (a failure
    /// does not: solo fails too).
    pub(super) at_checkpoint: (Micros, u64, SoloPipeline),
    /// Times preempted: to reclaim borrowed capacity, and outranked within its tenant.
    pub(super) preempted: (u32, u32),
    /// Training GPU-time charged busy since its last checkpoint (what a preemption wastes).
    pub(super) train_busy_unsaved: u128,
    /// The next finished iteration is the first since (re)admission: it paid a cold start.
    pub(super) fresh: bool,
    pub(super) placed: Option<Placed>,
    pub(super) epoch: u32,
    pub(super) measured: VecDeque<PhaseTimes>,
    pub(super) restarts: u32,
    pub(super) last_move: Option<Micros>,
    /// When its current admission began (preemption's minimum run time counts from here).
    pub(super) admitted_at: Micros,
    /// The next fresh start follows a failure: a solo run would have paid its cold start too,
    /// so it is added to the solo reference. A move the scheduler chose is not excused.
    pub(super) excused: bool,
    /// The job's own predicted slowdown at its last admission.
    pub(super) predicted: f64,
    /// The current rollout's start and its duration without migration.
    pub(super) rollout_started: Micros,
    pub(super) rollout_plain: Micros,
    /// When its current training phase started.
    pub(super) train_started: Micros,
    /// A rollout of its is in flight, and the delay spot preemptions have added to it.
    pub(super) rolling: bool,
    pub(super) rollout_extra: Micros,
    /// Its rollout tier (spot runs), chosen at its first admission.
    pub(super) spot: Option<bool>,
    /// A pack's members, each judged on its own (empty for a job of its own).
    pub(super) members: Vec<MemberRun>,
}

/// A pack member's progress and SLO bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MemberRun {
    pub(super) done: u64,
    pub(super) solo_sum: Micros,
    pub(super) within_slo: u64,
    /// Its outcome is in the metrics (it finished its iterations).
    pub(super) recorded: bool,
    /// When it entered the pack: the pack's first admission for a founder, its arrival for a
    /// job that joined the pack running (its life, and so its slowdown, counts from here).
    pub(super) admitted: Micros,
}

impl JobRun {
    /// Iteration `k`'s drawn durations, disaggregated and co-located (the estimates if it has
    /// not started).
    pub(super) fn drawn(&self, k: u64, job: &SimJob) -> (PhaseTimes, PhaseTimes) {
        self.draws.get(&k).copied().unwrap_or((job.disagg, job.colo))
    }

    /// Its checkpoint is now: a later preemption or failure resumes here, and its SLO's solo
    /// reference and unsaved training time roll back to here.
    pub(super) fn save_checkpoint(&mut self) {
        self.checkpoint = self.done;
        self.at_checkpoint = (self.solo_sum, self.within_slo, self.solo_pipeline.clone());
        self.train_busy_unsaved = 0;
    }
}
