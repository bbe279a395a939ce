//! LoRA jobs at the gate: several jobs of one base share a pack (one engine, one trainer), its
//! driver holds the engine's rollout for all of them at once, each job keeps its own adapter
//! slot, and a member that ends never disturbs the others.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn lora_job(id: &str, base: &str, iterations: u64) -> Value {
    let ty = if base == "qwen2.5-7b" { "7B_8k" } else { "14B_8k" };
    json!({ "id": id, "type": ty, "batch": 32, "iterations": iterations, "slo": 2.0,
            "lora": { "base": base, "rank": 16 } })
}

fn job(s: &TestServer, token: &str, id: &str) -> Value {
    client().get(s.url(&format!("/v1/jobs/{id}"))).bearer_auth(token).send().unwrap().json::<Value>().unwrap()["job"]
        .clone()
}

fn events(s: &TestServer, job: &str) -> Vec<Value> {
    let v: Value = client().get(s.url("/v1/events")).bearer_auth(OPS).send().unwrap().json().unwrap();
    v.as_array().unwrap().iter().filter(|e| e["job"] == job).cloned().collect()
}

/// Runs one iteration of `pack` through the gate (its driver is the operator's).
fn pack_iteration(s: &TestServer, pack: &str, k: u64) -> Value {
    let (st, granted) = start_phase(s, OPS, pack, "rollout", k, 5.0);
    assert_eq!(st, 200, "{granted}");
    assert_eq!(finish_phase(s, OPS, pack, "rollout", k, 1.0).0, 200);
    let (st, v) = start_phase(s, OPS, pack, "train", k, 5.0);
    assert_eq!(st, 200, "{v}");
    assert_eq!(finish_phase(s, OPS, pack, "train", k, 1.0).0, 200);
    granted
}

fn server(name: &str) -> TestServer {
    TestServer::start_with(temp_dir(name), Duration::from_secs(60), |_| {})
}

