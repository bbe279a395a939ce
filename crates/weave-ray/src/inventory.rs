//! Weave's node inventory read off a Ray cluster: every Ray node that carries the label
//! `weave.io/node=<r|t><index>` (and `weave.io/pool` agreeing with it) is that Weave node.
//! Pure: it parses the State API's answer it is given.

use serde::Deserialize;
use std::collections::BTreeMap;
use thiserror::Error;
use weave_core::{NodeId, Pool};

/// Label naming the Weave node a Ray node is.
pub const NODE_LABEL: &str = "weave.io/node";
/// Label naming its pool (`rollout` or `training`).
pub const POOL_LABEL: &str = "weave.io/pool";
/// Prefix of the per-node custom resource (`weave_node_r0`) placement-group bundles require.
pub const RESOURCE_PREFIX: &str = "weave_node_";

/// The custom resource that pins a bundle to `node`.
pub fn node_resource(node: NodeId) -> String {
    format!("{RESOURCE_PREFIX}{node}")
}

/// One node as Ray's State API (`/api/v0/nodes?detail=true`) reports it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RayNode {
    pub node_id: String,
    pub node_ip: String,
    pub state: String,
    #[serde(default)]
    pub resources_total: BTreeMap<String, f64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl RayNode {
    pub fn alive(&self) -> bool {
        self.state == "ALIVE"
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum InventoryError {
    #[error("Ray node {ip} ({id}): label {NODE_LABEL}={value}: {reason}")]
    BadLabel { id: String, ip: String, value: String, reason: String },
    #[error("Ray nodes {first} and {second} are both alive as Weave node {node}")]
    Duplicate { node: NodeId, first: String, second: String },
    #[error("Ray node {ip}: Weave node {node} lacks the custom resource {resource} that pins work to it")]
    NoResource { ip: String, node: NodeId, resource: String },
    #[error("the Ray cluster has no {0} node labelled {NODE_LABEL}")]
    EmptyPool(Pool),
    #[error("Ray's State API answer: {0}")]
    Parse(String),
}

/// Where Weave node `node` lives in Ray, if it does.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapped {
    pub ray_id: String,
    pub ip: String,
    pub alive: bool,
    pub gpus: f64,
}

/// The Weave nodes of a Ray cluster.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Inventory {
    pub nodes: BTreeMap<NodeId, Mapped>,
}

impl Inventory {
    /// Reads the labelled nodes. An alive node wins over dead ones of the same name (a node
    /// restarted by hand); two alive nodes claiming one name are an error.
    pub fn from_nodes(nodes: &[RayNode]) -> Result<Inventory, InventoryError> {
        let mut out: BTreeMap<NodeId, Mapped> = BTreeMap::new();
        for n in nodes {
            let Some(value) = n.labels.get(NODE_LABEL) else { continue };
            let bad = |reason: String| InventoryError::BadLabel {
                id: n.node_id.clone(),
                ip: n.node_ip.clone(),
                value: value.clone(),
                reason,
            };
            let node: NodeId = value.parse().map_err(bad)?;
            if let Some(pool) = n.labels.get(POOL_LABEL) {
                if *pool != node.pool.to_string() {
                    return Err(bad(format!("but {POOL_LABEL}={pool}")));
                }
            }
            let resource = node_resource(node);
            if n.alive() && !n.resources_total.contains_key(&resource) {
                return Err(InventoryError::NoResource { ip: n.node_ip.clone(), node, resource });
            }
            let mapped = Mapped {
                ray_id: n.node_id.clone(),
                ip: n.node_ip.clone(),
                alive: n.alive(),
                gpus: n.resources_total.get("GPU").copied().unwrap_or(0.0),
            };
            match out.get(&node) {
                Some(prev) if prev.alive && mapped.alive => {
                    return Err(InventoryError::Duplicate { node, first: prev.ip.clone(), second: mapped.ip });
                }
                Some(prev) if prev.alive => {}
                _ => {
                    out.insert(node, mapped);
                }
            }
        }
        Ok(Inventory { nodes: out })
    }

    /// Parses the State API's JSON envelope (`{"data": {"result": {"result": [...]}}}`).
    pub fn from_state_api(body: &serde_json::Value) -> Result<Inventory, InventoryError> {
        let list = body
            .pointer("/data/result/result")
            .ok_or_else(|| InventoryError::Parse("no data.result.result list".into()))?;
        let nodes: Vec<RayNode> =
            serde_json::from_value(list.clone()).map_err(|e| InventoryError::Parse(e.to_string()))?;
        Inventory::from_nodes(&nodes)
    }

