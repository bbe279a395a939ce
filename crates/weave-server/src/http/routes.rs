//! Every route the server answers, in one table: the router is built from it and so is the
//! OpenAPI document (`http::openapi`), so a route cannot be answered and undocumented, or
//! documented and missing. A new route is one entry here.

use super::{
    cancel_job, events, healthz, metrics, openapi_document, readyz, restart_job, show_job, status_page, submit,
};
use super::{cluster, gate, listing};
use crate::state::Shared;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};
use serde_json::{json, Value};
use std::sync::Arc;

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, no token (probes, the document itself).
    Open,
    /// Any known token; a tenant sees and changes only its own jobs.
    Tenant,
    /// An admin token (others get 403).
    Admin,
}

/// What answering a route costs, for the rate limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Bounded by the request: the gate, submissions, one job's changes.
    Small,
    /// Grows with the plane (history, listings, pages): a tenant's reads of these are limited
    /// apart (`ConnectionLimits::read_rate`), so that its reads cannot take the CPU others'
    /// gates need.
    GrowsWithPlane,
}

pub struct Route {
    pub method: Method,
    /// axum's form: `{name}` for a path parameter.
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    pub cost: Cost,
    /// The rest of the OpenAPI operation: query parameters, request body, responses (the
    /// path's parameters, security and the 401/403/429 answers follow from the above).
    pub doc: Value,
    pub(super) handler: MethodRouter<Arc<Shared>>,
}

fn route<H, T>(
    method: Method,
    path: &'static str,
    access: Access,
    summary: &'static str,
    handler: H,
    doc: Value,
) -> Route
where
    H: Handler<T, Arc<Shared>>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("the table uses standard methods");
    Route { method, path, access, summary, cost: Cost::Small, doc, handler: on(filter, handler) }
}

impl Route {
    fn grows_with_plane(mut self) -> Route {
        self.cost = Cost::GrowsWithPlane;
        self
    }
}

