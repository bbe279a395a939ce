//! The backend loop: every poll, read the manager's nodes and launches, read the plane,
//! [`reconcile`], and carry the steps out: node losses, drains and job failures become
//! durable control-plane records (through the same check -> append -> apply path as API
//! requests), launches and stops become the driver's calls.

use crate::driver::{ClusterDriver, DriverError, LaunchStatus, Listed, NodeHealth};
use crate::env::{job_nodes, launch_request};
use crate::reconcile::{launch_id, reconcile, JobSnapshot, Seen, Step, World};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weave_core::{NodeId, Pool};
use weave_server::plane::{JobState, Record};
use weave_server::Shared;

/// How long a node the manager drains serves its jobs under Weave's notice before Weave takes
/// it out of service (sooner if the manager reports it gone), unless configured otherwise
/// ([`BackendConfig::drain_notice`]): time for the jobs on it to checkpoint and be placed
/// elsewhere.
pub const DRAIN_NOTICE: Duration = Duration::from_secs(120);

#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// The server's URL as launched jobs reach it.
    pub server_url: String,
    pub poll: Duration,
    /// See [`World::grace_ms`].
    pub grace: Duration,
    /// See [`World::pending_limit_ms`].
    pub pending_limit: Duration,
    /// A draining node's notice ([`DRAIN_NOTICE`] by default).
    pub drain_notice: Duration,
}

/// The plane's side of a round.
struct PlaneView {
    jobs: Vec<JobSnapshot>,
    down: BTreeSet<NodeId>,
    noticed: BTreeSet<NodeId>,
    pools: (u32, u32),
}

pub struct Backend {
    driver: Box<dyn ClusterDriver>,
    shared: Arc<Shared>,
    cfg: BackendConfig,
    /// This Weave's instance id (its launches carry it).
    instance: String,
    /// When each launch was first seen ended, and first seen pending.
    ended_since: BTreeMap<String, Instant>,
    pending_since: BTreeMap<String, Instant>,
    /// When a stop was last sent, so a slow stop is not re-sent every poll.
    stop_sent: BTreeMap<String, Instant>,
}

impl Backend {
    pub fn new(driver: Box<dyn ClusterDriver>, shared: Arc<Shared>, cfg: BackendConfig) -> Backend {
        let instance = shared.job_tokens.instance_id();
        Backend {
            driver,
            shared,
            cfg,
            instance,
            ended_since: BTreeMap::new(),
            pending_since: BTreeMap::new(),
            stop_sent: BTreeMap::new(),
        }
    }

    fn say(&self, what: std::fmt::Arguments) {
        eprintln!("weave {} backend: {what}", self.driver.cluster().to_lowercase());
    }