    /// Sizes `cluster`'s pools to Ray's labelled nodes; returns the sizes and a warning for
    /// each live node whose GPU count differs from the cluster config's.
    pub fn size_pools(
        &self,
        cluster: &mut weave_core::ClusterConfig,
    ) -> Result<((u32, u32), Vec<String>), InventoryError> {
        let (rollout, training) = self.pool_sizes()?;
        cluster.rollout.nodes = rollout;
        cluster.training.nodes = training;
        let mut warnings = Vec::new();
        for (node, m) in &self.nodes {
            let want = if node.pool == Pool::Rollout { &cluster.rollout } else { &cluster.training };
            if m.alive && m.gpus != want.gpus_per_node as f64 {
                warnings.push(format!(
                    "Ray node {} ({node}) has {} GPUs, the cluster config says {} per {} node",
                    m.ip, m.gpus, want.gpus_per_node, node.pool
                ));
            }
        }
        Ok(((rollout, training), warnings))
    }

    /// Pool sizes for the placer's fixed capacity: one past the highest index per pool (a gap
    /// is a node that is missing, hence out of service).
    pub fn pool_sizes(&self) -> Result<(u32, u32), InventoryError> {
        weave_backend::pool_sizes(self.nodes.keys().copied()).map_err(InventoryError::EmptyPool)
    }

    pub fn alive(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|m| m.alive)
    }

    /// Why `node` is unusable, or `None` if Ray has it alive.
    pub fn missing_reason(&self, node: NodeId) -> Option<String> {
        match self.nodes.get(&node) {
            Some(m) if m.alive => None,
            Some(m) => Some(format!("Ray reports node {node} ({}) dead", m.ip)),
            None => Some(format!("no Ray node carries {NODE_LABEL}={node}")), // as RayDriver::missing_reason
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, ip: &str, state: &str, label: Option<&str>) -> RayNode {
        let mut labels = BTreeMap::new();
        let mut resources = BTreeMap::from([("GPU".to_string(), 8.0)]);
        if let Some(l) = label {
            labels.insert(NODE_LABEL.to_string(), l.to_string());
            resources.insert(format!("{RESOURCE_PREFIX}{l}"), 1000.0);
        }
        RayNode { node_id: id.into(), node_ip: ip.into(), state: state.into(), resources_total: resources, labels }
    }

    #[test]
    fn labelled_nodes_map_and_gaps_count_as_missing() {
        let inv = Inventory::from_nodes(&[
            node("a", "127.0.0.2", "ALIVE", Some("t0")),
            node("b", "127.0.0.3", "ALIVE", Some("r0")),
            node("c", "127.0.0.5", "DEAD", Some("r2")),
            node("d", "127.0.0.9", "ALIVE", None),
        ])
        .unwrap();
        assert_eq!(inv.pool_sizes(), Ok((3, 1)));
        let r = |i| NodeId { pool: Pool::Rollout, index: i };
        assert!(inv.alive(r(0)));
        assert_eq!(inv.missing_reason(r(1)).unwrap(), "no Ray node carries weave.io/node=r1");
        assert!(inv.missing_reason(r(2)).unwrap().contains("dead"));
        assert_eq!(inv.nodes[&r(0)].gpus, 8.0);
    }

    #[test]
    fn a_restarted_node_replaces_its_dead_self_but_two_live_ones_clash() {
        let inv = Inventory::from_nodes(&[
            node("old", "127.0.0.3", "DEAD", Some("r0")),
            node("new", "127.0.0.3", "ALIVE", Some("r0")),
            node("t", "127.0.0.2", "ALIVE", Some("t0")),
        ])
        .unwrap();
        assert_eq!(inv.nodes[&NodeId { pool: Pool::Rollout, index: 0 }].ray_id, "new");
        let e = Inventory::from_nodes(&[
            node("x", "127.0.0.3", "ALIVE", Some("r0")),
            node("y", "127.0.0.4", "ALIVE", Some("r0")),
        ])
        .unwrap_err();
        assert!(matches!(e, InventoryError::Duplicate { .. }), "{e}");
    }

    #[test]
    fn bad_labels_and_missing_resources_are_named() {
        let e = Inventory::from_nodes(&[node("x", "127.0.0.3", "ALIVE", Some("gpu7"))]).unwrap_err();
        assert!(e.to_string().contains("127.0.0.3") && e.to_string().contains("gpu7"), "{e}");
        let mut n = node("x", "127.0.0.3", "ALIVE", Some("r0"));
        n.labels.insert(POOL_LABEL.into(), "training".into());
        assert!(Inventory::from_nodes(&[n]).unwrap_err().to_string().contains("weave.io/pool=training"));
        let mut n = node("x", "127.0.0.3", "ALIVE", Some("r0"));
        n.resources_total.clear();
        assert!(matches!(Inventory::from_nodes(&[n]), Err(InventoryError::NoResource { .. })));
        assert_eq!(Inventory::default().pool_sizes(), Err(InventoryError::EmptyPool(Pool::Rollout)));
        assert!(Inventory::from_state_api(&serde_json::json!({"data": {}})).is_err());
    }
}
