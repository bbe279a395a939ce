//! What a cluster manager must do for Weave: say which of Weave's nodes it has and in what
//! health, list the launches Weave made there, launch one pinned to its nodes, stop one.

use std::collections::BTreeMap;
use weave_core::{NodeId, Pool};

/// The pool sizes a manager's Weave nodes make: one past the highest index of each pool (a gap
/// is a node that is missing, hence out of service); `Err` names a pool with no node at all.
/// (Ray's labelled nodes and Slurm's named ones alike.)
pub fn pool_sizes(nodes: impl IntoIterator<Item = NodeId>) -> Result<(u32, u32), Pool> {
    let (mut rollout, mut training) = (0, 0);
    for n in nodes {
        let size = match n.pool {
            Pool::Rollout => &mut rollout,
            Pool::Training => &mut training,
        };
        *size = (*size).max(n.index + 1);
    }
    match (rollout, training) {
        (0, _) => Err(Pool::Rollout),
        (_, 0) => Err(Pool::Training),
        sizes => Ok(sizes),
    }
}

/// A node's health as the cluster manager reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeHealth {
    /// It runs (or can run) jobs.
    Up,
    /// An operator is taking it out (a Slurm drain): its jobs still run. Weave reads this as a
    /// preemption notice: the node closes to placements and leaves service after
    /// [`crate::DRAIN_NOTICE`] or once the manager reports it gone.
    Draining(String),
    /// Lost, down or drained: out of service, with the manager's reason.
    Gone(String),
}

/// A launch's state as the cluster manager reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchStatus {
    Pending,
    Running,
    /// Over, with the manager's word for how (`FAILED`, `NODE_FAIL`, `STOPPED`...).
    Ended(String),
    /// A state the driver does not know, as printed: neither launched again nor failed.
    Other(String),
}

impl LaunchStatus {
    pub fn ended(&self) -> bool {
        matches!(self, LaunchStatus::Ended(_))
    }
}

/// One launch of this Weave's that the cluster manager lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// [`crate::launch_id`] of the admission it runs.
    pub launch_id: String,
    pub job: String,
    pub uid: u32,
    pub status: LaunchStatus,
    /// The manager's message or reason (empty if none).
    pub message: String,
}

/// What a driver gets to launch an admitted job (a copy: the plane is not locked meanwhile).
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    /// [`crate::launch_id`]: how the launch is recognised later, across restarts.
    pub id: String,
    /// This Weave's instance id (`JobTokens::instance_id`), which the id holds too.
    pub instance: String,
    pub job: String,
    pub uid: u32,
    pub tenant: String,
    /// The job's `launch.entrypoint`.
    pub entrypoint: String,
    /// Its `launch.env` and Weave's variables ([`crate::job_env`]), Weave's winning.
    pub env: BTreeMap<String, String>,
    /// The nodes to pin it to: its rollout and training nodes, each once.
    pub nodes: Vec<NodeId>,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The manager did not answer (or answered nonsense): retried next round; nothing is
    /// marked down or failed on it.
    #[error("{0}")]
    Unavailable(String),
    /// The manager refused the launch itself (bad partition, unknown node, invalid runtime
    /// environment): retrying cannot help, so the job fails with this message.
    #[error("{0}")]
    Refused(String),
}

/// A cluster manager Weave launches on. Blocking calls, made from the backend's own thread.
pub trait ClusterDriver: Send {
    /// How messages name the manager ("Ray", "Slurm").
    fn cluster(&self) -> &'static str;
    /// The health of each of Weave's nodes the manager has.
    fn nodes(&mut self) -> Result<BTreeMap<NodeId, NodeHealth>, DriverError>;
    /// Why `node` is out of service when the manager does not list it.
    fn missing_reason(&self, node: NodeId) -> String {
        format!("{} lists no node {node}", self.cluster())
    }
    /// This Weave's launches (`instance`: `JobTokens::instance_id`) the manager lists.
    fn launches(&mut self, instance: &str) -> Result<Vec<Listed>, DriverError>;
    fn launch(&mut self, request: &LaunchRequest) -> Result<(), DriverError>;
    fn stop(&mut self, launch_id: &str) -> Result<(), DriverError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_sized_by_their_highest_index_and_an_empty_one_is_named() {
        let ids = |names: &[&str]| names.iter().map(|n| n.parse::<NodeId>().unwrap()).collect::<Vec<_>>();
        // A gap (r1 missing) is a node out of service, not a smaller pool.
        assert_eq!(pool_sizes(ids(&["r0", "r2", "t0"])), Ok((3, 1)));
        assert_eq!(pool_sizes(ids(&["t0", "t1"])), Err(Pool::Rollout));
        assert_eq!(pool_sizes(ids(&["r0"])), Err(Pool::Training));
    }
}
