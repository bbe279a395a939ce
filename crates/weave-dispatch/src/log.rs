//! The dispatcher's trace: every decision and observation, and the same with its group (what
//! the replay writes with `--events` and the timeline draws).

use crate::Phase;
use serde::{Deserialize, Serialize};
use weave_core::{GroupId, JobId, Micros};
use weave_model::SwitchKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    Join,
    RolloutReleased,
    Leave,
    SwitchStart,
    PhaseStart,
    PhaseEnd,
    SyncStart,
    SyncEnd,
    Completed,
    /// The replay with lending on (never the dispatcher): the group's block `nodes[0]` is lent
    /// to `job`'s rollout until `until`.
    Lent,
    /// The replay with lending on: the loan of the group's block `nodes[0]` to `job` ended
    /// early, the borrower's rollout over (or the borrower gone) or the lender's group changed.
    LoanEnded,
}

/// One traceable dispatcher decision or observation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub time: Micros,
    pub job: JobId,
    pub kind: LogKind,
    pub phase: Option<Phase>,
    pub iteration: u64,
    /// Rollout nodes involved (empty for the training pool).
    pub nodes: Vec<u32>,
    pub switch: Option<SwitchKind>,
    /// A loan's reclaim deadline (`Lent` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Micros>,
}

/// One dispatcher decision, with its group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    pub group: GroupId,
    #[serde(flatten)]
    pub entry: LogEntry,
}