#[test]
fn jobs_of_one_base_share_a_pack_each_in_its_own_slot() {
    let s = server("lora-pack");
    for (id, n) in [("a", 3), ("b", 5), ("c", 5), ("d", 5)] {
        let (st, body) = submit(&s, ALICE, lora_job(id, "qwen2.5-7b", n));
        assert_eq!(st, 201, "{body}");
    }
    let (st, body) = submit(&s, BOB, lora_job("other-base", "qwen2.5-14b", 2));
    assert_eq!(st, 201, "{body}");
    let a = job(&s, ALICE, "a");
    let pack = a["adapter"]["pack"].as_str().unwrap().to_string();
    let mut slots = Vec::new();
    for id in ["a", "b", "c", "d"] {
        let v = job(&s, ALICE, id);
        assert_eq!(v["adapter"]["pack"], pack.as_str(), "{v}");
        assert_eq!(v["placement"], "lora-pack", "{v}");
        slots.push(v["adapter"]["slot"].as_u64().unwrap());
    }
    assert_eq!(slots, [0, 1, 2, 3], "each member its own slot");
    // Another base gets an engine of its own.
    let other = job(&s, BOB, "other-base");
    assert_ne!(other["adapter"]["pack"], pack.as_str(), "{other}");
    // A member's nodes are its pack's: the job is told its shared engine and trainer.
    let p = job(&s, OPS, &pack);
    assert_eq!(p["rollout_nodes"], a["rollout_nodes"]);
    assert_eq!(p["training_nodes"], a["training_nodes"]);
    assert_eq!(p["members"], json!({ "0": "a", "1": "b", "2": "c", "3": "d" }), "{p}");
    assert_eq!(p["staleness"], 1, "members staggered on the trainer pipeline the pack");

    // A member asks for no phase: its pack's driver does, and holds the engine for all four.
    let (st, refused) = start_phase(&s, ALICE, "a", "rollout", 0, 0.0);
    assert!(st == 409 && refused.to_string().contains(&pack), "{st} {refused}");
    let granted = pack_iteration(&s, &pack, 0);
    let grant = events(&s, &pack).into_iter().find(|e| e["kind"] == "grant").unwrap();
    let adapters: Vec<(String, u64)> = grant["meta"]["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["job"].as_str().unwrap().to_string(), a["slot"].as_u64().unwrap()))
        .collect();
    assert_eq!(adapters.len(), 1, "only a was a member at the pack's first grant: {grant}");
    // The driver is told, when it starts the rollout, every member in its batch: the members
    // that joined while the rollout was granted join the running batch.
    let told: Vec<u64> = granted["adapters"].as_array().unwrap().iter().map(|a| a["slot"].as_u64().unwrap()).collect();
    assert_eq!(told, [0, 1, 2, 3], "{granted}");
    for id in ["a", "b", "c", "d"] {
        assert_eq!(job(&s, ALICE, id)["completed_iterations"], 1, "{id}: one iteration with the pack's");
    }
}

#[test]
fn a_member_that_ends_leaves_the_others_in_their_slots() {
    let s = server("lora-fail");
    for id in ["a", "b", "c"] {
        assert_eq!(submit(&s, ALICE, lora_job(id, "qwen2.5-7b", 4)).0, 201);
    }
    let pack = job(&s, ALICE, "a")["adapter"]["pack"].as_str().unwrap().to_string();
    let before = job(&s, OPS, &pack);
    // b is cancelled while the pack's rollout (with b in its batch) runs.
    assert_eq!(start_phase(&s, OPS, &pack, "rollout", 0, 5.0).0, 200);
    let (st, v) = body(client().delete(s.url("/v1/jobs/b")).bearer_auth(ALICE).send().unwrap());
    assert_eq!(st, 200, "{v}");
    assert_eq!(finish_phase(&s, OPS, &pack, "rollout", 0, 1.0).0, 200);
    assert_eq!(start_phase(&s, OPS, &pack, "train", 0, 5.0).0, 200);
    assert_eq!(finish_phase(&s, OPS, &pack, "train", 0, 1.0).0, 200);
    let after = job(&s, OPS, &pack);
    assert_eq!(after["members"], json!({ "0": "a", "2": "c" }), "b's slot is free, a and c keep theirs");
    assert_eq!(after["state"], "running");
    assert!(
        after["estimate_rollout_s"].as_f64() < before["estimate_rollout_s"].as_f64(),
        "the batch shrank: {before} {after}"
    );
    assert_eq!(job(&s, ALICE, "b")["state"], "cancelled");
    assert_eq!(job(&s, ALICE, "b")["completed_iterations"], 0, "b's round was not credited");
    for id in ["a", "c"] {
        let v = job(&s, ALICE, id);
        assert_eq!((v["state"].as_str(), v["completed_iterations"].as_u64()), (Some("running"), Some(1)), "{v}");
    }
    // A new job of the base takes the free slot.
    assert_eq!(submit(&s, BOB, lora_job("e", "qwen2.5-7b", 1)).0, 201);
    assert_eq!(job(&s, BOB, "e")["adapter"], json!({ "pack": pack, "slot": 1 }));
}

#[test]
fn members_complete_on_their_own_counts_and_the_last_one_ends_the_pack() {
    let s = server("lora-complete");
    assert_eq!(submit(&s, ALICE, lora_job("short", "qwen2.5-7b", 1)).0, 201);
    assert_eq!(submit(&s, ALICE, lora_job("long", "qwen2.5-7b", 2)).0, 201);
    let pack = job(&s, ALICE, "short")["adapter"]["pack"].as_str().unwrap().to_string();
    pack_iteration(&s, &pack, 0);
    assert_eq!(job(&s, ALICE, "short")["state"], "completed");
    assert_eq!(job(&s, OPS, &pack)["members"], json!({ "1": "long" }));
    pack_iteration(&s, &pack, 1);
    assert_eq!(job(&s, ALICE, "long")["state"], "completed");
    assert_eq!(job(&s, ALICE, "long")["completed_iterations"], 2);
    assert_eq!(job(&s, OPS, &pack)["state"], "completed", "no member left");
}

/// Members have no driver of their own: the pack's heartbeats keep them; a pack whose driver
/// stops is failed, and so are its members, naming it.
#[test]
fn members_live_by_their_packs_heartbeats() {
    // A 5 s timeout, the pack beating every quarter second: only a stall of nearly 5 s on a
    // loaded machine could expire the pack itself.
    let s = TestServer::start_with(temp_dir("lora-heartbeat"), Duration::from_secs(5), |_| {});
    assert_eq!(submit(&s, ALICE, lora_job("a", "qwen2.5-7b", 3)).0, 201);
    let pack = job(&s, ALICE, "a")["adapter"]["pack"].as_str().unwrap().to_string();
    let beat = || client().post(s.url(&format!("/v1/jobs/{pack}/heartbeat"))).bearer_auth(OPS).send().unwrap();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(7) {
        assert_eq!(beat().status(), 200);
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(job(&s, OPS, &pack)["state"], "running");
    assert_eq!(job(&s, ALICE, "a")["state"], "running", "7 s without a heartbeat of its own");
    let a = wait_until("the pack's heartbeat to expire", Duration::from_secs(60), || {
        Some(job(&s, ALICE, "a")).filter(|a| a["state"] == "failed")
    });
    assert!(a["failure"].as_str().unwrap().contains(&pack), "{a}");
    assert_eq!(job(&s, OPS, &pack)["state"], "failed");
}

#[test]
fn lora_submissions_the_server_cannot_share_are_refused_naming_the_field() {
    let s = server("lora-refused");
    let mut launch = lora_job("x", "qwen2.5-7b", 2);
    launch["launch"] = json!({ "entrypoint": "python train.py" });
    let mut stale = lora_job("x", "qwen2.5-7b", 2);
    stale["staleness"] = json!(1);
    for (bad, field) in [(launch, "`launch`"), (stale, "`staleness`")] {
        let (st, msg) = submit(&s, ALICE, bad.clone());
        assert!(st == 400 && msg.to_string().contains(field), "{bad}: {st} {msg}");
    }
}
