//! Ray as a [`ClusterDriver`]: nodes from the State API (labelled `weave.io/node`), Weave's
//! submissions from the Job API (recognised by their metadata), launches and stops through it.

use crate::client::{RayClient, RayError};
use crate::inventory::NODE_LABEL;
use crate::launch::submission_body;
use std::collections::BTreeMap;
use weave_backend::{ClusterDriver, DriverError, LaunchRequest, LaunchStatus, Listed, NodeHealth};
use weave_core::NodeId;

pub struct RayDriver {
    client: RayClient,
    /// See [`submission_body`].
    pin: Option<String>,
}

impl RayDriver {
    pub fn new(client: RayClient, pin: Option<String>) -> RayDriver {
        RayDriver { client, pin }
    }
}

/// A driver on a cluster that answered, with the pool sizes its nodes make and what to tell
/// the operator (a warning for each node whose GPUs differ from the config's, a line saying
/// what Ray has).
pub struct Connected {
    pub driver: RayDriver,
    pub pools: (u32, u32),
    pub notes: Vec<String>,
}

impl RayDriver {
    /// A driver for `weave serve --backend ray` on the cluster at `address`, once Ray answers
    /// (retried for `patience`); `cluster`'s pools sized to Ray's labelled nodes.
    pub fn connect(
        address: &str,
        pin: Option<String>,
        cluster: &mut weave_core::ClusterConfig,
        patience: std::time::Duration,
    ) -> Result<Connected, RayError> {
        let client = RayClient::new(address)?;
        let inventory = client.inventory_when_up(patience)?;
        let url = client.address().to_string();
        let (sizes, warnings) =
            inventory.size_pools(cluster).map_err(|source| RayError::Inventory { url: url.clone(), source })?;
        let mut notes: Vec<String> = warnings.into_iter().map(|w| format!("warning: {w}")).collect();
        let alive = inventory.nodes.values().filter(|m| m.alive).count();
        notes.push(format!("Ray at {url}: {} rollout and {} training nodes ({alive} alive)", sizes.0, sizes.1));
        Ok(Connected { driver: RayDriver::new(client, pin), pools: sizes, notes })
    }
}

/// Ray's job status, in the shared terms.
pub fn status(ray: &str) -> LaunchStatus {
    match ray {
        "PENDING" => LaunchStatus::Pending,
        "RUNNING" => LaunchStatus::Running,
        "STOPPED" | "SUCCEEDED" | "FAILED" => LaunchStatus::Ended(ray.to_string()),
        other => LaunchStatus::Other(other.to_string()),
    }
}

fn unavailable(e: RayError) -> DriverError {
    DriverError::Unavailable(e.to_string())
}

impl ClusterDriver for RayDriver {
    fn cluster(&self) -> &'static str {
        "Ray"
    }

    fn nodes(&mut self) -> Result<BTreeMap<NodeId, NodeHealth>, DriverError> {
        let inventory = self.client.inventory().map_err(unavailable)?;
        Ok(inventory
            .nodes
            .keys()
            .map(|n| (*n, inventory.missing_reason(*n).map_or(NodeHealth::Up, NodeHealth::Gone)))
            .collect())
    }

    fn missing_reason(&self, node: NodeId) -> String {
        format!("no Ray node carries {NODE_LABEL}={node}")
    }

    fn launches(&mut self, instance: &str) -> Result<Vec<Listed>, DriverError> {
        let mut out = Vec::new();
        for j in self.client.jobs().map_err(unavailable)? {
            let (Some(id), Some(meta)) = (j.submission_id, j.metadata) else { continue };
            if meta.get("weave_instance").map(String::as_str) != Some(instance) {
                continue; // another Weave's (or nobody's) job
            }
            let (Some(job), Some(uid)) = (meta.get("weave_job"), meta.get("weave_uid").and_then(|u| u.parse().ok()))
            else {
                continue;
            };
            let message = j.message.unwrap_or_default();
            out.push(Listed { launch_id: id, job: job.clone(), uid, status: status(&j.status), message });
        }
        Ok(out)
    }

    fn launch(&mut self, request: &LaunchRequest) -> Result<(), DriverError> {
        let body = submission_body(request, self.pin.as_deref());
        match self.client.submit(&body) {
            Ok(()) => Ok(()),
            // Ray refused the submission itself (bad runtime environment, say).
            Err(RayError::Status { status, body, .. }) if (400..500).contains(&status) => {
                Err(DriverError::Refused(format!("HTTP {status}: {body}")))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    fn stop(&mut self, launch_id: &str) -> Result<(), DriverError> {
        self.client.stop(launch_id).map_err(unavailable)
    }
}
