//! The backend loop against a fake Ray (the dashboard's State and Job APIs, served by axum on
//! loopback): launches once, re-attaches after a restart, fails what Ray refuses or ends,
//! takes lost nodes out of service, stops what Weave ended.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{http::StatusCode, Json, Router};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weave_backend::{Backend, BackendConfig};
use weave_ray::{RayClient, RayDriver};
use weave_server::plane::{JobState, Record, SubmitSpec};
use weave_server::{Capacity, ServerConfig, Shared};

#[derive(Default)]
struct FakeRay {
    /// (weave node name, alive)
    nodes: Vec<(String, bool)>,
    jobs: Vec<Value>,
    stops: Vec<String>,
    /// Entrypoints Ray refuses with 400.
    refuse: Vec<String>,
}

type Fake = Arc<Mutex<FakeRay>>;

async fn nodes(State(f): State<Fake>) -> Json<Value> {
    let f = f.lock().unwrap();
    let list: Vec<Value> = f
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (name, alive))| {
            let pool = if name.starts_with('r') { "rollout" } else { "training" };
            json!({
                "node_id": format!("id{i}"), "node_ip": format!("127.0.0.{}", i + 2),
                "state": if *alive { "ALIVE" } else { "DEAD" },
                "resources_total": { "GPU": 8.0, format!("weave_node_{name}"): 1000.0 },
                "labels": { "weave.io/node": name, "weave.io/pool": pool },
            })
        })
        .collect();
    Json(json!({ "result": true, "data": { "result": { "result": list } } }))
}

async fn list_jobs(State(f): State<Fake>) -> Json<Value> {
    Json(Value::Array(f.lock().unwrap().jobs.clone()))
}

async fn submit(State(f): State<Fake>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let mut f = f.lock().unwrap();
    let entrypoint = body["entrypoint"].as_str().unwrap_or_default().to_string();
    if f.refuse.contains(&entrypoint) {
        return (StatusCode::BAD_REQUEST, Json(json!("runtime_env is invalid")));
    }
    let mut job = body.clone();
    job["status"] = json!("RUNNING");
    f.jobs.push(job);
    (StatusCode::OK, Json(json!({ "submission_id": body["submission_id"] })))
}

async fn stop(State(f): State<Fake>, Path(id): Path<String>) -> Json<Value> {
    let mut f = f.lock().unwrap();
    f.stops.push(id.clone());
    for j in f.jobs.iter_mut().filter(|j| j["submission_id"] == id.as_str()) {
        j["status"] = json!("STOPPED");
    }
    Json(json!({ "stopped": true }))
}

fn fake_ray(fake: Fake) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let app = Router::new()
                .route("/api/v0/nodes", get(nodes))
                .route("/api/jobs/", get(list_jobs).post(submit))
                .route("/api/jobs/{id}/stop", post(stop))
                .with_state(fake);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv_timeout(Duration::from_secs(10)).unwrap())
}

fn shared(dir: &std::path::Path) -> Arc<Shared> {
    let cfg = ServerConfig {
        capacity: Capacity::Recorded,
        heartbeat_timeout: Duration::from_secs(600),
        // The paper's placement: the test checks two jobs launched into one group on t0.
        placement: weave_server::state::PlacementConfig { consolidate: false, ..Default::default() },
        ..ServerConfig::new(dir.to_path_buf())
    };
    Arc::new(Shared::open(cfg).unwrap())
}

fn backend(url: &str, s: &Arc<Shared>) -> Backend {
    let cfg = BackendConfig {
        server_url: "http://weave:7070".into(),
        poll: Duration::from_millis(10),
        grace: Duration::ZERO,
        pending_limit: Duration::from_secs(600),
        drain_notice: weave_backend::DRAIN_NOTICE,
    };
    Backend::new(Box::new(RayDriver::new(RayClient::new(url).unwrap(), None)), s.clone(), cfg)
}

