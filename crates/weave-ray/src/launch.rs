//! The Ray job submission for an admitted job: its entrypoint and the environment that tells
//! it who it is, where the server is, its token and its pinned nodes.

use crate::inventory::RESOURCE_PREFIX;
use crate::reconcile::submission_id;
use serde_json::json;
use std::collections::BTreeMap;
use weave_core::{ClusterConfig, NodeId};
use weave_server::plane::JobEntry;

fn names(nodes: &[NodeId]) -> String {
    nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

/// The environment a launched job gets (besides its own `launch.env`).
pub fn job_env(j: &JobEntry, server_url: &str, token: &str, cluster: &ClusterConfig) -> BTreeMap<String, String> {
    let d = j.decision.as_ref();
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("WEAVE_JOB", j.name.clone());
    set("WEAVE_JOB_UID", j.id.0.to_string());
    set("WEAVE_SERVER", server_url.to_string());
    set("WEAVE_TOKEN", token.to_string());
    set("WEAVE_GROUP", d.map(|d| d.group.0.to_string()).unwrap_or_default());
    // `colocated`: both phases on the training nodes (WEAVE_ROLLOUT_NODES names them too);
    // `disaggregated`: rollout on the rollout nodes, training on the training nodes.
    let colocated = d.is_some_and(|d| d.kind == weave_place::DecisionKind::Colocated);
    set("WEAVE_MODE", if colocated { "colocated" } else { "disaggregated" }.to_string());
    set("WEAVE_ROLLOUT_NODES", d.map(|d| names(&d.rollout_nodes)).unwrap_or_default());
    set("WEAVE_TRAINING_NODES", d.map(|d| names(&d.training_nodes)).unwrap_or_default());
    set("WEAVE_NODE_RESOURCE_PREFIX", RESOURCE_PREFIX.to_string());
    set("WEAVE_ROLLOUT_GPUS_PER_NODE", cluster.rollout.gpus_per_node.to_string());
    set("WEAVE_TRAINING_GPUS_PER_NODE", cluster.training.gpus_per_node.to_string());
    set("WEAVE_RESUME_FROM", j.submit.server.resume_from.unwrap_or(0).to_string());
    if let Some(n) = j.iterations {
        set("WEAVE_ITERATIONS", n.to_string());
    }
    env
}

/// The Job Submission API body, or `None` for a job Weave does not launch.
pub fn submission_body(
    instance: &str,
    j: &JobEntry,
    server_url: &str,
    token: &str,
    cluster: &ClusterConfig,
) -> Option<serde_json::Value> {
    let launch = j.submit.server.launch.as_ref()?;
    let mut env = launch.env.clone();
    env.extend(job_env(j, server_url, token, cluster));
    Some(json!({
        "entrypoint": launch.entrypoint,
        "submission_id": submission_id(instance, &j.name, j.id.0),
        "runtime_env": { "env_vars": env },
        "metadata": {
            "weave_instance": instance, "weave_job": j.name, "weave_uid": j.id.0.to_string(), "weave_tenant": j.tenant,
        },
    }))
}