    /// Polls until `stop` is set. Errors are logged (once until they change) and retried: a
    /// manager that does not answer never marks anything down.
    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let mut last_error = None;
        while !stop.load(Ordering::Relaxed) {
            match self.tick() {
                Ok(_) => last_error = None,
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_ref() != Some(&msg) {
                        self.say(format_args!("{msg} (retrying)"));
                    }
                    last_error = Some(msg);
                }
            }
            std::thread::sleep(self.cfg.poll);
        }
    }

    /// One round; returns the steps taken.
    pub fn tick(&mut self) -> Result<Vec<Step>, DriverError> {
        let mut health = self.driver.nodes()?;
        let listed = self.driver.launches(&self.instance)?;
        let plane = self.plane_view();
        for node in pool_nodes(plane.pools) {
            health.entry(node).or_insert_with(|| NodeHealth::Gone(self.driver.missing_reason(node)));
        }
        let launches = self.seen(listed, &plane.jobs);
        let world = World {
            cluster: self.driver.cluster(),
            instance: &self.instance,
            health: &health,
            pools: plane.pools,
            down: &plane.down,
            noticed: &plane.noticed,
            jobs: &plane.jobs,
            launches: &launches,
            grace_ms: self.cfg.grace.as_millis() as u64,
            pending_limit_ms: self.cfg.pending_limit.as_millis() as u64,
        };
        let steps = reconcile(&world);
        // One step failing (the manager busy) does not hold up the others; the first error is
        // reported.
        let mut first_error = None;
        for step in &steps {
            if let Err(e) = self.carry_out(step) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(steps), Err)
    }

    /// The listed launches with how long each has been ended or pending, plus the running
    /// admissions launched (durably recorded) that the manager no longer lists: Slurm forgets
    /// an ended job after `MinJobAge`, and such a launch ended; it is never made again, across
    /// restarts of the server too.
    fn seen(&mut self, mut listed: Vec<Listed>, jobs: &[JobSnapshot]) -> Vec<Seen> {
        for j in jobs.iter().filter(|j| j.running && j.launched) {
            let id = launch_id(&self.instance, &j.name, j.uid);
            if !listed.iter().any(|l| l.launch_id == id) {
                let message = format!("{} no longer lists it", self.driver.cluster());
                let status = LaunchStatus::Ended("UNLISTED".into());
                listed.push(Listed { launch_id: id, job: j.name.clone(), uid: j.uid, status, message });
            }
        }
        let now = Instant::now();
        let since = |map: &mut BTreeMap<String, Instant>, id: &str, yes: bool| {
            if yes {
                now.duration_since(*map.entry(id.to_string()).or_insert(now)).as_millis() as u64
            } else {
                map.remove(id);
                0
            }
        };
        listed
            .into_iter()
            .map(|l| Seen {
                ended_for_ms: since(&mut self.ended_since, &l.launch_id, l.status.ended()),
                pending_for_ms: since(&mut self.pending_since, &l.launch_id, l.status == LaunchStatus::Pending),
                listed: l,
            })
            .collect()
    }

    fn plane_view(&self) -> PlaneView {
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
                launched: j.launched == Some(j.id.0),
                nodes: job_nodes(j),
            })
            .collect();
        // A node under a preemption notice is closed to placements but still serves its jobs:
        // it is not down until the manager reports it gone.
        let noticed: BTreeSet<NodeId> = g.plane.notices().map(|(n, _)| *n).collect();
        let down = placer.down_nodes().filter(|n| !noticed.contains(n)).collect();
        PlaneView { jobs, down, noticed, pools: placer.config().capacity.unwrap_or((0, 0)) }
    }

    fn commit(&self, what: &str, make: impl FnOnce(u64) -> Record) {
        if let Err(e) = self.shared.commit(make) {
            // Refused records change nothing (e.g. the job ended meanwhile): say so, go on.
            self.say(format_args!("{what}: {e}"));
        }
    }

    fn carry_out(&mut self, step: &Step) -> Result<(), DriverError> {
        match step {
            Step::NodeDown { node, reason } => {
                self.say(format_args!("node {node} down: {reason}"));
                let (node, reason) = (*node, reason.clone());
                self.commit("node down", |time_us| Record::NodeDown { time_us, node, reason });
            }
            Step::NodeUp { node } => {
                self.say(format_args!("node {node} back"));
                let node = *node;
                self.commit("node up", |time_us| Record::NodeUp { time_us, node });
            }
            Step::NodeNotice { node, reason } => {
                self.say(format_args!("node {node} draining: {reason}"));
                let (node, wait_us) = (*node, self.cfg.drain_notice.as_micros() as u64);
                let reason = format!("{} drains it: {reason}", self.driver.cluster());
                self.commit("drain notice", |time_us| Record::NodeNotice {
                    time_us,
                    node,
                    deadline_us: time_us + wait_us,
                    reason,
                });
            }
            Step::Fail { job, reason } => self.fail(job, reason.clone()),
            Step::Launch { job, uid } => self.launch(job, *uid)?,
            Step::Stop { launch_id } => {
                let now = Instant::now();
                let recent =
                    self.stop_sent.get(launch_id).is_some_and(|t| now.duration_since(*t) < Duration::from_secs(5));
                if !recent {
                    self.stop_sent.insert(launch_id.clone(), now);
                    self.driver.stop(launch_id)?;
                    self.say(format_args!("stopping {launch_id}"));
                }
            }
        }
        Ok(())
    }

    fn fail(&self, job: &str, reason: String) {
        self.say(format_args!("job {job} failed: {reason}"));
        let job = job.to_string();
        self.commit("job failure", |time_us| Record::Fail { time_us, job, reason });
    }

    fn launch(&mut self, job: &str, uid: u32) -> Result<(), DriverError> {
        let request = {
            let g = self.shared.lock();
            let Some(j) = g.plane.job(job).filter(|j| j.id.0 == uid) else { return Ok(()) };
            let token = self.shared.job_tokens.token(&j.tenant, &j.name, j.id.0);
            let cluster = &self.shared.cfg.cluster;
            let Some(request) = launch_request(&self.instance, j, &self.cfg.server_url, &token, cluster) else {
                return Ok(());
            };
            request
        };
        // Outside the plane's lock: a launch may take seconds, the gate must not wait on it.
        match self.driver.launch(&request) {
            Ok(()) => {
                self.say(format_args!("launched {job} as {}", request.id));
                let job = job.to_string();
                self.commit("launch record", |time_us| Record::Launched { time_us, job, admission: uid });
                Ok(())
            }
            // Retrying cannot help: the job fails with the manager's reason.
            Err(DriverError::Refused(why)) => {
                self.fail(job, format!("{} refused the launch: {why}", self.driver.cluster()));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

fn pool_nodes((rollout, training): (u32, u32)) -> impl Iterator<Item = NodeId> {
    let pool = |pool: Pool, size: u32| (0..size).map(move |index| NodeId { pool, index });
    pool(Pool::Rollout, rollout).chain(pool(Pool::Training, training))
}
