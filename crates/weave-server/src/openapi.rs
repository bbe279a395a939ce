//! The OpenAPI description, served at `/openapi.json`.

use serde_json::{json, Value};

fn err() -> Value {
    json!({ "description": "error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } })
}

fn ok(desc: &str) -> Value {
    json!({ "description": desc, "content": { "application/json": {} } })
}

pub fn document() -> Value {
    let auth = json!([{ "bearer": [] }]);
    let job_id = json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } });
    let phase = json!({ "name": "phase", "in": "path", "required": true, "schema": { "type": "string", "enum": ["rollout", "train"] } });
    let iteration =
        json!({ "name": "iteration", "in": "path", "required": true, "schema": { "type": "integer", "minimum": 0 } });
    let staleness = json!({ "type": "integer", "minimum": 0, "maximum": 8,
        "description": "Bounded staleness k: rollout n may run beside trainings n-k .. n-1 (at most weave serve --max-staleness; 0, on-policy, by default)." });
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Weave control plane", "version": env!("CARGO_PKG_VERSION"),
                  "description": "Admits RL post-training jobs into co-execution groups and gates their rollout and training phases." },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
                "SubmitSpec": {
                    "type": "object", "required": ["id"], "additionalProperties": false,
                    "properties": {
                        "id": { "type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$" },
                        "type": { "type": "string", "example": "7B_8k" },
                        "model": { "type": "string", "example": "7B" },
                        "max_tokens": { "oneOf": [{ "type": "integer" }, { "type": "string" }] },
                        "batch": { "type": "integer", "minimum": 1 },
                        "algorithm": { "type": "string", "enum": ["ppo", "grpo", "dapo"] },
                        "rollout_nodes": { "type": "integer", "minimum": 1 },
                        "train_nodes": { "type": "integer", "minimum": 1 },
                        "slo": { "type": "number", "minimum": 1 },
                        "iterations": { "type": "integer", "minimum": 1 },
                        "rollout_s": { "type": "number" },
                        "switch_warm_s": { "type": "number", "minimum": 0, "description": "Measured warm switch, seconds (replaces the model's)." },
                        "switch_cold_s": { "type": "number", "minimum": 0, "description": "Measured cold switch, seconds (replaces the model's)." },
                        "sync_s": { "type": "number", "minimum": 0, "description": "Measured weight sync, seconds (replaces the model's)." },
                        "train_s": { "type": "number" },
                        "resume_from": { "type": "integer", "minimum": 0 },
                        "staleness": staleness,
                        "priority": { "type": "string", "enum": ["low", "normal", "high"],
                                      "description": "Order among the tenant's own waiting jobs when the pools have quotas." },
                        "launch": {
                            "description": "What an execution backend (weave serve --backend ray) runs for the job. Such a job joins its group's rotation when it first asks to start a phase: its nodes serve the group's other members while its processes start (the job shows `starting`).",
                            "type": "object", "required": ["entrypoint"], "additionalProperties": false,
                            "properties": {
                                "entrypoint": { "type": "string", "minLength": 1, "maxLength": 4096 },
                                "env": { "type": "object", "additionalProperties": { "type": "string" },
                                         "description": "Extra environment; names starting with WEAVE_ are reserved." }
                            }
                        }
                    }
                },
                "Finish": { "type": "object", "required": ["duration_s"], "additionalProperties": false,
                            "properties": { "duration_s": { "type": "number", "minimum": 0 }, "meta": { "type": "object", "description": "Kept with the finish event. A switch the job measured of its own state, `switch` (\"warm\" or \"cold\") with `switch_s` (seconds), is learned: re-admissions and moves are placed with the medians (see the job's measured_switch_warm_s / _cold_s)." },
                                            "uid": { "type": "integer", "minimum": 0,
                                                     "description": "The admission the phase was granted under (the grant's uid); refused with 409 if it has ended." } } }
            }
        },
        "paths": {
            "/healthz": { "get": { "summary": "Liveness", "responses": { "200": ok("ok") } } },
            "/metrics": { "get": { "summary": "Prometheus metrics: the cluster for an admin token, a tenant's own jobs otherwise", "security": auth, "responses": { "200": { "description": "text exposition format" }, "401": err() } } },
            "/openapi.json": { "get": { "summary": "This document", "responses": { "200": ok("OpenAPI 3") } } },
            "/status": { "get": { "summary": "Read-only status page (HTML); token as header or ?token=", "security": auth, "responses": { "200": { "description": "HTML" }, "401": err() } } },
            "/v1/jobs": {
                "post": { "summary": "Submit a job", "security": auth,
                          "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SubmitSpec" } } } },
                          "responses": { "201": ok("admitted, with the placement decision"), "202": ok("fixed pools full: queued (state `queued`, `queue_position`); it starts when room is freed"), "400": err(), "401": err(), "409": err(), "413": err() } },
                "get": { "summary": "List the caller's jobs (all for admins), queued and placed, by key, a page at a time: when more follow, the `Link` header names the next page (`<PATH>; rel=\"next\"`)", "security": auth,
                         "parameters": [
                             { "name": "after", "in": "query", "description": "only jobs after this key (the cursor a `Link` header carries)", "schema": { "type": "string" } },
                             { "name": "limit", "in": "query", "description": "at most this many (default 1000, at most 10000)", "schema": { "type": "integer", "minimum": 1 } }
                         ],
                         "responses": { "200": ok("jobs"), "401": err() } }
            },
            "/v1/jobs/{id}": {
                "get": { "summary": "Show a job and its history", "security": auth, "parameters": [job_id], "responses": { "200": ok("job"), "401": err(), "404": err() } },
                "delete": { "summary": "Cancel a job", "security": auth, "parameters": [job_id], "responses": { "200": ok("job"), "401": err(), "404": err(), "409": err() } }
            },
            "/v1/jobs/{id}/heartbeat": { "post": { "summary": "Heartbeat", "security": auth, "parameters": [job_id], "responses": { "200": ok("ok"), "404": err(), "409": err() } } },
            "/v1/jobs/{id}/restart": {
                "post": { "summary": "The job's driver lost work in flight (a process died): end this admission and re-admit the job from its last completed iteration", "security": auth, "parameters": [job_id],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["reason"], "properties": { "reason": { "type": "string" } }, "additionalProperties": false } } } },
                          "responses": { "200": ok("job, re-admitted (or queued)"), "400": err(), "401": err(), "404": err(), "409": err() } }
            },
            "/v1/jobs/{id}/loan/return": {
                "post": { "summary": "The job's driver moved its requests off the rollout nodes lent to its rollout (`--lending`): the loan ends", "security": auth, "parameters": [job_id],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "properties": { "uid": { "type": "integer", "description": "the admission the loan was made to (the grant's uid)" } }, "additionalProperties": false } } } },
                          "responses": { "200": ok("job"), "400": err(), "401": err(), "404": err(), "409": err() } }
            },
            "/v1/jobs/{id}/phases/{phase}/{iteration}/start": {
                "post": { "summary": "Ask to start a phase; long-polls up to wait_s", "security": auth,
                          "parameters": [job_id, phase, iteration, { "name": "wait_s", "in": "query", "schema": { "type": "number" } }],
                          "responses": { "200": ok("granted; a rollout's `loan` (with --lending) names rollout nodes of another group lent to it, seconds to their load (`load_in_s`) and to the reclaim (`reclaim_in_s`); a rollout's `weights` is the weights version it samples with (trainings done; up to the job's staleness behind its iteration); with tracing on (--otlp-endpoint), `traceparent` is the phase span's W3C trace context"), "202": ok("not yet: ask again"), "401": err(), "404": err(), "409": err() } }
            },
            "/v1/jobs/{id}/phases/{phase}/{iteration}/finish": {
                "post": { "summary": "Report a granted phase finished, with its measured duration", "security": auth, "parameters": [job_id, phase, iteration],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Finish" } } } },
                          "responses": { "200": ok("job"), "400": err(), "401": err(), "404": err(), "409": err() } }
            },
            "/v1/groups": { "get": { "summary": "Groups holding the caller's jobs", "security": auth, "responses": { "200": ok("groups"), "401": err() } } },
            "/v1/nodes": { "get": { "summary": "Nodes with their groups and cached state (admin)", "security": auth, "responses": { "200": ok("nodes"), "401": err(), "403": err() } } },
            "/v1/nodes/{node}/down": { "post": { "summary": "Take a node out of service (admin; fixed pools this server owns): its jobs fail and are re-admitted from their last completed iteration, or queued", "security": auth,
                "parameters": [{ "name": "node", "in": "path", "required": true, "schema": { "type": "string" }, "description": "e.g. r0, t1" }],
                "requestBody": { "required": false, "content": { "application/json": { "schema": { "type": "object", "additionalProperties": false, "properties": { "reason": { "type": "string", "maxLength": 200 } } } } } },
                "responses": { "200": ok("the node is down"), "400": err(), "401": err(), "403": err(), "409": err() } } },
            "/v1/nodes/{node}/up": { "post": { "summary": "Put a node back in service (admin): queued jobs start where it makes room", "security": auth,
                "parameters": [{ "name": "node", "in": "path", "required": true, "schema": { "type": "string" } }],
                "responses": { "200": ok("the node is up"), "400": err(), "401": err(), "403": err(), "409": err() } } },
            "/v1/cluster": { "get": { "summary": "Cluster inventory and cost", "security": auth, "responses": { "200": ok("cluster"), "401": err() } } },
            "/v1/events": { "get": { "summary": "Grants, finishes and job endings visible to the caller, paged by cursor", "security": auth,
                "parameters": [
                    { "name": "after", "in": "query", "description": "only events with a larger seq", "schema": { "type": "integer", "minimum": 0 } },
                    { "name": "limit", "in": "query", "description": "at most this many (and at most 10000: page on with `after`)", "schema": { "type": "integer", "minimum": 0 } }
                ],
                "responses": { "200": ok("events"), "400": err(), "401": err() } } },
            "/v1/queue": { "get": { "summary": "Jobs waiting for room in fixed pools, in the order they will start (the caller's own; all for admins)", "security": auth,
                "responses": { "200": ok("queued jobs with position and reason"), "401": err() } } }
        }
    })
}
