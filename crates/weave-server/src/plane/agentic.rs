//! An agentic job as placement sees it: its declared trajectories, not the profile's
//! single-turn rollout, with sandboxes started during the previous training (the replay's
//! three-tier planning, from the same model).

use super::PlaneError;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use weave_core::agentic::{AgenticSpec, EnvNodeId, EnvPoolConfig};
use weave_core::PhaseTimes;
use weave_place::PlaceJob;

/// Sampled rollouts behind an agentic job's plan (computed once per declaration: see
/// `weave_model::agentic::planned_rollouts`).
const PLAN_SAMPLES: u32 = 8;

/// Puts the model's rollouts in `place` (disaggregated and co-located), its training as the
/// profile gave it.
pub(super) fn plan(place: &mut PlaceJob, spec: &AgenticSpec, batch: u32) {
    let colo = place.colo.unwrap_or(place.times);
    let speed = colo.rollout.0 as f64 / place.times.rollout.0.max(1) as f64;
    let (rollout, colo_rollout) =
        weave_model::agentic::planned_rollouts(spec, batch, place.times.train, speed, (0, PLAN_SAMPLES));
    place.times.rollout = rollout;
    place.colo = place.colo.map(|c| PhaseTimes { rollout: colo_rollout, ..c });
}

/// What an agentic job holds of the environment pool at most (see
/// `AgenticSpec::sandboxes_held`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EnvironmentHold {
    pub sandboxes: u32,
    pub cores: f64,
    pub mem_gib: f64,
}

impl EnvironmentHold {
    pub fn of(spec: &AgenticSpec, batch: u32, staleness: u32) -> EnvironmentHold {
        let sandboxes = spec.sandboxes_held(batch, staleness);
        EnvironmentHold {
            sandboxes,
            cores: spec.cores_held(batch, staleness),
            mem_gib: sandboxes as f64 * spec.sandbox.mem_gib,
        }
    }

    fn add(self, o: EnvironmentHold) -> EnvironmentHold {
        EnvironmentHold {
            sandboxes: self.sandboxes.saturating_add(o.sandboxes),
            cores: self.cores + o.cores,
            mem_gib: self.mem_gib + o.mem_gib,
        }
    }
}

/// The environment pool and what the running agentic jobs hold of it. With fixed pools
/// placement reserves it (a job whose sandboxes do not fit waits in the queue); renting on
/// demand it does not, and `held` above the pool's cores says the pool must grow.
#[derive(Clone, Debug, Serialize)]
pub struct EnvironmentUse {
    pub pool: EnvPoolConfig,
    pub held: EnvironmentHold,
    pub agentic_jobs: u32,
    /// The pool's hourly price, all its cores (an owned pool is paid whether used or not).
    pub hourly_cost_dollars: f64,
    /// Its nodes out of service (`e0`, ...), and the cores of those in service.
    pub nodes_down: Vec<String>,
    pub cores_in_service: f64,
}

/// Environment measurements a job's rollout driver reports with a rollout's finish, in its
/// `meta.agentic`: `trajectories`, `turns` (all trajectories' turns), `env_s` (seconds its
/// environment steps took, summed) and `startup_s` (sandbox starts, summed). The recent ones
/// are kept per job; the job view shows their medians beside what the job declared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentSamples {
    /// (turns per trajectory, seconds per environment step, start-up seconds per trajectory).
    recent: VecDeque<(f64, f64, f64)>,
}

/// Rollouts' environment reports kept per job.
const ENV_SAMPLES_KEPT: usize = 9;

/// Above any real rollout: a report beyond it is not believed.
const ENV_REPORT_MAX: f64 = 1e12;

