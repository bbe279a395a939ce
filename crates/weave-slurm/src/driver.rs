//! Slurm as a [`ClusterDriver`]: Weave's nodes are the Slurm nodes named as Weave names them
//! (`r0`, `t0`...), their health read from `sinfo`; a launch is a batch job named by its
//! launch id and pinned with `--nodelist`, read back from `squeue` and cancelled by name.

use crate::client::{Launch, SlurmClient, SlurmError};
use crate::status::{JobState, NodeState, SlurmNode};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use weave_backend::{parse_launch_id, ClusterDriver, DriverError, LaunchRequest, LaunchStatus, Listed, NodeHealth};
use weave_core::NodeId;

pub struct SlurmDriver {
    client: SlurmClient,
    /// Where each launch's output goes (`<dir>/<launch id>.out`); Slurm's default otherwise.
    output_dir: Option<PathBuf>,
}

/// A node's health in Weave's terms.
pub fn health(node: &SlurmNode) -> NodeHealth {
    let why = if node.reason.is_empty() { String::new() } else { format!(" ({})", node.reason) };
    match &node.state {
        // Not responding but not set down by Slurm (every node, just after slurmctld restarts):
        // Slurm has not given up on it, nor does Weave.
        NodeState::Up | NodeState::Unresponsive => NodeHealth::Up,
        NodeState::Draining => {
            NodeHealth::Draining(if node.reason.is_empty() { "drain".into() } else { node.reason.clone() })
        }
        NodeState::Down => NodeHealth::Gone(format!("Slurm has node {} down or drained{why}", node.name)),
        NodeState::Lost => NodeHealth::Gone(format!("Slurm reports node {} down and not responding{why}", node.name)),
        // Never launch onto a node in a state this backend does not know.
        NodeState::Other(s) => NodeHealth::Gone(format!("Slurm reports node {} in state {s}{why}", node.name)),
    }
}

/// A job's state in Weave's terms.
pub fn status(state: &JobState) -> LaunchStatus {
    match state {
        JobState::Pending => LaunchStatus::Pending,
        JobState::Running => LaunchStatus::Running,
        JobState::Ended(how) => LaunchStatus::Ended(how.clone()),
        JobState::Other(s) => LaunchStatus::Other(s.clone()),
    }
}

/// Whether a failed command says the controller could not be reached (retry), rather than
/// refusing what was asked (fail the job with the message).
fn controller_unreachable(message: &str) -> bool {
    ["Unable to contact slurm controller", "Socket timed out", "temporarily unable", "Zero Bytes were transmitted"]
        .iter()
        .any(|m| message.contains(m))
}

fn unavailable(e: SlurmError) -> DriverError {
    DriverError::Unavailable(e.to_string())
}

impl SlurmDriver {
    pub fn new(client: SlurmClient, output_dir: Option<PathBuf>) -> SlurmDriver {
        SlurmDriver { client, output_dir }
    }

    /// A driver for `weave serve --backend slurm`: Slurm's commands behind `command` (a prefix
    /// split at spaces, e.g. `ssh login1`; empty: run here), launches to `partition`; with the
    /// pool sizes its nodes make, once Slurm answers (see [`SlurmDriver::pools_when_up`]).
    pub fn connect(
        command: &str,
        partition: Option<&str>,
        output_dir: Option<PathBuf>,
        patience: Duration,
    ) -> Result<(SlurmDriver, (u32, u32)), SlurmError> {
        let mut client = SlurmClient::new(command.split_whitespace().map(String::from).collect());
        if let Some(p) = partition {
            client = client.with_partition(p);
        }
        let driver = SlurmDriver::new(client, output_dir);
        let pools = driver.pools_when_up(patience)?;
        Ok((driver, pools))
    }

    /// The pool sizes Slurm's nodes make (one past the highest index of each pool; a gap is a
    /// node that is missing, hence out of service), once Slurm answers: retried every half
    /// second for `patience`. Slurm nodes whose names are not Weave node names are not Weave's;
    /// a pool with no node at all is refused, naming it.
    pub fn pools_when_up(&self, patience: Duration) -> Result<(u32, u32), SlurmError> {
        let deadline = Instant::now() + patience;
        let nodes = loop {
            match self.client.nodes() {
                Ok(nodes) => break nodes,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        };
        let ids = nodes.iter().filter_map(|n| n.name.parse::<NodeId>().ok());
        weave_backend::pool_sizes(ids).map_err(SlurmError::EmptyPool)
    }
}

impl ClusterDriver for SlurmDriver {
    fn cluster(&self) -> &'static str {
        "Slurm"
    }

    fn nodes(&mut self) -> Result<BTreeMap<NodeId, NodeHealth>, DriverError> {
        let nodes = self.client.nodes().map_err(unavailable)?;
        Ok(nodes.iter().filter_map(|n| Some((n.name.parse().ok()?, health(n)))).collect())
    }

    fn launches(&mut self, instance: &str) -> Result<Vec<Listed>, DriverError> {
        let mut out: Vec<Listed> = Vec::new();
        for j in self.client.jobs().map_err(unavailable)? {
            let Some((job, uid)) = parse_launch_id(instance, &j.name) else { continue };
            let status = status(&j.state);
            out.push(Listed { launch_id: j.name, job, uid, status, message: j.reason });
        }
        // Where one name was submitted twice (never by one process; a forgotten ended job
        // relaunched after a restart), the live one counts.
        out.sort_by_key(|l| l.status.ended());
        Ok(out)
    }

    fn launch(&mut self, request: &LaunchRequest) -> Result<(), DriverError> {
        let nodes: Vec<String> = request.nodes.iter().map(|n| n.to_string()).collect();
        let env: Vec<(String, String)> = request.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let output = self.output_dir.as_ref().map(|d| d.join(format!("{}.out", request.id)));
        let launch = Launch {
            name: &request.id,
            nodes: &nodes,
            env: &env,
            command: &request.entrypoint,
            output: output.as_deref(),
        };
        match self.client.submit(&launch) {
            Ok(_) => Ok(()),
            Err(SlurmError::Failed { message, .. }) if !controller_unreachable(&message) => {
                Err(DriverError::Refused(message))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    fn stop(&mut self, launch_id: &str) -> Result<(), DriverError> {
        self.client.cancel(launch_id).map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: &str, reason: &str) -> SlurmNode {
        SlurmNode { name: name.into(), state: NodeState::parse(state), reason: reason.into() }
    }

    #[test]
    fn slurm_states_read_as_weave_health() {
        assert_eq!(health(&node("r0", "mixed", "")), NodeHealth::Up);
        assert_eq!(health(&node("r0", "draining", "maint")), NodeHealth::Draining("maint".into()));
        assert_eq!(
            health(&node("r0", "down", "weave-e2e")),
            NodeHealth::Gone("Slurm has node r0 down or drained (weave-e2e)".into())
        );
        assert!(matches!(health(&node("r0", "down*", "")), NodeHealth::Gone(m) if m.contains("not responding")));
        assert_eq!(health(&node("r0", "idle*", "")), NodeHealth::Up, "a controller restart is no node loss");
        assert!(matches!(health(&node("r0", "inval", "")), NodeHealth::Gone(m) if m.contains("state inval")));
        assert_eq!(status(&JobState::Ended("NODE_FAIL".into())), LaunchStatus::Ended("NODE_FAIL".into()));
    }

    #[test]
    fn a_controller_that_does_not_answer_is_retried_a_refusal_is_not() {
        assert!(controller_unreachable(
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
        ));
        assert!(!controller_unreachable(
            "sbatch: error: Batch job submission failed: Invalid partition name specified"
        ));
    }
}
