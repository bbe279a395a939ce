//! The Ray job submission for an admitted job: its entrypoint, its environment (the job's own,
//! Weave's variables, how to pin its bundles) and the metadata the driver recognises its
//! submissions by.

use crate::inventory::RESOURCE_PREFIX;
use serde_json::json;
use weave_backend::LaunchRequest;

/// The Job Submission API body. `pin`: how the job pins its placement-group bundles
/// (`WEAVE_RAY_PIN`: `labels` or `resources`; `None` lets it choose).
pub fn submission_body(request: &LaunchRequest, pin: Option<&str>) -> serde_json::Value {
    let mut env = request.env.clone();
    env.insert("WEAVE_NODE_RESOURCE_PREFIX".into(), RESOURCE_PREFIX.into());
    if let Some(pin) = pin {
        env.insert("WEAVE_RAY_PIN".into(), pin.into());
    }
    json!({
        "entrypoint": request.entrypoint,
        "submission_id": request.id,
        "runtime_env": { "env_vars": env },
        "metadata": {
            "weave_instance": request.instance, "weave_job": request.job, "weave_uid": request.uid.to_string(),
            "weave_tenant": request.tenant,
        },
    })
}