fn err() -> Value {
    json!({ "description": "error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } })
}

fn ok(desc: &str) -> Value {
    json!({ "description": desc, "content": { "application/json": {} } })
}

/// Answers: `(code, description)`; the rest are errors.
fn answers(good: &[(&str, &str)], errors: &[&str]) -> Value {
    let mut m = serde_json::Map::new();
    for (code, desc) in good {
        m.insert(code.to_string(), ok(desc));
    }
    for code in errors {
        m.insert(code.to_string(), err());
    }
    Value::Object(m)
}

fn body(schema: Value, required: bool) -> Value {
    json!({ "required": required, "content": { "application/json": { "schema": schema } } })
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The schema of a path parameter, by its name.
pub fn path_parameter(name: &str) -> Value {
    let schema = match name {
        "phase" => json!({ "type": "string", "enum": ["rollout", "train"] }),
        "iteration" => json!({ "type": "integer", "minimum": 0 }),
        _ => json!({ "type": "string" }),
    };
    let mut p = json!({ "name": name, "in": "path", "required": true, "schema": schema });
    if name == "node" {
        p["description"] = json!("e.g. r0, t1");
    }
    p
}

/// Every route, by what it serves.
pub fn table() -> Vec<Route> {
    [probes(), jobs(), gate(), cluster()].into_iter().flatten().collect()
}

/// Probes, the document and the operator's pages.
fn probes() -> Vec<Route> {
    use Access::{Open, Tenant};
    let get = Method::GET;
    vec![
        route(get.clone(), "/healthz", Open, "Liveness", healthz, json!({ "responses": answers(&[("200", "ok")], &[]) })),
        route(
            get.clone(),
            "/readyz",
            Open,
            "Readiness: ready to take writes (503 with the reason while the store's last write failed or its volume is short of space)",
            readyz,
            json!({ "responses": answers(&[("200", "ready")], &["503"]) }),
        ),
        route(get.clone(), "/openapi.json", Open, "This document", openapi_document, json!({ "responses": answers(&[("200", "OpenAPI 3")], &[]) })),
        route(
            get.clone(),
            "/status",
            Tenant,
            "Read-only status page (HTML); token as header or ?token=",
            status_page,
            json!({ "responses": { "200": { "description": "HTML" } } }),
        )
        .grows_with_plane(),
        route(
            get.clone(),
            "/metrics",
            Tenant,
            "Prometheus metrics: the cluster for an admin token, a tenant's own jobs otherwise",
            metrics,
            json!({ "responses": { "200": { "description": "text exposition format" } } }),
        )
        .grows_with_plane(),
    ]
}

/// Jobs: submit, list, show, cancel, restart.
fn jobs() -> Vec<Route> {
    use Access::Tenant;
    let (get, post) = (Method::GET, Method::POST);
    vec![
        route(
            post.clone(),
            "/v1/jobs",
            Tenant,
            "Submit a job",
            submit,
            json!({
                "requestBody": body(schema_ref("SubmitSpec"), true),
                "responses": answers(&[("201", "admitted, with the placement decision"),
                    ("202", "fixed pools full: queued (state `queued`, `queue_position`); it starts when room is freed")],
                    &["400", "409", "413"]),
            }),
        ),
        route(
            get.clone(),
            "/v1/jobs",
            Tenant,
            "List the caller's jobs (all for admins), queued and placed, by key, a page at a time: when more follow, the `Link` header names the next page (`<PATH>; rel=\"next\"`)",
            listing::list_jobs,
            json!({
                "parameters": [
                    { "name": "after", "in": "query", "description": "only jobs after this key (the cursor a `Link` header carries)", "schema": { "type": "string" } },
                    { "name": "limit", "in": "query", "description": "at most this many (default 1000, at most 10000)", "schema": { "type": "integer", "minimum": 1 } }
                ],
                "responses": answers(&[("200", "jobs")], &["400"]),
            }),
        )
        .grows_with_plane(),
        route(
            get.clone(),
            "/v1/jobs/{id}",
            Tenant,
            "Show a job and its history",
            show_job,
            json!({ "responses": answers(&[("200", "job")], &["404"]) }),
        )
        .grows_with_plane(),
        route(
            Method::DELETE,
            "/v1/jobs/{id}",
            Tenant,
            "Cancel a job",
            cancel_job,
            json!({ "responses": answers(&[("200", "job")], &["404", "409"]) }),
        ),
        route(
            post,
            "/v1/jobs/{id}/restart",
            Tenant,
            "The job's driver lost work in flight (a process died): end this admission and re-admit the job from its last completed iteration",
            restart_job,
            json!({
                "requestBody": body(json!({ "type": "object", "required": ["reason"], "additionalProperties": false,
                    "properties": { "reason": { "type": "string", "maxLength": 200 } } }), true),
                "responses": answers(&[("200", "job, re-admitted (or queued)")], &["400", "404", "409"]),
            }),
        ),
    ]
}

/// The phase gate a job's driver talks to.
fn gate() -> Vec<Route> {
    use Access::Tenant;
    let post = Method::POST;
    vec![
        route(
            post.clone(),
            "/v1/jobs/{id}/heartbeat",
            Tenant,
            "Heartbeat",
            gate::heartbeat,
            json!({ "responses": answers(&[("200", "ok")], &["404", "409"]) }),
        ),
        route(
            post.clone(),
            "/v1/jobs/{id}/loan/return",
            Tenant,
            "The job's driver moved its requests off the rollout nodes lent to its rollout (`--lending`): the loan ends",
            gate::return_loan,
            json!({
                "requestBody": body(json!({ "type": "object", "additionalProperties": false,
                    "properties": { "uid": { "type": "integer", "description": "the admission the loan was made to (the grant's uid)" } } }), true),
                "responses": answers(&[("200", "job")], &["400", "404", "409"]),
            }),
        ),
        route(
            post.clone(),
            "/v1/jobs/{id}/phases/{phase}/{iteration}/start",
            Tenant,
            "Ask to start a phase; long-polls up to wait_s",
            gate::phase_start,
            json!({
                "parameters": [{ "name": "wait_s", "in": "query", "schema": { "type": "number" } }],
                "responses": answers(&[("200", "granted; a rollout's `loan` (with --lending) names rollout nodes of another group lent to it, seconds to their load (`load_in_s`) and to the reclaim (`reclaim_in_s`); a rollout's `weights` is the weights version it samples with (trainings done; up to the job's staleness behind its iteration); with tracing on (--otlp-endpoint), `traceparent` is the phase span's W3C trace context; an agentic job's grant has `environment`: the sandboxes a rollout may hold (`sandboxes`, each `sandbox`), and with a training `start_sandboxes_for`, the next rollout whose sandboxes to start now"),
                    ("202", "not yet: ask again")], &["400", "404", "409"]),
            }),
        ),
        route(
            post.clone(),
            "/v1/jobs/{id}/phases/{phase}/{iteration}/finish",
            Tenant,
            "Report a granted phase finished, with its measured duration",
            gate::phase_finish,
            json!({
                "requestBody": body(schema_ref("Finish"), true),
                "responses": answers(&[("200", "job")], &["400", "404", "409"]),
            }),
        ),
    ]
}

/// The cluster: groups, nodes and their changes, cost, events.
fn cluster() -> Vec<Route> {
    use Access::{Admin, Tenant};
    let (get, post) = (Method::GET, Method::POST);
    vec![
        route(
            get.clone(),
            "/v1/groups",
            Tenant,
            "Groups holding the caller's jobs",
            cluster::groups,
            json!({ "responses": answers(&[("200", "groups")], &[]) }),
        )
        .grows_with_plane(),
        route(
            get.clone(),
            "/v1/nodes",
            Admin,
            "Nodes with their groups and cached state, and the environment pool's nodes (`e0`, ...: `cores`, `down`)",
            cluster::nodes,
            json!({ "responses": answers(&[("200", "nodes")], &[]) }),
        )
        .grows_with_plane(),
        route(
            post.clone(),
            "/v1/nodes/{node}/down",
            Admin,
            "Take a node out of service (fixed pools this server owns): its jobs fail and are re-admitted from their last completed iteration, or queued. An environment node (`e0`, ...) leaves the pool placement reserves from: the agentic jobs running keep their admissions (their drivers run its trajectories again on the nodes left) and new ones wait for room",
            cluster::node_down,
            json!({
                "requestBody": body(json!({ "type": "object", "additionalProperties": false,
                    "properties": { "reason": { "type": "string", "maxLength": 200 } } }), false),
                "responses": answers(&[("200", "the node is down")], &["400", "409"]),
            }),
        ),
        route(
            post.clone(),
            "/v1/nodes/{node}/up",
            Admin,
            "Put a node back in service (a GPU node, or an environment node `e0`, ...): queued jobs start where it makes room",
            cluster::node_up,
            json!({ "responses": answers(&[("200", "the node is up")], &["400", "409"]) }),
        ),
        route(
            post.clone(),
            "/v1/nodes/{node}/notice",
            Admin,
            "A preemption notice (a spot node the provider takes back): the node closes to new placements now, its jobs are told (`preemption-notice` events with the deadline), and once the notice runs out it leaves service as a lost node does (GPU nodes only)",
            cluster::node_notice,
            json!({
                "requestBody": body(json!({ "type": "object", "required": ["seconds"], "additionalProperties": false,
                    "properties": { "seconds": { "type": "integer", "minimum": 0, "maximum": 86400, "description": "seconds until the node is taken" },
                                    "reason": { "type": "string", "maxLength": 200 } } }), true),
                "responses": answers(&[("200", "the node is under notice")], &["400", "409"]),
            }),
        ),
        route(
            get.clone(),
            "/v1/cluster",
            Tenant,
            "Cluster inventory and cost",
            cluster::cluster,
            json!({ "responses": answers(&[("200", "cluster; with an environment pool (`[env]` in the cluster file), `environment` gives the pool, what running agentic jobs may hold of it (`held`: sandboxes, cores, GiB) and its hourly price")], &[]) }),
        ),
        route(
            get.clone(),
            "/v1/events",
            Tenant,
            "Grants, finishes and job endings visible to the caller, paged by cursor",
            events,
            json!({
                "parameters": [
                    { "name": "after", "in": "query", "description": "only events with a larger seq", "schema": { "type": "integer", "minimum": 0 } },
                    { "name": "limit", "in": "query", "description": "at most this many (and at most 10000: page on with `after`)", "schema": { "type": "integer", "minimum": 0 } }
                ],
                "responses": answers(&[("200", "events")], &["400"]),
            }),
        )
        .grows_with_plane(),
        route(
            get,
            "/v1/queue",
            Tenant,
            "Jobs waiting for room in fixed pools, in the order they will start (the caller's own; all for admins)",
            listing::queue,
            json!({ "responses": answers(&[("200", "queued jobs with position and reason")], &[]) }),
        )
        .grows_with_plane(),
    ]
}

/// The names of a path's parameters, in order (`/v1/jobs/{id}` -> `id`).
pub fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
}
