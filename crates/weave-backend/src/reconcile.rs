//! What the backend should do, given what the control plane wants and what the cluster
//! manager reports. Pure (no clock, no I/O): the loop ([`crate::Backend`]) gathers both views,
//! calls [`reconcile`] and carries the steps out, so every rule here is tested without a
//! cluster.

use crate::driver::{LaunchStatus, Listed, NodeHealth};
use std::collections::{BTreeMap, BTreeSet};
use weave_core::{NodeId, Pool};

/// A job as the plane has it (its current admission).
#[derive(Clone, Debug, PartialEq)]
pub struct JobSnapshot {
    pub name: String,
    pub uid: u32,
    pub running: bool,
    /// Finished all its iterations in Weave (its launch is left to exit by itself).
    pub completed: bool,
    /// Whether Weave launches it (it has a launch spec).
    pub launched_by_weave: bool,
    /// Whether this admission was launched (a durable `Record::Launched`).
    pub launched: bool,
    pub nodes: Vec<NodeId>,
}

/// The launch id of admission `uid` of job `name` by the Weave store `instance` (unique: uids
/// are never reused within a store). Ray's submission id, Slurm's job name.
pub fn launch_id(instance: &str, name: &str, uid: u32) -> String {
    format!("weave-{instance}-{name}-{uid}")
}

/// The job and uid a launch id names, if it is one of `instance`'s (job names may hold `-`;
/// the uid is what follows the last).
pub fn parse_launch_id(instance: &str, id: &str) -> Option<(String, u32)> {
    let rest = id.strip_prefix("weave-")?.strip_prefix(instance)?.strip_prefix('-')?;
    let (job, uid) = rest.rsplit_once('-')?;
    if job.is_empty() {
        return None;
    }
    Some((job.to_string(), uid.parse().ok()?))
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The manager lost the node (or never had it): take it out of service.
    NodeDown { node: NodeId, reason: String },
    /// The manager has the node in service again.
    NodeUp { node: NodeId },
    /// The manager is draining the node: a preemption notice.
    NodeNotice { node: NodeId, reason: String },
    /// Launch the job's admission.
    Launch { job: String, uid: u32 },
    /// The launch ended (or stalled) before Weave finished the job: mark it failed.
    Fail { job: String, reason: String },
    /// Weave ended the admission (cancel, failure, re-admission elsewhere) but its launch runs.
    Stop { launch_id: String },
}

/// A listed launch with how long the loop has seen it ended (or pending).
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub listed: Listed,
    /// How long (ms) it has been seen ended; 0 if it is not.
    pub ended_for_ms: u64,
    /// How long (ms) it has been seen pending; 0 if it is not.
    pub pending_for_ms: u64,
}

pub struct World<'a> {
    /// "Ray", "Slurm": how reasons name the manager.
    pub cluster: &'a str,
    /// This Weave's instance id (see `JobTokens::instance_id`).
    pub instance: &'a str,
    /// Every node of the pools, with its health (a node the manager lacks is `Gone`).
    pub health: &'a BTreeMap<NodeId, NodeHealth>,
    /// Fixed pool sizes (rollout, training): the nodes Weave may use.
    pub pools: (u32, u32),
    /// Nodes out of service in the plane.
    pub down: &'a BTreeSet<NodeId>,
    /// Nodes under a preemption notice in the plane. They serve their jobs until the manager
    /// reports them gone and are never brought back up here (a notice may come from the API).
    pub noticed: &'a BTreeSet<NodeId>,
    pub jobs: &'a [JobSnapshot],
    pub launches: &'a [Seen],
    /// How long a launch must stay ended before it fails the Weave job: a node's death often
    /// ends the job's processes before the manager declares the node lost, and such a job must
    /// be re-admitted (node failure), not just failed.
    pub grace_ms: u64,
    /// A launch the manager keeps pending this long (it cannot start) fails the job.
    pub pending_limit_ms: u64,
}

impl World<'_> {
    fn up(&self, node: NodeId) -> bool {
        !matches!(self.health.get(&node), Some(NodeHealth::Gone(_)) | None)
    }
}

