//! What the backend should do, given what the control plane wants and what Ray reports. Pure
//! (no clock, no I/O): the backend loop gathers both views, calls [`reconcile`] and carries
//! the steps out, so every rule here is tested without a cluster.

use crate::inventory::Inventory;
use std::collections::BTreeSet;
use weave_core::{NodeId, Pool};

/// A job as the plane has it (its current admission).
#[derive(Clone, Debug, PartialEq)]
pub struct JobSnapshot {
    pub name: String,
    pub uid: u32,
    pub running: bool,
    /// Finished all its iterations in Weave (its Ray job is left to exit by itself).
    pub completed: bool,
    /// Whether Weave launches it (it has a launch spec).
    pub launched_by_weave: bool,
    pub nodes: Vec<NodeId>,
}

/// Ray's status of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RayStatus {
    Pending,
    Running,
    Stopped,
    Succeeded,
    Failed,
    Other(String),
}

impl RayStatus {
    pub fn parse(s: &str) -> RayStatus {
        match s {
            "PENDING" => RayStatus::Pending,
            "RUNNING" => RayStatus::Running,
            "STOPPED" => RayStatus::Stopped,
            "SUCCEEDED" => RayStatus::Succeeded,
            "FAILED" => RayStatus::Failed,
            other => RayStatus::Other(other.to_string()),
        }
    }

    pub fn terminal(&self) -> bool {
        matches!(self, RayStatus::Stopped | RayStatus::Succeeded | RayStatus::Failed)
    }
}

/// One Ray job submission Weave made (recognised by its metadata).
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    pub submission_id: String,
    pub job: String,
    pub uid: u32,
    pub status: RayStatus,
    pub message: String,
    /// How long (ms) the backend has seen it terminal; 0 if not terminal.
    pub terminal_for_ms: u64,
    /// How long (ms) the backend has seen it pending; 0 if not pending.
    pub pending_for_ms: u64,
}

/// The Ray submission id of admission `uid` of job `name` by the Weave store `instance`
/// (unique: uids are never reused within a store).
pub fn submission_id(instance: &str, name: &str, uid: u32) -> String {
    format!("weave-{instance}-{name}-{uid}")
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Ray lost the node (or never had it): take it out of service.
    NodeDown { node: NodeId, reason: String },
    /// Ray has the node alive again.
    NodeUp { node: NodeId },
    /// Submit the job to Ray.
    Launch { job: String, uid: u32 },
    /// Ray ended the job before Weave did: mark it failed.
    Fail { job: String, reason: String },
    /// Weave ended the job (cancel, failure, re-admission elsewhere) but Ray still runs it.
    Stop { submission_id: String },
}

pub struct World<'a> {
    /// This Weave's instance id (see `JobTokens::instance_id`).
    pub instance: &'a str,
    pub inventory: &'a Inventory,
    /// Fixed pool sizes (rollout, training): the nodes Weave may use.
    pub pools: (u32, u32),
    /// Nodes out of service (not those under a preemption notice: they serve their jobs until
    /// Ray reports them gone, and are then taken down like any lost node).
    pub down: &'a BTreeSet<NodeId>,
    pub jobs: &'a [JobSnapshot],
    pub submissions: &'a [Submission],
    /// How long a Ray job must stay terminal before it fails the Weave job: a node's death
    /// often kills the job's driver before Ray declares the node dead, and such a job must be
    /// re-admitted (node failure), not just failed.
    pub grace_ms: u64,
    /// A launch Ray keeps pending this long (its driver cannot start) fails the job.
    pub pending_limit_ms: u64,
}

