//! The cluster's groups, nodes and inventory as callers may see them, and an operator's
//! changes to the nodes (out of service and back).

use super::{caller, commit, ApiError, ApiResult};
use crate::auth::Caller;
use crate::plane::Record;
use crate::state::Shared;
use crate::views::{grants_text, shown};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::json;
use std::sync::Arc;
use weave_core::agentic::EnvNodeId;
use weave_core::NodeId;

pub(super) async fn groups(State(s): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<Json<serde_json::Value>> {
    let c = caller(&s, &headers)?;
    let g = s.lock();
    let mut out = Vec::new();
    for grp in g.plane.placer().groups() {
        let members: Vec<serde_json::Value> = grp
            .members
            .iter()
            .filter_map(|m| g.plane.job_name(m.job.id).and_then(|n| g.plane.job(n)))
            .map(|j| {
                if c.may_see(&j.tenant, &j.name) {
                    json!({ "job": shown(&c, &j.name), "granted": grants_text(&j.gate) })
                } else {
                    json!({ "job": "(another tenant)" })
                }
            })
            .collect();
        let mine = grp.members.iter().any(|m| {
            g.plane.job_name(m.job.id).and_then(|n| g.plane.job(n)).is_some_and(|j| c.may_see(&j.tenant, &j.name))
        });
        if !mine {
            continue;
        }
        let blocks: Vec<_> = grp.blocks.iter().map(|b| json!({ "block": b.id, "nodes": b.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(), "cached_state_gb": b.used.as_gb_f64() })).collect();
        out.push(json!({
            "group": grp.id.0,
            "training_nodes": grp.training_nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "training_cached_state_gb": grp.train_used.as_gb_f64(),
            "rollout_blocks": blocks,
            "members": members,
            "predicted_meta_iteration_s": grp.prediction.meta_iteration.as_secs_f64(),
            "saturated": grp.prediction.saturated,
        }));
    }
    Ok(Json(json!(out)))
}

pub(super) async fn nodes(State(s): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<Json<serde_json::Value>> {
    let c = caller(&s, &headers)?;
    if !c.admin {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "the node list is for admins"));
    }
    let g = s.lock();
    let mut out = Vec::new();
    for grp in g.plane.placer().groups() {
        for b in &grp.blocks {
            for n in &b.nodes {
                out.push(json!({ "node": n.to_string(), "pool": "rollout", "group": grp.id.0, "cached_state_gb": b.used.as_gb_f64() }));
            }
        }
        for n in &grp.training_nodes {
            out.push(json!({ "node": n.to_string(), "pool": "training", "group": grp.id.0, "cached_state_gb": grp.train_used.as_gb_f64() }));
        }
    }
    // The environment pool's nodes: no job is bound to one (the pool is reserved by cores).
    if let Some(env) = &g.plane.cluster().env {
        for n in (0..env.nodes).map(EnvNodeId) {
            let down = g.plane.placer().is_env_node_down(n);
            out.push(
                json!({ "node": n.to_string(), "pool": "environment", "cores": env.cores_per_node, "down": down }),
            );
        }
    }
    Ok(Json(json!(out)))
}

/// The body of `POST /v1/nodes/{node}/down` (optional).
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NodeDownBody {
    reason: Option<String>,
}

/// A node named in a path: of a GPU pool (`r0`, `t1`) or of the environment pool (`e0`).
enum NamedNode {
    Gpu(NodeId),
    Env(EnvNodeId),
}

/// An admin caller, and the node named in the path.
fn node_change(s: &Shared, headers: &HeaderMap, node: &str) -> ApiResult<(Caller, NamedNode)> {
    let c = caller(s, headers)?;
    if !c.admin {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "taking nodes out of service is for admins"));
    }
    let bad = |e: String| ApiError::new(StatusCode::BAD_REQUEST, format!("node `{node}`: {e}"));
    let (parsed, written) = if node.starts_with('e') {
        let n: EnvNodeId = node.parse().map_err(bad)?;
        (NamedNode::Env(n), n.to_string())
    } else {
        let n: NodeId = node.parse().map_err(bad)?;
        (NamedNode::Gpu(n), n.to_string())
    };
    // One name per node: `r00` is not another spelling of `r0`.
    if written != node {
        let why = format!("node `{node}`: expected its name as Weave writes it, `{written}`");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, why));
    }
    Ok((c, parsed))
}

/// With an execution backend, node health is the backend's to report: 409. A preemption
/// notice is not a health change (a Ray drain forwarded as one: the node serves its jobs until
/// Ray reports it gone), and withdrawing one is allowed too.
fn health_owned_by_backend(s: &Shared) -> ApiResult<()> {
    if s.cfg.capacity == crate::state::Capacity::Recorded {
        let why = "the execution backend reports node health (a Ray node's loss or return is read from Ray)";
        return Err(ApiError::new(StatusCode::CONFLICT, why));
    }
    Ok(())
}

