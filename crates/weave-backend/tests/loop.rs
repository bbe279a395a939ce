//! The backend loop against a fake cluster manager (a [`ClusterDriver`] over shared state):
//! launches once across rounds and restarts, fails what the manager refuses or ends (or
//! forgets, across restarts too), reads a drain as a notice, takes a lost node out of service and relaunches its
//! jobs from Weave's count, and leaves everything alone while the manager does not answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weave_backend::{
    Backend, BackendConfig, ClusterDriver, DriverError, LaunchRequest, LaunchStatus, Listed, NodeHealth,
};
use weave_core::NodeId;
use weave_server::plane::{JobState, Record, SubmitSpec};
use weave_server::{Capacity, ServerConfig, Shared};

#[derive(Default)]
struct Manager {
    nodes: BTreeMap<NodeId, NodeHealth>,
    listed: Vec<Listed>,
    launched: Vec<LaunchRequest>,
    stopped: Vec<String>,
    /// Entrypoints the manager refuses.
    refuse: Vec<String>,
    /// Not answering.
    down: bool,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Manager>>);

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Manager) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }
}

fn answer(m: &Manager) -> Result<(), DriverError> {
    if m.down {
        return Err(DriverError::Unavailable("the fake does not answer".into()));
    }
    Ok(())
}

impl ClusterDriver for Fake {
    fn cluster(&self) -> &'static str {
        "Fake"
    }

    fn nodes(&mut self) -> Result<BTreeMap<NodeId, NodeHealth>, DriverError> {
        self.with(|m| answer(m).map(|_| m.nodes.clone()))
    }

    fn launches(&mut self, _instance: &str) -> Result<Vec<Listed>, DriverError> {
        self.with(|m| answer(m).map(|_| m.listed.clone()))
    }

    fn launch(&mut self, r: &LaunchRequest) -> Result<(), DriverError> {
        self.with(|m| {
            answer(m)?;
            if m.refuse.contains(&r.entrypoint) {
                return Err(DriverError::Refused("no such partition".into()));
            }
            let listed = Listed {
                launch_id: r.id.clone(),
                job: r.job.clone(),
                uid: r.uid,
                status: LaunchStatus::Running,
                message: String::new(),
            };
            m.listed.push(listed);
            m.launched.push(r.clone());
            Ok(())
        })
    }

    fn stop(&mut self, launch_id: &str) -> Result<(), DriverError> {
        self.with(|m| {
            m.stopped.push(launch_id.to_string());
            for l in m.listed.iter_mut().filter(|l| l.launch_id == launch_id) {
                l.status = LaunchStatus::Ended("CANCELLED".into());
            }
        });
        Ok(())
    }
}

fn n(s: &str) -> NodeId {
    s.parse().unwrap()
}

fn setup(tag: &str) -> (Arc<Shared>, Fake, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("weave-backend-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = ServerConfig {
        capacity: Capacity::Recorded,
        heartbeat_timeout: Duration::from_secs(600),
        // The paper's placement: a job alone takes a rollout and a training node (full Weave
        // would co-locate it on t0), so losing its rollout node leaves it somewhere to go.
        placement: weave_server::state::PlacementConfig { consolidate: false, ..Default::default() },
        ..ServerConfig::new(dir.clone())
    };
    let shared = Arc::new(Shared::open(cfg).unwrap());
    shared.commit(|time_us| Record::Inventory { time_us, rollout: 2, training: 1 }).unwrap();
    let fake = Fake::default();
    fake.with(|m| m.nodes = ["r0", "r1", "t0"].iter().map(|s| (n(s), NodeHealth::Up)).collect());
    (shared, fake, dir)
}

const NOTICE: Duration = Duration::from_secs(45);

fn backend(s: &Arc<Shared>, fake: &Fake) -> Backend {
    let cfg = BackendConfig {
        server_url: "http://weave:7070".into(),
        poll: Duration::from_millis(10),
        grace: Duration::ZERO,
        pending_limit: Duration::from_secs(600),
        // Not the default, so the notice's deadline shows it is the configured one.
        drain_notice: NOTICE,
    };
    Backend::new(Box::new(fake.clone()), s.clone(), cfg)
}