pub fn reconcile(w: &World) -> Vec<Step> {
    let mut steps = node_steps(w);
    for j in w.jobs.iter().filter(|j| j.running && j.launched_by_weave) {
        let id = launch_id(w.instance, &j.name, j.uid);
        // A node the manager lost is going (or gone) down: its jobs are re-admitted, not launched.
        let on_lost_node = j.nodes.iter().any(|n| !w.up(*n));
        let job = || j.name.clone();
        match w.launches.iter().find(|s| s.listed.launch_id == id) {
            // Never launch onto a lost node (the manager would keep it pending forever); the
            // node-down step fails and re-admits the job instead.
            None if !on_lost_node => steps.push(Step::Launch { job: job(), uid: j.uid }),
            None => {}
            Some(s) if s.listed.status.ended() && !on_lost_node && s.ended_for_ms >= w.grace_ms => {
                let LaunchStatus::Ended(how) = &s.listed.status else { continue };
                let message =
                    if s.listed.message.is_empty() { String::new() } else { format!(": {}", s.listed.message) };
                let reason = format!("{} job {id} ended {how} before Weave finished it{message}", w.cluster);
                steps.push(Step::Fail { job: job(), reason });
            }
            Some(s) if s.listed.status == LaunchStatus::Pending && s.pending_for_ms >= w.pending_limit_ms => {
                let reason = format!("{} kept job {id} pending for {} s", w.cluster, s.pending_for_ms / 1000);
                steps.push(Step::Fail { job: job(), reason });
            }
            Some(_) => {}
        }
    }
    for s in w.launches.iter().filter(|s| !s.listed.status.ended()) {
        let l = &s.listed;
        let wanted = w.jobs.iter().any(|j| (j.running || j.completed) && j.name == l.job && j.uid == l.uid);
        if !wanted {
            steps.push(Step::Stop { launch_id: l.launch_id.clone() });
        }
    }
    steps
}

