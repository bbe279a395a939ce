//! The backend loop: every poll, read Ray's nodes and jobs, read the plane, [`reconcile`],
//! and carry the steps out: node and job failures become durable control-plane records
//! (through the same check -> append -> apply path as API requests), launches and stops
//! become Job API calls.

use crate::client::{RayClient, RayError};
use crate::launch::submission_body;
use crate::reconcile::{reconcile, JobSnapshot, RayStatus, Step, Submission, World};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weave_core::NodeId;
use weave_server::plane::{JobState, Record};
use weave_server::Shared;

#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// The server's URL as launched jobs reach it.
    pub server_url: String,
    pub poll: Duration,
    /// See [`World::grace_ms`].
    pub grace: Duration,
    /// See [`World::pending_limit_ms`].
    pub pending_limit: Duration,
    /// How launched jobs pin their placement-group bundles (`WEAVE_RAY_PIN`: `labels` or
    /// `resources`); `None` lets each job use label selectors where its Ray has them.
    pub pin: Option<String>,
}

pub struct RayBackend {
    client: RayClient,
    shared: Arc<Shared>,
    cfg: BackendConfig,
    /// This Weave's instance id (its launches carry it).
    instance: String,
    /// When each submission was first seen terminal.
    terminal_since: BTreeMap<String, Instant>,
    /// When each submission was first seen pending.
    pending_since: BTreeMap<String, Instant>,
    /// When a stop was last sent, so a slow stop is not re-sent every poll.
    stop_sent: BTreeMap<String, Instant>,
}

impl RayBackend {
    pub fn new(client: RayClient, shared: Arc<Shared>, cfg: BackendConfig) -> RayBackend {
        let instance = shared.job_tokens.instance_id();
        RayBackend {
            client,
            shared,
            cfg,
            instance,
            terminal_since: BTreeMap::new(),
            pending_since: BTreeMap::new(),
            stop_sent: BTreeMap::new(),
        }
    }