fn submit(s: &Shared, id: &str, entrypoint: &str) {
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
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
fn launches_happen_once_across_rounds_and_restarts_and_refusals_fail_the_job_it_keeps() {
    let (s, fake, dir) = setup("once");
    submit(&s, "a", "python3 a.py");
    submit(&s, "bad", "refused.py");
    fake.with(|m| m.refuse.push("refused.py".into()));
    let mut b = backend(&s, &fake);
    b.tick().unwrap();
    b.tick().unwrap();
    drop(b);
    backend(&s, &fake).tick().unwrap();
    let launched = fake.with(|m| m.launched.clone());
    assert_eq!(launched.len(), 1, "{launched:?}");
    let a = &launched[0];
    assert_eq!((a.job.as_str(), a.env["WEAVE_SERVER"].as_str()), ("a", "http://weave:7070"));
    assert_eq!(a.nodes.len(), 2, "its rollout and its training node: {:?}", a.nodes);
    let (st, why, _) = state(&s, "bad");
    assert_eq!(st, JobState::Failed, "kept, failed");
    assert_eq!(why.unwrap(), "Fake refused the launch: no such partition");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_launch_the_manager_forgets_fails_its_job_and_is_not_launched_again_even_after_a_restart() {
    let (s, fake, dir) = setup("forgot");
    submit(&s, "a", "python3 a.py");
    backend(&s, &fake).tick().unwrap();
    assert_eq!(s.lock().plane.job("a").unwrap().launched, Some(0), "the launch is recorded");
    // Slurm forgets an ended job after MinJobAge, here while the server was down: the
    // restarted backend (nothing in its memory) still does not launch it again.
    fake.with(|m| m.listed.clear());
    let mut b = backend(&s, &fake);
    b.tick().unwrap(); // first seen ended
    b.tick().unwrap();
    assert_eq!(fake.with(|m| m.launched.len()), 1);
    let (st, why, _) = state(&s, "a");
    assert_eq!(st, JobState::Failed);
    assert!(why.unwrap().contains("ended UNLISTED"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_drain_is_a_notice_a_lost_node_relaunches_its_jobs_and_silence_changes_nothing() {
    let (s, fake, dir) = setup("nodes");
    submit(&s, "a", "python3 a.py");
    let mut b = backend(&s, &fake);
    b.tick().unwrap();
    let (_, _, uid) = state(&s, "a");
    let node = s.lock().plane.job("a").unwrap().decision.as_ref().unwrap().rollout_nodes[0];

    // The manager does not answer: an error, nothing marked down or failed.
    fake.with(|m| m.down = true);
    assert!(b.tick().is_err());
    assert_eq!(state(&s, "a").0, JobState::Running);
    assert_eq!(s.lock().plane.placer().down_nodes().count(), 0);
    fake.with(|m| m.down = false);

    fake.with(|m| m.nodes.insert(node, NodeHealth::Draining("maintenance".into())));
    let before = s.now_us();
    b.tick().unwrap();
    let after = s.now_us();
    let deadline = s.lock().plane.notices().find(|(n, _)| **n == node).map(|(_, notice)| notice.deadline_us);
    let notice = NOTICE.as_micros() as u64;
    assert!(
        deadline.is_some_and(|d| (before + notice..=after + notice).contains(&d)),
        "a notice of {NOTICE:?}: {deadline:?}"
    );
    assert_eq!(state(&s, "a").2, uid, "the job keeps running through the notice");

    fake.with(|m| m.nodes.insert(node, NodeHealth::Gone("drained".into())));
    b.tick().unwrap();
    let (st, _, new_uid) = state(&s, "a");
    assert_eq!(st, JobState::Running);
    assert_ne!(new_uid, uid, "re-admitted off the lost node");
    b.tick().unwrap();
    let launched = fake.with(|m| m.launched.clone());
    assert_eq!(launched.len(), 2);
    assert!(!launched[1].nodes.contains(&node), "{:?}", launched[1].nodes);
    assert_eq!(launched[1].env["WEAVE_RESUME_FROM"], "0");
    assert!(fake.with(|m| m.stopped.iter().any(|id| id.ends_with(&format!("-a-{uid}")))), "the old launch stopped");
    let _ = std::fs::remove_dir_all(&dir);
}
