//! Job names are per tenant: the first tenant to use a name keys its job by it, another
//! tenant's job of the same name is keyed `name~tenant`; each tenant addresses its own by name.

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;
use weave_core::ClusterConfig;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{Plane, Record, SubmitSpec};

fn submit_record(tenant: &str, key: &str) -> Record {
    let job: SubmitSpec = serde_json::from_value(json!({ "id": key, "type": "3B_4k", "iterations": 1 })).unwrap();
    Record::Submit { time_us: 1, tenant: tenant.into(), job }
}

#[test]
fn keys_per_tenant_resolve_to_each_tenants_own_job() {
    let cluster = ClusterConfig::default();
    let mut p = Plane::new(cluster.clone(), PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0));
    assert_eq!(p.key_for("alice", "run-1").as_deref(), Some("run-1"));
    p.apply(&submit_record("alice", "run-1")).unwrap();
    assert_eq!(p.key_for("alice", "run-1").as_deref(), Some("run-1"), "her own name again");
    assert_eq!(p.key_for("bob", "run-1").as_deref(), Some("run-1~bob"));
    p.apply(&submit_record("bob", "run-1~bob")).unwrap();
    assert_eq!(p.resolve("alice", "run-1").as_deref(), Some("run-1"));
    assert_eq!(p.resolve("bob", "run-1").as_deref(), Some("run-1~bob"));
    assert_eq!(p.resolve("bob", "run-1~bob").as_deref(), Some("run-1~bob"), "a key resolves to itself");
    assert_eq!(p.resolve("carol", "run-1"), None);
    // A tenant whose name cannot be part of a key cannot take a name already used.
    assert_eq!(p.key_for("has space", "run-1"), None);
    assert_eq!(p.key_for("has space", "run-2").as_deref(), Some("run-2"));
}

#[test]
fn clients_may_not_use_the_key_separator() {
    let s = TestServer::start(temp_dir("names-tilde"), Duration::from_secs(60));
    let (st, v) = submit(&s, ALICE, json!({ "id": "a~bob", "type": "3B_4k" }));
    assert_eq!(st, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("id"), "{v}");
}

#[test]
fn a_job_token_drives_its_job_by_key_or_by_name() {
    use weave_server::auth::JobTokens;
    let dir = temp_dir("names-token");
    let s = TestServer::start(dir.clone(), Duration::from_secs(60));
    // SLO 1.0: the two jobs do not share nodes (Alice never runs hers here).
    let spec = json!({ "id": "run-1", "type": "3B_4k", "iterations": 1, "rollout_s": 5, "train_s": 5, "slo": 1.0 });
    assert_eq!(submit(&s, ALICE, spec.clone()).0, 201);
    let (st, v) = submit(&s, BOB, spec);
    assert_eq!((st, &v["job"]["id"]), (201, &json!("run-1")), "{v}");
    let uid = v["job"]["uid"].as_u64().unwrap() as u32;
    let token = JobTokens::load_or_create(&dir.join("job-token.key")).unwrap().token("bob", "run-1~bob", uid);
    for path in ["/v1/jobs/run-1~bob", "/v1/jobs/run-1"] {
        let (st, v) = body(client().get(s.url(path)).bearer_auth(&token).send().unwrap());
        assert_eq!((st, &v["job"]["tenant"]), (200, &json!("bob")), "{path}: {v}");
    }
    run_job(&s, &token, "run-1", 1);
    let (_, v) = body(client().get(s.url("/v1/jobs/run-1")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(v["job"]["state"], "running", "Alice's run-1 is untouched: {v}");
    let (_, v) = body(client().get(s.url("/v1/jobs/run-1")).bearer_auth(BOB).send().unwrap());
    assert_eq!(v["job"]["state"], "completed", "{v}");
}
