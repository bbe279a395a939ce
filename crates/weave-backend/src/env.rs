//! The environment a launched job gets besides its own `launch.env`: who it is, where the
//! server is, its token, its pinned nodes, where it resumes.

use crate::driver::LaunchRequest;
use crate::reconcile::launch_id;
use std::collections::BTreeMap;
use weave_core::{ClusterConfig, NodeId};
use weave_server::plane::JobEntry;

fn names(nodes: &[NodeId]) -> String {
    nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

/// Weave's variables for job `j`'s current admission.
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
    set("WEAVE_ROLLOUT_GPUS_PER_NODE", cluster.rollout.gpus_per_node.to_string());
    set("WEAVE_TRAINING_GPUS_PER_NODE", cluster.training.gpus_per_node.to_string());
    set("WEAVE_RESUME_FROM", j.submit.server.resume_from.unwrap_or(0).to_string());
    if let Some(n) = j.iterations {
        set("WEAVE_ITERATIONS", n.to_string());
    }
    env
}

/// The nodes job `j` is pinned to: its rollout nodes, then its training nodes, each once (a
/// co-located job names its training nodes for both).
pub fn job_nodes(j: &JobEntry) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = Vec::new();
    if let Some(d) = &j.decision {
        for n in d.rollout_nodes.iter().chain(&d.training_nodes) {
            if !out.contains(n) {
                out.push(*n);
            }
        }
    }
    out
}

/// What the driver gets to launch job `j`'s current admission, or `None` for a job Weave does
/// not launch (no `launch` section): its entrypoint, its own `launch.env` with Weave's
/// variables over it, its nodes.
pub fn launch_request(
    instance: &str,
    j: &JobEntry,
    server_url: &str,
    token: &str,
    cluster: &ClusterConfig,
) -> Option<LaunchRequest> {
    let launch = j.submit.server.launch.as_ref()?;
    let mut env = launch.env.clone();
    env.extend(job_env(j, server_url, token, cluster));
    Some(LaunchRequest {
        id: launch_id(instance, &j.name, j.id.0),
        instance: instance.to_string(),
        job: j.name.clone(),
        uid: j.id.0,
        tenant: j.tenant.clone(),
        entrypoint: launch.entrypoint.clone(),
        env,
        nodes: job_nodes(j),
    })
}
