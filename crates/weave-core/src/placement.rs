//! Nodes, placements and co-execution groups.

use crate::job::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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

impl FromStr for NodeId {
    type Err = String;

    /// `r3` is rollout node 3, `t0` training node 0 (the form `Display` prints).
    fn from_str(s: &str) -> Result<NodeId, String> {
        let bad = || format!("`{s}`: expected a node name such as r0 or t1");
        let pool = match s.as_bytes().first() {
            Some(b'r') => Pool::Rollout,
            Some(b't') => Pool::Training,
            _ => return Err(bad()),
        };
        let digits = &s[1..];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let index = digits.parse().map_err(|_| bad())?;
        Ok(NodeId { pool, index })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_round_trip_and_bad_ones_are_refused() {
        for n in [NodeId { pool: Pool::Rollout, index: 0 }, NodeId { pool: Pool::Training, index: 12 }] {
            assert_eq!(n.to_string().parse::<NodeId>(), Ok(n));
        }
        for bad in ["", "r", "x1", "r-1", "t1x", "r99999999999", "R1"] {
            assert!(bad.parse::<NodeId>().is_err(), "{bad}");
        }
    }
}