pub fn reconcile(w: &World) -> Vec<Step> {
    let mut steps = node_steps(w);
    for j in w.jobs.iter().filter(|j| j.running && j.launched_by_weave) {
        let sid = submission_id(w.instance, &j.name, j.uid);
        // A node Ray lacks is going (or gone) down: its jobs are re-admitted, not launched.
        let on_lost_node = j.nodes.iter().any(|n| !w.inventory.alive(*n));
        match w.submissions.iter().find(|s| s.submission_id == sid) {
            // Never launch onto a node Ray lacks (Ray would leave it pending forever); the
            // node-down step fails and re-admits the job instead.
            None if !on_lost_node => steps.push(Step::Launch { job: j.name.clone(), uid: j.uid }),
            None => {}
            Some(s) if s.status.terminal() && !on_lost_node && s.terminal_for_ms >= w.grace_ms => {
                let message = if s.message.is_empty() { String::new() } else { format!(": {}", s.message) };
                steps.push(Step::Fail {
                    job: j.name.clone(),
                    reason: format!("Ray job {sid} ended {:?} before Weave finished it{message}", s.status),
                });
            }
            Some(s) if s.status == RayStatus::Pending && s.pending_for_ms >= w.pending_limit_ms => {
                steps.push(Step::Fail {
                    job: j.name.clone(),
                    reason: format!("Ray kept job {sid} pending for {} s", s.pending_for_ms / 1000),
                });
            }
            Some(_) => {}
        }
    }
    for s in w.submissions.iter().filter(|s| !s.status.terminal()) {
        let wanted = w.jobs.iter().any(|j| (j.running || j.completed) && j.name == s.job && j.uid == s.uid);
        if !wanted {
            steps.push(Step::Stop { submission_id: s.submission_id.clone() });
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
            match (w.inventory.missing_reason(node), w.down.contains(&node)) {
                (Some(reason), false) => steps.push(Step::NodeDown { node, reason }),
                (None, true) => steps.push(Step::NodeUp { node }),
                _ => {}
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{Inventory, Mapped};

    fn n(s: &str) -> NodeId {
        s.parse().unwrap()
    }

    fn inventory(alive: &[&str], dead: &[&str]) -> Inventory {
        let mut inv = Inventory::default();
        for (names, alive) in [(alive, true), (dead, false)] {
            for name in names {
                let m = Mapped { ray_id: name.to_string(), ip: "127.0.0.9".into(), alive, gpus: 8.0 };
                inv.nodes.insert(n(name), m);
            }
        }
        inv
    }

    fn job(name: &str, uid: u32, nodes: &[&str]) -> JobSnapshot {
        JobSnapshot {
            name: name.into(),
            uid,
            running: true,
            completed: false,
            launched_by_weave: true,
            nodes: nodes.iter().map(|s| n(s)).collect(),
        }
    }

    /// `for_ms`: how long it has been terminal (or pending).
    fn sub(job: &str, uid: u32, status: RayStatus, for_ms: u64) -> Submission {
        let pending = status == RayStatus::Pending;
        Submission {
            submission_id: submission_id("i", job, uid),
            job: job.into(),
            uid,
            status,
            message: "boom".into(),
            terminal_for_ms: if pending { 0 } else { for_ms },
            pending_for_ms: if pending { for_ms } else { 0 },
        }
    }

    fn run(inv: &Inventory, down: &[&str], jobs: &[JobSnapshot], subs: &[Submission]) -> Vec<Step> {
        let down: BTreeSet<NodeId> = down.iter().map(|s| n(s)).collect();
        reconcile(&World {
            instance: "i",
            inventory: inv,
            pools: (2, 1),
            down: &down,
            jobs,
            submissions: subs,
            grace_ms: 5000,
            pending_limit_ms: 60_000,
        })
    }

    #[test]
    fn admitted_jobs_launch_once_on_live_nodes_only() {
        let inv = inventory(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 1, &["r1", "t0"])];
        assert_eq!(
            run(&inv, &[], &jobs, &[sub("a", 0, RayStatus::Running, 0)]),
            vec![Step::Launch { job: "b".into(), uid: 1 }]
        );
        let mut external = job("c", 2, &["r0", "t0"]);
        external.launched_by_weave = false;
        assert_eq!(run(&inv, &[], &[external], &[]), vec![]);
    }

    #[test]
    fn a_lost_node_goes_down_and_its_jobs_wait_for_readmission() {
        let inv = inventory(&["r0", "t0"], &["r1"]);
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 1, &["r1", "t0"])];
        let subs = [sub("a", 0, RayStatus::Running, 0), sub("b", 1, RayStatus::Failed, 60_000)];
        let steps = run(&inv, &[], &jobs, &subs);
        assert_eq!(
            steps,
            vec![Step::NodeDown { node: n("r1"), reason: "Ray reports node r1 (127.0.0.9) dead".into() }]
        );
        // Once down (and b re-admitted as uid 2 on r0), the old submission is not failed again
        // and the new one launches; a node that comes back goes up.
        let jobs = [job("a", 0, &["r0", "t0"]), job("b", 2, &["r0", "t0"])];
        let inv = inventory(&["r0", "r1", "t0"], &[]);
        assert_eq!(
            run(&inv, &["r1"], &jobs, &subs),
            vec![Step::NodeUp { node: n("r1") }, Step::Launch { job: "b".into(), uid: 2 }]
        );
    }

    #[test]
    fn ray_failures_fail_the_job_after_the_grace_period() {
        let inv = inventory(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"])];
        assert_eq!(run(&inv, &[], &jobs, &[sub("a", 0, RayStatus::Failed, 100)]), vec![]);
        let steps = run(&inv, &[], &jobs, &[sub("a", 0, RayStatus::Failed, 5000)]);
        assert!(
            matches!(&steps[..], [Step::Fail { job, reason }] if job == "a" && reason.contains("boom")),
            "{steps:?}"
        );
    }

    #[test]
    fn a_launch_ray_keeps_pending_fails_after_the_limit() {
        let inv = inventory(&["r0", "r1", "t0"], &[]);
        let jobs = [job("a", 0, &["r0", "t0"])];
        assert_eq!(run(&inv, &[], &jobs, &[sub("a", 0, RayStatus::Pending, 59_000)]), vec![]);
        let steps = run(&inv, &[], &jobs, &[sub("a", 0, RayStatus::Pending, 60_000)]);
        assert!(matches!(&steps[..], [Step::Fail { reason, .. }] if reason.contains("pending for 60 s")), "{steps:?}");
    }

    #[test]
    fn jobs_weave_ended_are_stopped_in_ray() {
        let inv = inventory(&["r0", "r1", "t0"], &[]);
        let mut cancelled = job("a", 0, &["r0", "t0"]);
        cancelled.running = false;
        let subs = [
            sub("a", 0, RayStatus::Running, 0),
            sub("old", 3, RayStatus::Pending, 0),
            sub("x", 4, RayStatus::Stopped, 9),
        ];
        let steps = run(&inv, &[], &[cancelled], &subs);
        assert_eq!(
            steps,
            vec![
                Step::Stop { submission_id: "weave-i-a-0".into() },
                Step::Stop { submission_id: "weave-i-old-3".into() }
            ]
        );
    }

    #[test]
    fn missing_nodes_of_the_inventory_are_reported_down_once() {
        let inv = inventory(&["r0", "t0"], &[]);
        assert_eq!(
            run(&inv, &[], &[], &[]),
            vec![Step::NodeDown { node: n("r1"), reason: "no Ray node carries weave.io/node=r1".into() }]
        );
        assert_eq!(run(&inv, &["r1"], &[], &[]), vec![]);
    }
}
