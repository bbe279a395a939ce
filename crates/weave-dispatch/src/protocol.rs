//! What a driver tells the dispatcher (inputs) and what it answers (actions), the members it
//! is given, and why it refuses an input.

use crate::order::GroupOrder;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use weave_core::{Bytes, JobId, Micros};
use weave_model::SwitchKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Rollout,
    Train,
}

impl Phase {
    /// The name clients use (as serialized): `rollout` or `train`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Rollout => "rollout",
            Phase::Train => "train",
        }
    }
}

/// Switch times of one member, per pool, from the profile model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchCosts {
    pub rollout_warm: Micros,
    pub rollout_cold: Micros,
    pub train_warm: Micros,
    pub train_cold: Micros,
}

impl SwitchCosts {
    /// These costs with a job's measured warm and cold switch (one figure per kind, both
    /// pools) in place of the model's where given.
    pub fn with_measured(self, warm: Option<Micros>, cold: Option<Micros>) -> SwitchCosts {
        let (rollout_warm, train_warm) = warm.map_or((self.rollout_warm, self.train_warm), |w| (w, w));
        let (rollout_cold, train_cold) = cold.map_or((self.rollout_cold, self.train_cold), |c| (c, c));
        SwitchCosts { rollout_warm, rollout_cold, train_warm, train_cold }
    }

    pub fn get(&self, phase: Phase, kind: SwitchKind) -> Micros {
        match (phase, kind) {
            (Phase::Rollout, SwitchKind::Warm) => self.rollout_warm,
            (Phase::Rollout, SwitchKind::Cold) => self.rollout_cold,
            (Phase::Train, SwitchKind::Warm) => self.train_warm,
            (Phase::Train, SwitchKind::Cold) => self.train_cold,
        }
    }
}

/// A job joining the group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberSpec {
    pub job: JobId,
    /// Group-local rollout node indices (sorted, non-empty); the rollout needs all at once.
    pub rollout_nodes: Vec<u32>,
    pub costs: SwitchCosts,
    /// Weight-sync time after each training phase.
    pub sync: Micros,
    /// Whether the job's state stays cached in host DRAM (warm switches). `false` models
    /// cold time slicing: every switch to this job is cold and nothing is cached.
    pub resident: bool,
    /// Host DRAM the job's cached state takes on each of its rollout nodes / training nodes.
    pub rollout_state: Bytes,
    pub train_state: Bytes,
    /// Iterations to run; `None` runs until the job leaves.
    pub iterations: Option<u64>,
    /// Iterations already done (a job re-admitted from a checkpoint resumes there).
    pub start_iteration: u64,
    /// Bounded staleness k: rollout n may start once weights version n - k are synced (the
    /// trainings before n - k done and synced), so up to k rollouts run ahead of training.
    /// 0 is on-policy (rollout n waits for training n - 1 and its sync).
    pub staleness: u32,
}

/// The largest staleness a member may have (rollouts further ahead are refused at join).
pub use weave_core::MAX_STALENESS;

/// Inputs: what happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Input {
    Join(MemberSpec),
    /// The cyclic order each resource serves its members in (from the placer's prediction;
    /// jobs that are not members and nodes no member uses are ignored).
    Reorder(GroupOrder),
    /// Long-tail migration: the job's rollout stragglers moved to a few of its workers, so
    /// its rollout nodes are free for the next member although the rollout has not finished.
    RolloutReleased {
        job: JobId,
        iteration: u64,
    },
    /// The job left or failed; whatever it held is released.
    Leave {
        job: JobId,
    },
    SwitchFinished {
        job: JobId,
        phase: Phase,
        iteration: u64,
    },
    PhaseFinished {
        job: JobId,
        phase: Phase,
        iteration: u64,
    },
    SyncFinished {
        job: JobId,
        iteration: u64,
    },
}

/// Outputs: what to do now. Durations of switches and syncs come from the model; the driver
/// reports their end with the matching input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    BeginSwitch {
        job: JobId,
        phase: Phase,
        iteration: u64,
        kind: SwitchKind,
        duration: Micros,
        nodes: Vec<u32>,
    },
    /// Rollout `iteration` samples with weights version `weights` (trainings done and synced
    /// when it starts): `iteration - weights` is how many versions it lags, at most the job's
    /// staleness (always 0 on-policy).
    StartRollout {
        job: JobId,
        iteration: u64,
        weights: u64,
        nodes: Vec<u32>,
    },
    StartTraining {
        job: JobId,
        iteration: u64,
    },
    BeginSync {
        job: JobId,
        iteration: u64,
        duration: Micros,
    },
    Completed {
        job: JobId,
        iterations: u64,
    },
}

impl Action {
    /// The job the action is for.
    pub fn job(&self) -> JobId {
        match self {
            Action::BeginSwitch { job, .. }
            | Action::StartRollout { job, .. }
            | Action::StartTraining { job, .. }
            | Action::BeginSync { job, .. }
            | Action::Completed { job, .. } => *job,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DispatchError {
    #[error("job {0} is not a member of this group")]
    UnknownJob(JobId),
    #[error("job {0} is already a member of this group")]
    AlreadyMember(JobId),
    #[error("job {job}: {reason}")]
    Barrier { job: JobId, reason: String },
    #[error("job {job}: {reason}")]
    BadSpec { job: JobId, reason: String },
    #[error("job {job} refused: {reason}")]
    Residency { job: JobId, reason: String },
}

/// How a resource chooses among ready members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// Weave: no member gets ahead of another on a shared resource (one phase each per
    /// meta-iteration), FIFO among the rest.
    #[default]
    RoundRobin,
    /// Plain FIFO by readiness (the research prototype's group simulation).
    Fifo,
}
