//! The placement view of a job: its conservative estimate and what it costs to host.

use serde::Serialize;
use weave_core::{Bytes, ClusterConfig, JobId, JobSpec, Micros, PhaseTimes};
use weave_dispatch::from_model::{job_sync, switch_costs};
use weave_dispatch::{SwitchCosts, TimingMember};
use weave_model::{job_rollout_state, job_training_state, Deployment, ProfileModel};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlaceJob {
    pub id: JobId,
    /// Conservative (max-length) per-iteration durations at the job's own widths.
    pub times: PhaseTimes,
    /// Allowed slowdown.
    pub slo: f64,
    pub rollout_width: u32,
    pub train_width: u32,
    /// Cached rollout state on each of its rollout nodes.
    pub rollout_state: Bytes,
    /// Cached training state summed over its training nodes (spread over the group's pool).
    pub train_state_total: Bytes,
    pub costs: SwitchCosts,
    pub sync: Micros,
    /// Per-iteration durations when the job runs co-located on its own training nodes (both
    /// phases there, the veRL way); `None` when no co-located profile is known.
    pub colo: Option<PhaseTimes>,
}

impl PlaceJob {
    /// Builds the placement view; `slo` is the job's own or the one the replay drew.
    pub fn from_spec(job: &JobSpec, slo: f64, profile: &ProfileModel, cluster: &ClusterConfig) -> PlaceJob {
        PlaceJob {
            id: job.id,
            times: profile.estimate(Deployment::Disagg, job).times,
            slo,
            rollout_width: job.rollout_nodes,
            train_width: job.train_nodes,
            rollout_state: job_rollout_state(job),
            train_state_total: Bytes(job_training_state(job).0 * job.train_nodes as u64),
            costs: switch_costs(job.job_type.model),
            sync: job_sync(job, cluster),
            colo: Some(profile.estimate(Deployment::Colo, job).times),
        }
    }

    /// Takes measured phase durations, which include the job's own switches and sync.
    pub fn set_measured(&mut self, times: PhaseTimes) {
        self.times = times;
        self.costs = SwitchCosts::default();
        self.sync = Micros(0);
    }

    /// Co-located iteration on its own training nodes (the weight update is local: no sync).
    pub fn colo_iteration(&self) -> Option<Micros> {
        self.colo.map(|c| c.rollout + c.train)
    }

    /// Solo iteration on its own nodes: no switches.
    pub fn solo(&self) -> Micros {
        self.times.rollout + self.times.train + self.sync
    }

    /// Training time on a pool of `pool_width` nodes (data parallelism adjusted to the pool).
    pub fn train_on(&self, pool_width: u32) -> Micros {
        Micros(self.times.train.0 * self.train_width as u64 / pool_width.max(1) as u64)
    }

    /// The timing model's view of this job in a group whose training pool has `pool_width`
    /// nodes, its rollout on block `block`.
    pub fn timing_member(&self, block: u32, pool_width: u32, resident: bool) -> TimingMember {
        TimingMember {
            job: self.id,
            rollout: self.times.rollout,
            train: self.train_on(pool_width),
            nodes: vec![block],
            costs: self.costs,
            sync: self.sync,
            resident,
        }
    }
}