/// An operator takes a node out of service (lost, or drained for repair): its jobs fail and
/// are re-admitted from their last completed iteration where there is room, else queued.
pub(super) async fn node_down(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (c, named) = node_change(&s, &headers, &node)?;
    let given = if body.iter().all(u8::is_ascii_whitespace) {
        NodeDownBody::default()
    } else {
        serde_json::from_slice::<NodeDownBody>(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("request body: {e}")))?
    };
    let reason = checked_reason(&s, given.reason, "taken out of service by an admin")?;
    match named {
        // No execution backend reports the environment pool's health: an admin does.
        NamedNode::Env(node) => commit(&s, &c, move |time_us| Record::EnvNodeDown { time_us, node, reason }).await?,
        NamedNode::Gpu(node) => {
            health_owned_by_backend(&s)?;
            commit(&s, &c, move |time_us| Record::NodeDown { time_us, node, reason }).await?
        }
    };
    Ok(Json(json!({ "node": node, "state": "down" })))
}

fn checked_reason(s: &Shared, given: Option<String>, default: &str) -> ApiResult<String> {
    let reason = given.unwrap_or_else(|| default.into());
    s.cfg.limits.inputs.check_reason(&reason).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    Ok(reason)
}

/// The body of `POST /v1/nodes/{node}/notice`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoticeBody {
    /// Seconds until the node is taken (the cloud's notice: 30 s to 2 minutes).
    seconds: u64,
    reason: Option<String>,
}

/// The longest notice taken, seconds (a day).
const MAX_NOTICE_S: u64 = 86_400;

/// A preemption notice (a spot node the provider takes back): the node closes to new
/// placements now, its jobs are told (`preemption-notice` events with the deadline), and once
/// the notice runs out it leaves service as a lost node does (with an execution backend, when
/// the backend reports it gone).
pub(super) async fn node_notice(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (c, named) = node_change(&s, &headers, &node)?;
    let NamedNode::Gpu(node) = named else {
        let why = format!("node `{node}`: an environment node takes no preemption notice (take it down when it goes)");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, why));
    };
    let given: NoticeBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("request body: {e}")))?;
    if given.seconds > MAX_NOTICE_S {
        let why = format!("`seconds`: at most {MAX_NOTICE_S}, got {}", given.seconds);
        return Err(ApiError::new(StatusCode::BAD_REQUEST, why));
    }
    let reason = checked_reason(&s, given.reason, "preempted by the provider")?;
    let wait_us = given.seconds * 1_000_000;
    commit(&s, &c, move |time_us| Record::NodeNotice { time_us, node, deadline_us: time_us + wait_us, reason }).await?;
    Ok(Json(json!({ "node": node.to_string(), "state": "notice", "seconds": given.seconds })))
}

/// A node back in service: queued jobs start where it makes room.
pub(super) async fn node_up(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let (c, named) = node_change(&s, &headers, &node)?;
    let node = match named {
        NamedNode::Gpu(node) => node,
        NamedNode::Env(env) => {
            commit(&s, &c, move |time_us| Record::EnvNodeUp { time_us, node: env }).await?;
            return Ok(Json(json!({ "node": node, "state": "up" })));
        }
    };
    let noticed = s.lock().plane.notices().any(|(n, _)| *n == node);
    if !noticed {
        health_owned_by_backend(&s)?;
    }
    commit(&s, &c, move |time_us| Record::NodeUp { time_us, node }).await?;
    Ok(Json(json!({ "node": node.to_string(), "state": "up" })))
}

pub(super) async fn cluster(State(s): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<Json<serde_json::Value>> {
    caller(&s, &headers)?;
    let g = s.lock();
    let (r, t) = g.plane.placer().nodes_in_use();
    let cfg = g.plane.cluster();
    let noticed: std::collections::BTreeMap<_, _> = g.plane.notices().collect();
    Ok(Json(json!({
        "config": cfg,
        "capacity": format!("{:?}", s.cfg.capacity).to_lowercase(),
        "pools": g.plane.placer().config().capacity.map(|(r, t)| json!({ "rollout": r, "training": t })),
        "down": g.plane.placer().down_nodes().filter(|n| !noticed.contains_key(n)).map(|n| n.to_string()).collect::<Vec<_>>(),
        "notices": noticed.iter().map(|(n, x)| json!({ "node": n.to_string(), "deadline_us": x.deadline_us, "reason": x.reason })).collect::<Vec<_>>(),
        "nodes_in_use": { "rollout": r, "training": t },
        "hourly_cost_dollars": g.plane.placer().hourly_cost().as_dollars(),
        // The environment pool (with `[env]` in the cluster file) and what agentic jobs hold.
        "environment": g.plane.environment(),
    })))
}