impl EnvironmentSamples {
    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }

    /// Keeps a rollout's report if it makes sense (non-negative finite figures, at least one
    /// trajectory and one turn); anything else is ignored, as for `switch_s`.
    pub(super) fn record(&mut self, meta: Option<&serde_json::Value>) {
        let Some(a) = meta.and_then(|m| m.get("agentic")) else { return };
        let num = |k: &str| a.get(k).and_then(serde_json::Value::as_f64).filter(|v| (0.0..ENV_REPORT_MAX).contains(v));
        let (Some(n), Some(turns), Some(env_s)) = (num("trajectories"), num("turns"), num("env_s")) else { return };
        if n < 1.0 || turns < 1.0 {
            return;
        }
        let startup = num("startup_s").unwrap_or(0.0);
        self.recent.push_back((turns / n, env_s / turns, startup / n));
        if self.recent.len() > ENV_SAMPLES_KEPT {
            self.recent.pop_front();
        }
    }

    /// The medians of what was reported: (turns per trajectory, seconds per environment step,
    /// start-up seconds per trajectory, rollouts reported).
    pub fn medians(&self) -> Option<(f64, f64, f64, usize)> {
        let median = |pick: fn(&(f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = self.recent.iter().map(pick).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        Some((median(|s| s.0)?, median(|s| s.1)?, median(|s| s.2)?, self.recent.len()))
    }
}

impl super::Plane {
    /// The environment pool (when the cluster has one) and what the running agentic jobs hold.
    pub fn environment(&self) -> Option<EnvironmentUse> {
        let pool = self.cluster.env.clone()?;
        let mut held = EnvironmentHold::default();
        let mut agentic_jobs = 0;
        for j in self.jobs().filter(|j| j.state == super::JobState::Running) {
            if let Some(a) = &j.spec.agentic {
                held = held.add(EnvironmentHold::of(a, j.spec.batch, j.gate.staleness));
                agentic_jobs += 1;
            }
        }
        let hourly_cost_dollars = pool.cores() * pool.price_per_vcpu_hour;
        let nodes_down: Vec<String> = (0..pool.nodes)
            .map(EnvNodeId)
            .filter(|n| self.placer.is_env_node_down(*n))
            .map(|n| n.to_string())
            .collect();
        let cores_in_service = pool.cores() - nodes_down.len() as f64 * pool.cores_per_node as f64;
        Some(EnvironmentUse { pool, held, agentic_jobs, hourly_cost_dollars, nodes_down, cores_in_service })
    }

    /// Checks an environment node's change: the pool has the node, fixed pools (its nodes are
    /// machines), and the node is in the state the change needs.
    pub(super) fn check_env_node(&self, node: EnvNodeId, down: bool) -> Result<(), PlaneError> {
        let invalid = |reason: String| Err(PlaneError::Invalid { field: "node".into(), reason });
        let Some(pool) = &self.cluster.env else {
            return invalid(format!("{node}: the cluster has no environment pool (`[env]` in its cluster file)"));
        };
        if self.placer.config().capacity.is_none() {
            return invalid("node failures need fixed-capacity pools (the elastic mode rents fresh nodes)".into());
        }
        if node.0 >= pool.nodes {
            return invalid(format!("{node} is not in the inventory ({} environment nodes)", pool.nodes));
        }
        match (down, self.placer.is_env_node_down(node)) {
            (true, true) => invalid(format!("{node} is already down")),
            (false, false) => invalid(format!("{node} is not down")),
            _ => Ok(()),
        }
    }

    /// An environment node leaves service (`reason`) or comes back (`None`). The agentic jobs
    /// running are told in the event (their drivers run the node's trajectories again on the
    /// nodes left: nothing of Weave's count is lost, so none is re-admitted); placement
    /// reserves from the nodes in service, so new agentic jobs wait for room.
    pub(super) fn env_node_change(&mut self, time_us: u64, node: EnvNodeId, reason: Option<&String>) {
        Arc::make_mut(&mut self.placer).set_env_node_down(node, reason.is_some());
        let jobs: Vec<&str> = self
            .jobs()
            .filter(|j| j.state == super::JobState::Running && j.spec.agentic.is_some())
            .map(|j| j.name.as_str())
            .collect();
        let mut meta = serde_json::json!({ "node": node.to_string(), "pool": "environment", "jobs": jobs });
        if let Some(r) = reason {
            meta["reason"] = r.as_str().into();
        }
        let kind = if reason.is_some() { "node-down" } else { "node-up" };
        self.event(super::PlaneEvent { meta: Some(meta), ..super::ev(time_us, "", kind, None, None, None) });
    }
}