fn node_steps(w: &World) -> Vec<Step> {
    let mut steps = Vec::new();
    let pools = [(Pool::Rollout, w.pools.0), (Pool::Training, w.pools.1)];
    for (pool, size) in pools {
        for index in 0..size {
            let node = NodeId { pool, index };
            let (down, noticed) = (w.down.contains(&node), w.noticed.contains(&node));
            match w.health.get(&node) {
                Some(NodeHealth::Gone(reason)) if !down => steps.push(Step::NodeDown { node, reason: reason.clone() }),
                None if !down => {
                    steps.push(Step::NodeDown { node, reason: format!("{} lists no node {node}", w.cluster) })
                }
                Some(NodeHealth::Up) if down && !noticed => steps.push(Step::NodeUp { node }),
                Some(NodeHealth::Draining(reason)) if !down && !noticed => {
                    steps.push(Step::NodeNotice { node, reason: reason.clone() })
                }
                _ => {}
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeId {
        s.parse().unwrap()
    }

    fn health(up: &[&str], gone: &[&str]) -> BTreeMap<NodeId, NodeHealth> {
        let mut h: BTreeMap<NodeId, NodeHealth> = up.iter().map(|s| (n(s), NodeHealth::Up)).collect();
        h.extend(gone.iter().map(|s| (n(s), NodeHealth::Gone(format!("node {s} dead")))));
        h
    }

    fn job(name: &str, uid: u32, nodes: &[&str]) -> JobSnapshot {
        JobSnapshot {
            name: name.into(),
            uid,
            running: true,
            completed: false,
            launched_by_weave: true,
            launched: false,
            nodes: nodes.iter().map(|s| n(s)).collect(),
        }
    }

    /// `for_ms`: how long it has been ended (or pending).
    fn seen(job: &str, uid: u32, status: LaunchStatus, for_ms: u64) -> Seen {
        let pending = status == LaunchStatus::Pending;
        let ended = status.ended();
        Seen {
            listed: Listed {
                launch_id: launch_id("i", job, uid),
                job: job.into(),
                uid,
                status,
                message: "boom".into(),
            },
            ended_for_ms: if ended { for_ms } else { 0 },
            pending_for_ms: if pending { for_ms } else { 0 },
        }
    }

    fn failed() -> LaunchStatus {
        LaunchStatus::Ended("FAILED".into())
    }

    fn run_noticed(
        h: &BTreeMap<NodeId, NodeHealth>,
        down: &[&str],
        noticed: &[&str],
        jobs: &[JobSnapshot],
        launches: &[Seen],
    ) -> Vec<Step> {
        let down: BTreeSet<NodeId> = down.iter().map(|s| n(s)).collect();
        let noticed: BTreeSet<NodeId> = noticed.iter().map(|s| n(s)).collect();
        reconcile(&World {
            cluster: "Ray",
            instance: "i",
            health: h,
            pools: (2, 1),
            down: &down,
            noticed: &noticed,
            jobs,
            launches,
            grace_ms: 5000,
            pending_limit_ms: 60_000,
        })
    }

    fn run(h: &BTreeMap<NodeId, NodeHealth>, down: &[&str], jobs: &[JobSnapshot], launches: &[Seen]) -> Vec<Step> {
        run_noticed(h, down, &[], jobs, launches)
    }

    #[test]
    fn launch_ids_name_the_instance_the_job_and_the_admission() {
        assert_eq!(launch_id("ab12", "sort-a", 7), "weave-ab12-sort-a-7");
        assert_eq!(parse_launch_id("ab12", "weave-ab12-sort-a-7"), Some(("sort-a".into(), 7)));
        for other in ["weave-cd34-sort-a-7", "weave-ab12--7", "weave-ab12-a-x", "slurm-job", "weave-ab12-"] {
            assert_eq!(parse_launch_id("ab12", other), None, "{other}");
        }
    }

    #[test]
    fn admitted_jobs_launch_once_on_live_nodes_only() {
        let h = health(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 1, &["r1", "t0"])];
        assert_eq!(
            run(&h, &[], &jobs, &[seen("a", 0, LaunchStatus::Running, 0)]),
            vec![Step::Launch { job: "b".into(), uid: 1 }]
        );
        let mut external = job("c", 2, &["r0", "t0"]);
        external.launched_by_weave = false;
        assert_eq!(run(&h, &[], &[external], &[]), vec![]);
    }

    #[test]
    fn a_lost_node_goes_down_and_its_jobs_wait_for_readmission() {
        let h = health(&["r0", "t0"], &["r1"]);
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 1, &["r1", "t0"])];
        let launches = [seen("a", 0, LaunchStatus::Running, 0), seen("b", 1, failed(), 60_000)];
        assert_eq!(
            run(&h, &[], &jobs, &launches),
            vec![Step::NodeDown { node: n("r1"), reason: "node r1 dead".into() }]
        );
        // Once down (and b re-admitted as uid 2 on r0), the old launch is not failed again and
        // the new one launches; a node that comes back goes up.
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 2, &["r0", "t0"])];
        let h = health(&["r0", "r1", "t0"], &[]);
        assert_eq!(
            run(&h, &["r1"], &jobs, &launches),
            vec![Step::NodeUp { node: n("r1") }, Step::Launch { job: "b".into(), uid: 2 }]
        );
    }

    #[test]
    fn ended_launches_fail_the_job_after_the_grace_period() {
        let h = health(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"])];
        assert_eq!(run(&h, &[], &jobs, &[seen("a", 0, failed(), 100)]), vec![]);
        let steps = run(&h, &[], &jobs, &[seen("a", 0, failed(), 5000)]);
        assert!(
            matches!(&steps[..], [Step::Fail { job, reason }]
                if job == "a" && reason == "Ray job weave-i-a-0 ended FAILED before Weave finished it: boom"),
            "{steps:?}"
        );
    }

    #[test]
    fn a_launch_kept_pending_fails_after_the_limit() {
        let h = health(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"])];
        assert_eq!(run(&h, &[], &jobs, &[seen("a", 0, LaunchStatus::Pending, 59_000)]), vec![]);
        let steps = run(&h, &[], &jobs, &[seen("a", 0, LaunchStatus::Pending, 60_000)]);
        assert!(matches!(&steps[..], [Step::Fail { reason, .. }] if reason.contains("pending for 60 s")), "{steps:?}");
    }

    #[test]
    fn jobs_weave_ended_are_stopped() {
        let h = health(&["r0", "r1", "t0"], &[]);
        let mut cancelled = job("a", 0, &["r0", "t0"]);
        cancelled.running = false;
        let launches = [
            seen("a", 0, LaunchStatus::Running, 0),
            seen("old", 3, LaunchStatus::Pending, 0),
            seen("x", 4, LaunchStatus::Ended("STOPPED".into()), 9),
        ];
        assert_eq!(
            run(&h, &[], &[cancelled], &launches),
            vec![Step::Stop { launch_id: "weave-i-a-0".into() }, Step::Stop { launch_id: "weave-i-old-3".into() }]
        );
    }

    #[test]
    fn missing_nodes_are_reported_down_once() {
        let h = health(&["r0", "t0"], &[]);
        assert_eq!(
            run(&h, &[], &[], &[]),
            vec![Step::NodeDown { node: n("r1"), reason: "Ray lists no node r1".into() }]
        );
        assert_eq!(run(&h, &["r1"], &[], &[]), vec![]);
    }

    #[test]
    fn a_draining_node_is_noticed_once_and_never_brought_back_while_noticed() {
        let mut h = health(&["r0", "t0"], &[]);
        h.insert(n("r1"), NodeHealth::Draining("maintenance".into()));
        assert_eq!(run(&h, &[], &[], &[]), vec![Step::NodeNotice { node: n("r1"), reason: "maintenance".into() }]);
        assert_eq!(run_noticed(&h, &[], &["r1"], &[], &[]), vec![]);
        // The drain done (the node drained: gone), it leaves service, notice or not.
        h.insert(n("r1"), NodeHealth::Gone("drained".into()));
        assert_eq!(
            run_noticed(&h, &[], &["r1"], &[], &[]),
            vec![Step::NodeDown { node: n("r1"), reason: "drained".into() }]
        );
        // A noticed node reported up (the notice came from the API) stays under its notice.
        h.insert(n("r1"), NodeHealth::Up);
        assert_eq!(run_noticed(&h, &[], &["r1"], &[], &[]), vec![]);
    }
}