    /// Polls until `stop` is set. Errors are logged (once until they change) and retried: a
    /// Ray that does not answer never marks anything down.
    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let mut last_error = None;
        while !stop.load(Ordering::Relaxed) {
            match self.tick() {
                Ok(_) => last_error = None,
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_ref() != Some(&msg) {
                        eprintln!("weave ray backend: {msg} (retrying)");
                    }
                    last_error = Some(msg);
                }
            }
            std::thread::sleep(self.cfg.poll);
        }
    }

    /// One round; returns the steps taken.
    pub fn tick(&mut self) -> Result<Vec<Step>, RayError> {
        let inventory = self.client.inventory()?;
        let submissions = self.submissions()?;
        let (jobs, down, pools) = self.plane_view();
        let world = World {
            instance: &self.instance,
            inventory: &inventory,
            pools,
            down: &down,
            jobs: &jobs,
            submissions: &submissions,
            grace_ms: self.cfg.grace.as_millis() as u64,
            pending_limit_ms: self.cfg.pending_limit.as_millis() as u64,
        };
        let steps = reconcile(&world);
        // One step failing (Ray busy) does not hold up the others; the first error is reported.
        let mut first_error = None;
        for step in &steps {
            if let Err(e) = self.carry_out(step) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(steps), Err)
    }

    fn submissions(&mut self) -> Result<Vec<Submission>, RayError> {
        let now = Instant::now();
        let mut out = Vec::new();
        for j in self.client.jobs()? {
            let (Some(sid), Some(meta)) = (j.submission_id, j.metadata) else { continue };
            if meta.get("weave_instance") != Some(&self.instance) {
                continue; // another Weave's (or nobody's) job
            }
            let (Some(job), Some(uid)) = (meta.get("weave_job"), meta.get("weave_uid").and_then(|u| u.parse().ok()))
            else {
                continue;
            };
            let status = RayStatus::parse(&j.status);
            let since = |map: &mut BTreeMap<String, Instant>, yes: bool| {
                if yes {
                    now.duration_since(*map.entry(sid.clone()).or_insert(now)).as_millis() as u64
                } else {
                    map.remove(&sid);
                    0
                }
            };
            let terminal_for_ms = since(&mut self.terminal_since, status.terminal());
            let pending_for_ms = since(&mut self.pending_since, status == RayStatus::Pending);
            let message = j.message.unwrap_or_default();
            out.push(Submission {
                submission_id: sid,
                job: job.clone(),
                uid,
                status,
                message,
                terminal_for_ms,
                pending_for_ms,
            });
        }
        Ok(out)
    }

    fn plane_view(&self) -> (Vec<JobSnapshot>, BTreeSet<NodeId>, (u32, u32)) {
        let g = self.shared.lock();
        let placer = g.plane.placer();
        let jobs = g
            .plane
            .jobs()
            .map(|j| JobSnapshot {
                name: j.name.clone(),
                uid: j.id.0,
                running: j.state == JobState::Running,
                completed: j.state == JobState::Completed,
                launched_by_weave: j.submit.server.launch.is_some(),
                nodes: j
                    .decision
                    .as_ref()
                    .map(|d| d.rollout_nodes.iter().chain(&d.training_nodes).copied().collect())
                    .unwrap_or_default(),
            })
            .collect();
        // A node under a preemption notice (a Ray drain forwarded) is closed to placements but
        // still serves its jobs: it is not down until Ray reports it gone, and never brought
        // back up while the notice stands.
        let noticed: BTreeSet<NodeId> = g.plane.notices().map(|(n, _)| *n).collect();
        let down = placer.down_nodes().filter(|n| !noticed.contains(n)).collect();
        (jobs, down, placer.config().capacity.unwrap_or((0, 0)))
    }

    fn commit(&self, what: &str, make: impl FnOnce(u64) -> Record) {
        if let Err(e) = self.shared.commit(make) {
            // Refused records change nothing (e.g. the job ended meanwhile): say so, go on.
            eprintln!("weave ray backend: {what}: {e}");
        }
    }

    fn carry_out(&mut self, step: &Step) -> Result<(), RayError> {
        match step {
            Step::NodeDown { node, reason } => {
                eprintln!("weave ray backend: node {node} down: {reason}");
                let (node, reason) = (*node, reason.clone());
                self.commit("node down", |time_us| Record::NodeDown { time_us, node, reason });
            }
            Step::NodeUp { node } => {
                eprintln!("weave ray backend: node {node} back");
                let node = *node;
                self.commit("node up", |time_us| Record::NodeUp { time_us, node });
            }
            Step::Fail { job, reason } => {
                eprintln!("weave ray backend: job {job} failed: {reason}");
                let (job, reason) = (job.clone(), reason.clone());
                self.commit("job failure", |time_us| Record::Fail { time_us, job, reason });
            }
            Step::Launch { job, uid } => {
                let body = {
                    let g = self.shared.lock();
                    let Some(j) = g.plane.job(job).filter(|j| j.id.0 == *uid) else { return Ok(()) };
                    let token = self.shared.job_tokens.token(&j.tenant, &j.name, j.id.0);
                    submission_body(
                        &self.shared.job_tokens.instance_id(),
                        j,
                        &self.cfg.server_url,
                        &token,
                        &self.shared.cfg.cluster,
                    )
                };
                let Some(mut body) = body else { return Ok(()) };
                if let Some(pin) = &self.cfg.pin {
                    body["runtime_env"]["env_vars"]["WEAVE_RAY_PIN"] = serde_json::Value::String(pin.clone());
                }
                match self.client.submit(&body) {
                    Ok(()) => eprintln!("weave ray backend: launched {job} as {}", body["submission_id"]),
                    // Ray refused the submission itself (bad runtime environment, say): retrying
                    // cannot help, so the job fails with Ray's reason.
                    Err(RayError::Status { status, body: reason, .. }) if (400..500).contains(&status) => {
                        let (job, reason) = (job.clone(), format!("Ray refused the launch (HTTP {status}): {reason}"));
                        eprintln!("weave ray backend: job {job} failed: {reason}");
                        self.commit("launch refused", |time_us| Record::Fail { time_us, job, reason });
                    }
                    Err(e) => return Err(e),
                }
            }
            Step::Stop { submission_id } => {
                let now = Instant::now();
                let recent =
                    self.stop_sent.get(submission_id).is_some_and(|t| now.duration_since(*t) < Duration::from_secs(5));
                if !recent {
                    self.stop_sent.insert(submission_id.clone(), now);
                    self.client.stop(submission_id)?;
                    eprintln!("weave ray backend: stopping {submission_id}");
                }
            }
        }
        Ok(())
    }
}
