//! Nodes, placements and co-execution groups.

use crate::job::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which pool a node belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    Rollout,
    Training,
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pool::Rollout => "rollout",
            Pool::Training => "training",
        })
    }
}

/// A node, identified by its pool and an index that is never reused within a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId {
    pub pool: Pool,
    pub index: u32,
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.pool {
            Pool::Rollout => 'r',
            Pool::Training => 't',
        };
        write!(f, "{p}{}", self.index)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GroupId(pub u32);

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// Where one job runs: its rollout nodes (exclusively during its rollout) and the group's
/// training pool (shared by all members, one trains at a time). Node lists are sorted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub job: JobId,
    pub group: GroupId,
    pub rollout_nodes: Vec<NodeId>,
    pub training_nodes: Vec<NodeId>,
}
