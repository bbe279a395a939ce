//! The Ray submission Weave makes for an admitted job: entrypoint, the job's own environment,
//! Weave's variables (identity, server, token, pinned nodes, checkpoint), and the metadata the
//! backend recognises its submissions by.

use weave_backend::launch_request;
use weave_core::ClusterConfig;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_ray::launch::submission_body;
use weave_server::plane::JobEntry;
use weave_server::plane::{Plane, Record, SubmitSpec};

/// The body for `j`'s admission, or `None` if Weave does not launch it.
fn launch_body(j: &JobEntry, server: &str, token: &str, cluster: &ClusterConfig) -> Option<serde_json::Value> {
    launch_request("abcd1234", j, server, token, cluster).map(|r| submission_body(&r, None))
}

fn plane_with(jobs: &[serde_json::Value]) -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((3, 1));
    let mut p = Plane::new(cluster, cfg);
    for (i, j) in jobs.iter().enumerate() {
        let job: SubmitSpec = serde_json::from_value(j.clone()).unwrap();
        p.apply(&Record::Submit { time_us: i as u64, tenant: "team".into(), job }).unwrap();
    }
    p
}

#[test]
fn the_submission_carries_identity_token_and_pinned_nodes() {
    let launched = serde_json::json!({
        "id": "run-1", "type": "7B_8k", "iterations": 50, "resume_from": 7, "rollout_s": 300.0, "train_s": 100.0,
        "slo": 1.3, "launch": { "entrypoint": "python3 train.py", "env": { "LR": "0.1" } }
    });
    let external =
        serde_json::json!({ "id": "run-2", "type": "7B_8k", "rollout_s": 300.0, "train_s": 100.0, "slo": 1.3 });
    let p = plane_with(&[launched, external]);
    let cluster = ClusterConfig::default();
    let j = p.job("run-1").unwrap();
    let body = launch_body(j, "http://10.0.0.1:7070", "wj1.run-1.ff", &cluster).unwrap();
    assert_eq!(body["entrypoint"], "python3 train.py");
    assert_eq!(body["submission_id"], "weave-abcd1234-run-1-0");
    let env = &body["runtime_env"]["env_vars"];
    for (k, v) in [
        ("LR", "0.1"),
        ("WEAVE_JOB", "run-1"),
        ("WEAVE_JOB_UID", "0"),
        ("WEAVE_SERVER", "http://10.0.0.1:7070"),
        ("WEAVE_TOKEN", "wj1.run-1.ff"),
        ("WEAVE_ROLLOUT_NODES", "r0"),
        ("WEAVE_TRAINING_NODES", "t0"),
        ("WEAVE_NODE_RESOURCE_PREFIX", "weave_node_"),
        ("WEAVE_RESUME_FROM", "7"),
        ("WEAVE_ITERATIONS", "50"),
        ("WEAVE_ROLLOUT_GPUS_PER_NODE", "8"),
        ("WEAVE_MODE", "disaggregated"),
    ] {
        assert_eq!(env[k], v, "{k}");
    }
    assert_eq!(body["metadata"]["weave_instance"], "abcd1234");
    assert_eq!(body["metadata"]["weave_uid"], "0");
    // The second job scaled out onto its own rollout node of the same group; it has no launch
    // section, so Weave does not launch it.
    let j2 = p.job("run-2").unwrap();
    assert_eq!(j2.decision.as_ref().unwrap().rollout_nodes[0].to_string(), "r1");
    assert!(launch_body(j2, "http://x", "t", &cluster).is_none());
}

#[test]
fn a_colocated_job_is_told_its_mode_and_runs_both_phases_on_its_training_nodes() {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((3, 2));
    let mut p = Plane::new(cluster.clone(), cfg).with_consolidation(Default::default());
    // Alone, a 7B_8k job is cheaper per iteration co-located than on a rollout and a
    // training node of its own (see the profile: 258 s on one H800 node against 247 s on
    // both), and within its SLO.
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
        "id": "solo", "type": "7B_8k", "iterations": 50, "slo": 1.5,
        "launch": { "entrypoint": "python3 train.py" }
    }))
    .unwrap();
    p.apply(&Record::Submit { time_us: 0, tenant: "team".into(), job }).unwrap();
    let j = p.job("solo").unwrap();
    assert_eq!(j.decision.as_ref().unwrap().kind, weave_place::DecisionKind::Colocated);
    let body = launch_body(j, "http://10.0.0.1:7070", "wj1.solo.ff", &cluster).unwrap();
    let env = &body["runtime_env"]["env_vars"];
    assert_eq!(env["WEAVE_MODE"], "colocated");
    assert_eq!(env["WEAVE_ROLLOUT_NODES"], "t0");
    assert_eq!(env["WEAVE_TRAINING_NODES"], "t0");
}