fn submit_job(s: &Shared, id: &str, entrypoint: &str) {
    let job: SubmitSpec = serde_json::from_value(json!({
        "id": id, "type": "7B_8k", "iterations": 5, "slo": 1.3, "rollout_s": 300.0, "train_s": 100.0,
        "launch": { "entrypoint": entrypoint }
    }))
    .unwrap();
    s.commit(|time_us| Record::Submit { time_us, tenant: "default".into(), job }).unwrap();
}

fn state(s: &Shared, id: &str) -> (JobState, Option<String>, u32) {
    let g = s.lock();
    let j = g.plane.job(id).unwrap();
    (j.state, j.failure.clone(), j.id.0)
}

#[test]
fn the_backend_reconciles_ray_with_the_plane() {
    let dir = std::env::temp_dir().join(format!("weave-ray-backend-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fake: Fake = Arc::new(Mutex::new(FakeRay {
        nodes: vec![("t0".into(), true), ("r0".into(), true), ("r1".into(), true), ("r2".into(), true)],
        refuse: vec!["bad".into()],
        ..Default::default()
    }));
    let url = fake_ray(fake.clone());
    let s = shared(&dir);
    s.commit(|time_us| Record::Inventory { time_us, rollout: 3, training: 1 }).unwrap();
    submit_job(&s, "a", "python3 a.py");
    submit_job(&s, "b", "python3 b.py");
    let mut b = backend(&url, &s);
    b.tick().unwrap();
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.jobs.len(), 2, "both launched");
        let env = &f.jobs[0]["runtime_env"]["env_vars"];
        assert_eq!((env["WEAVE_JOB"].as_str(), env["WEAVE_SERVER"].as_str()), (Some("a"), Some("http://weave:7070")));
        assert!(env["WEAVE_TOKEN"].as_str().unwrap().starts_with("wj1.a.0."));
    }
    // A second round, and a restarted server on the same store, launch nothing again.
    b.tick().unwrap();
    drop(b);
    let mut b = backend(&url, &s);
    assert_eq!(b.tick().unwrap(), vec![]);
    assert_eq!(fake.lock().unwrap().jobs.len(), 2);

    // Ray refuses a launch: the job fails with Ray's reason.
    submit_job(&s, "c", "bad");
    b.tick().unwrap();
    let (st, why, _) = state(&s, "c");
    assert_eq!(st, JobState::Failed);
    assert!(why.unwrap().contains("runtime_env is invalid"));

    // Ray ends a job on its own: failed in Weave (grace 0 here).
    fake.lock().unwrap().jobs[0]["status"] = json!("FAILED");
    b.tick().unwrap(); // first seen terminal
    b.tick().unwrap();
    assert_eq!(state(&s, "a").0, JobState::Failed);

    // Ray loses b's rollout node: it goes out of service, b is re-admitted and relaunched.
    let b_node = s.lock().plane.job("b").unwrap().decision.as_ref().unwrap().rollout_nodes[0].to_string();
    let (_, _, uid_before) = state(&s, "b");
    for n in fake.lock().unwrap().nodes.iter_mut().filter(|(name, _)| *name == b_node) {
        n.1 = false;
    }
    b.tick().unwrap();
    let (st, _, uid_after) = state(&s, "b");
    assert_eq!(st, JobState::Running);
    assert_ne!(uid_before, uid_after, "a new admission");
    assert!(s.lock().plane.placer().is_down(b_node.parse().unwrap()));
    b.tick().unwrap();
    let f = fake.lock().unwrap();
    let relaunched = f.jobs.iter().filter(|j| j["metadata"]["weave_job"] == "b").count();
    assert_eq!(relaunched, 2, "the new admission is launched");
    assert!(
        f.stops.iter().any(|id| id.ends_with(&format!("-b-{uid_before}"))),
        "the old launch is stopped: {:?}",
        f.stops
    );
    drop(f);

    // Cancelling in Weave stops the Ray job.
    s.commit(|time_us| Record::Cancel { time_us, job: "b".into() }).unwrap();
    b.tick().unwrap();
    assert!(fake.lock().unwrap().stops.iter().any(|id| id.ends_with(&format!("-b-{uid_after}"))));
    let _ = std::fs::remove_dir_all(&dir);
}
