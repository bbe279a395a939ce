//! The OpenAPI description, served at `/openapi.json`: its paths come from the route table
//! the router is built from (`http::routes`), a submission's schema from the job's fields
//! declared once (`weave_trace::JobFields`) and the server's own (`ServerFields`).

use super::routes::{path_parameter, path_parameters, table, Access};
use crate::plane::ServerFields;
use serde_json::{json, Map, Value};
use weave_trace::JobFields;

/// A submission's schema: `id`, the job's fields and the server's own; nothing else.
pub fn submit_schema() -> Value {
    let mut props = Map::new();
    props.insert("id".into(), json!({ "type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$" }));
    props.extend(JobFields::schema());
    props.extend(ServerFields::schema());
    json!({ "type": "object", "required": ["id"], "additionalProperties": false, "properties": props })
}

fn finish_schema() -> Value {
    json!({ "type": "object", "required": ["duration_s"], "additionalProperties": false,
            "properties": { "duration_s": { "type": "number", "minimum": 0 },
                            "meta": { "type": "object", "description": "Kept with the finish event (a JSON object of at most --max-meta-bytes). A switch the job measured of its own state, `switch` (\"warm\" or \"cold\") with `switch_s` (seconds), is learned: re-admissions and moves are placed with the medians (see the job's measured_switch_warm_s / _cold_s). An agentic job's rollout may report its environments in `agentic`: `trajectories`, `turns` (all of them), `env_s` (its environment steps' seconds, summed) and `startup_s` (sandbox starts, summed); the job view's `environment.measured` shows the medians of the recent reports." },
                            "uid": { "type": "integer", "minimum": 0,
                                     "description": "The admission the phase was granted under (the grant's uid); refused with 409 if it has ended." } } })
}

fn operation(r: &super::routes::Route) -> Value {
    let mut op = match r.doc.clone() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    op.insert("summary".into(), json!(r.summary));
    let mut params: Vec<Value> = path_parameters(r.path).map(path_parameter).collect();
    if let Some(Value::Array(more)) = op.remove("parameters") {
        params.extend(more);
    }
    if !params.is_empty() {
        op.insert("parameters".into(), Value::Array(params));
    }
    if r.access != Access::Open {
        op.insert("security".into(), json!([{ "bearer": [] }]));
        let responses = op.entry("responses").or_insert_with(|| json!({}));
        let error = json!({ "description": "error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
        let mut codes = vec!["401", "429"];
        if r.access == Access::Admin {
            codes.push("403");
        }
        for code in codes {
            responses[code] = error.clone();
        }
    }
    Value::Object(op)
}

pub fn document() -> Value {
    let mut paths = Map::new();
    for r in table() {
        let entry = paths.entry(r.path).or_insert_with(|| json!({}));
        entry[r.method.as_str().to_ascii_lowercase()] = operation(&r);
    }
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Weave control plane", "version": env!("CARGO_PKG_VERSION"),
                  "description": "Admits RL post-training jobs into co-execution groups and gates their rollout and training phases." },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
                "SubmitSpec": submit_schema(),
                "Finish": finish_schema(),
            }
        },
        "paths": paths,
    })
}
