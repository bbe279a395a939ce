//! Builds dispatcher and timing inputs from a job description and the calibrated models.

use crate::{MemberSpec, SwitchCosts, TimingMember};
use weave_core::{ClusterConfig, JobSpec, ModelSize, PhaseTimes, Pool};
use weave_model::{job_rollout_state, job_training_state, switch_time, sync_time_of, SwitchKind, SyncPlanKind};

/// Warm and cold switch times of a model on each pool [paper, Fig. 4].
pub fn switch_costs(model: ModelSize) -> SwitchCosts {
    SwitchCosts {
        rollout_warm: switch_time(model, Pool::Rollout, SwitchKind::Warm),
        rollout_cold: switch_time(model, Pool::Rollout, SwitchKind::Cold),
        train_warm: switch_time(model, Pool::Training, SwitchKind::Warm),
        train_cold: switch_time(model, Pool::Training, SwitchKind::Cold),
    }
}

/// Topology-aware weight-sync time of a job at its own widths: its bf16 weights, or a LoRA
/// job's adapter alone (its engine loaded the base once: veRL's `collect_lora_params` sends the
/// full weights only until the engine holds the base, then the adapter; SkyRL syncs LoRA alike).
pub fn job_sync(job: &JobSpec, cluster: &ClusterConfig) -> weave_core::Micros {
    let train_gpus = job.train_nodes * cluster.training.gpus_per_node.max(1);
    let rollout_gpus = job.rollout_nodes * cluster.rollout.gpus_per_node.max(1);
    let bytes = match job.lora.as_ref().filter(|l| l.base_model().is_some()) {
        Some(lora) => lora.engine_bytes(),
        None => weave_model::sync_bytes(job.job_type.model),
    };
    sync_time_of(bytes, SyncPlanKind::TopologyAware, train_gpus, rollout_gpus, &cluster.network)
}

/// The timing model's view of `job` with phase durations `times` on group-local `nodes`.
pub fn timing_member(
    job: &JobSpec,
    times: PhaseTimes,
    nodes: Vec<u32>,
    cluster: &ClusterConfig,
    resident: bool,
) -> TimingMember {
    TimingMember {
        job: job.id,
        rollout: times.rollout,
        train: times.train,
        nodes,
        costs: switch_costs(job.job_type.model),
        sync: job_sync(job, cluster),
        resident,
        staleness: job.staleness,
    }
}

/// The dispatcher's view of `job` joining on group-local `nodes`.
pub fn member_spec(
    job: &JobSpec,
    nodes: Vec<u32>,
    cluster: &ClusterConfig,
    resident: bool,
    iterations: Option<u64>,
) -> MemberSpec {
    MemberSpec {
        job: job.id,
        rollout_nodes: nodes,
        costs: switch_costs(job.job_type.model),
        sync: job_sync(job, cluster),
        resident,
        rollout_state: job_rollout_state(job),
        train_state: job_training_state(job),
        iterations,
        start_iteration: 0,
        staleness: job.staleness,
    }
}
