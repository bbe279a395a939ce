//! Job lists come a page at a time, queued and placed jobs in one order (by key), the next
//! page named in a `Link` header, each tenant seeing only its own.

mod common;
use common::*;
use serde_json::json;
use std::time::Duration;

/// Every page of `/v1/jobs` as `token` sees it, `limit` at a time: the ids on each page.
fn pages(s: &TestServer, token: &str, limit: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut path = Some(format!("/v1/jobs?limit={limit}"));
    while let Some(p) = path {
        let r = client().get(s.url(&p)).bearer_auth(token).send().unwrap();
        let link = r.headers().get("link").map(|v| v.to_str().unwrap().to_string());
        let (st, v) = body(r);
        assert_eq!(st, 200, "{v}");
        out.push(v.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect());
        path = weave_server::http::next_page(link.as_deref()).map(String::from);
    }
    out
}

#[test]
fn job_lists_come_a_page_at_a_time_queued_and_placed_jobs_in_one_order() {
    let s = TestServer::start_with(temp_dir("listing"), Duration::from_secs(600), |cfg| {
        cfg.capacity = weave_server::Capacity::Fixed;
        cfg.cluster.rollout.nodes = 1;
        cfg.cluster.training.nodes = 1;
    });
    let spec = |id: &str| json!({ "id": id, "type": "3B_4k", "iterations": 3, "rollout_s": 50, "train_s": 60 });
    for id in ["e", "a", "d", "b", "c"] {
        assert!(matches!(submit(&s, ALICE, spec(id)).0, 201 | 202));
    }
    assert!(matches!(submit(&s, BOB, spec("c")).0, 201 | 202));
    let (_, all) = body(client().get(s.url("/v1/jobs")).bearer_auth(ALICE).send().unwrap());
    let states: Vec<&str> = all.as_array().unwrap().iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert!(states.contains(&"queued") && states.contains(&"running"), "both kinds on one page: {states:?}");

    assert_eq!(pages(&s, ALICE, 2), [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
    assert_eq!(pages(&s, ALICE, 5), [vec!["a", "b", "c", "d", "e"]], "no next page when none follows");
    // Bob's `c` is his; an admin sees it by its key, in key order.
    assert_eq!(pages(&s, BOB, 2), [vec!["c"]]);
    assert_eq!(pages(&s, OPS, 4), [vec!["a", "b", "c", "c~bob"], vec!["d", "e"]]);
    // A limit is kept within bounds: 0 is read as 1.
    assert_eq!(pages(&s, BOB, 0), [vec!["c"]]);
}
