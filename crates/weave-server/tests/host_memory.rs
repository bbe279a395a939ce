//! The host memory a job's runtime reports holding (`meta.host_bytes` with its phases) is held
//! against what the ledger models for it, per node of each pool, in the job's view.

mod common;
use common::*;
use serde_json::json;

fn finish_with(s: &TestServer, phase: &str, it: u64, meta: serde_json::Value) {
    let (st, v) = finish_phase_with(s, ALICE, "j", phase, it, json!({ "duration_s": 1.0, "meta": meta }));
    assert_eq!(st, 200, "{v}");
}

fn host_memory(s: &TestServer) -> serde_json::Value {
    let (_, v) = body(client().get(s.url("/v1/jobs/j")).bearer_auth(ALICE).send().unwrap());
    v["job"]["host_memory"].clone()
}

#[test]
fn reported_host_memory_is_held_against_the_ledgers_model() {
    let s = TestServer::start(temp_dir("host-memory"), std::time::Duration::from_secs(600));
    assert_eq!(submit(&s, ALICE, json!({ "id": "j", "type": "3B_4k", "iterations": 5 })).0, 201);
    assert!(host_memory(&s).is_null(), "nothing reported yet");
    let mut it = 0;
    let mut phase = |meta: serde_json::Value| {
        for p in ["rollout", "train"] {
            assert_eq!(start_phase(&s, ALICE, "j", p, it, 5.0).0, 200);
            finish_with(&s, p, it, if p == "rollout" { meta.clone() } else { json!({ "host_bytes": 2_000_000 }) });
        }
        it += 1;
        host_memory(&s)
    };
    let h = phase(json!({ "host_bytes": 1_000_000 }));
    assert_eq!((&h["rollout_reported"], &h["train_reported"]), (&json!(1_000_000), &json!(2_000_000)), "{h}");
    // 3B: 113.4 GB of rollout state and 156.2 GB of training state per node at its width.
    assert!(h["rollout_modelled"].as_u64().unwrap() > 100_000_000_000, "{h}");
    assert!(h["train_modelled"].as_u64().unwrap() > 100_000_000_000, "{h}");
    assert_eq!(h["within_model"], true);
    // A report the model does not cover shows: the ledger would under-count this job.
    let h = phase(json!({ "host_bytes": 500_000_000_000u64 }));
    assert_eq!((&h["rollout_reported"], &h["within_model"]), (&json!(500_000_000_000u64), &json!(false)), "{h}");
    // Reports that make no sense are ignored.
    for nonsense in [json!({ "host_bytes": "lots" }), json!({ "host_bytes": -1 }), json!({ "host_bytes": 1u64 << 60 })]
    {
        let h = phase(nonsense);
        assert_eq!(h["rollout_reported"], json!(500_000_000_000u64), "{h}");
    }
}
