//! What admission is configured with and what it answers: the policy and its settings, a
//! decision (where a job goes and what it predicts), a departure, and why a job is refused.

use crate::group::Residency;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use weave_core::{ClusterConfig, GroupId, JobId, Micros, Money, NodeId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    Direct,
    Scaling,
    Isolated,
    /// On training nodes of its own, both phases there (the veRL way).
    Colocated,
}

/// Where [`Placer::admit_to`] puts a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Target {
    /// An existing group: on block `block`, or on a new block of the job's width.
    Group {
        group: GroupId,
        block: Option<u32>,
    },
    Isolated,
    Colocated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacePolicy {
    /// Cheapest feasible option.
    Weave,
    /// Uniformly random among feasible options (seeded).
    Random,
    /// The feasible group with the most idle training time; isolated if none.
    MostIdle,
    /// Always a new group of the job's own nodes (solo disaggregation).
    Isolate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacerConfig {
    pub policy: PlacePolicy,
    /// Whether rollout scaling is allowed (off for the `weave-no-scaling` ablation).
    pub scaling: bool,
    pub residency: Residency,
    /// Hourly price of one node of each pool.
    pub rollout_node_price: Money,
    pub train_node_price: Money,
    /// Hourly price of one preemptible rollout node, when the cluster has that tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_rollout_node_price: Option<Money>,
    /// Node limits per pool (`fixed` capacity mode); `None` rents on demand.
    pub capacity: Option<(u32, u32)>,
    /// The environment pool's cores, when the cluster has one. With fixed pools they are
    /// reserved for placed agentic jobs (see `PlaceJob::env_cores`); renting on demand, the
    /// environment is rented with the rest and never runs short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_cores: Option<f64>,
    /// Cores of one environment node: what the pool loses while that node is out of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_node_cores: Option<f64>,
    /// Skip saturated groups before any detailed search (the paper's rule; fast). When
    /// `false`, saturated groups are tried too, with the event-level timing model: cheaper
    /// placements at several times the decision cost (see `weave bench optimality`).
    pub skip_saturated: bool,
    /// Whether `weave` may run a job co-located on training nodes of its own when that is the
    /// cheapest feasible option per unit of work (off: the paper's disaggregated-only Weave).
    pub colocate: bool,
    pub seed: u64,
}

impl PlacerConfig {
    /// Hourly price of one rollout node on a job's tier.
    pub fn rollout_price(&self, spot: bool) -> Money {
        match self.spot_rollout_node_price {
            Some(p) if spot => p,
            _ => self.rollout_node_price,
        }
    }

    /// The elastic configuration for `cluster`: its host DRAM and its node prices.
    pub fn for_cluster(cluster: &ClusterConfig, policy: PlacePolicy, scaling: bool, resident: bool, seed: u64) -> Self {
        let hour = Micros(Micros::PER_HOUR);
        PlacerConfig {
            policy,
            scaling,
            residency: Residency {
                rollout_dram: cluster.rollout.host_dram(),
                train_dram: cluster.training.host_dram(),
                resident,
                max_members: None,
            },
            rollout_node_price: cluster.rollout.price().cost(cluster.rollout.gpus_per_node as u64, hour),
            train_node_price: cluster.training.price().cost(cluster.training.gpus_per_node as u64, hour),
            spot_rollout_node_price: cluster
                .rollout_spot
                .as_ref()
                .map(|s| s.plan_price().cost(cluster.rollout.gpus_per_node as u64, hour)),
            capacity: None,
            env_cores: cluster.env.as_ref().map(|e| e.cores()),
            env_node_cores: cluster.env.as_ref().map(|e| e.cores_per_node as f64),
            skip_saturated: true,
            colocate: false,
            seed,
        }
    }
}

/// Why a job was placed where it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub job: JobId,
    pub kind: DecisionKind,
    pub group: GroupId,
    pub block: u32,
    /// The job's rollout nodes and the group's training nodes.
    pub rollout_nodes: Vec<NodeId>,
    pub training_nodes: Vec<NodeId>,
    /// Nodes rented for this decision.
    pub new_nodes: Vec<NodeId>,
    /// Added cost per hour.
    pub marginal_cost_per_hour: Money,
    /// Predicted slowdown of every member after the decision (member order).
    pub slowdowns: Vec<(JobId, f64)>,
    pub meta_iteration: Micros,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Departure {
    pub job: JobId,
    pub group: GroupId,
    pub released: Vec<NodeId>,
    pub dissolved: bool,
}

#[derive(Debug, Error, PartialEq)]
pub enum PlaceError {
    #[error("job {0} is already placed")]
    AlreadyPlaced(JobId),
    #[error("job {0} is not placed")]
    NotPlaced(JobId),
    #[error("job {job} cannot run even alone: {reason}")]
    NeverFits { job: JobId, reason: String },
    #[error("job {0}: no capacity left in the fixed pools")]
    NoCapacity(JobId),
    #[error("job {job}: its sandboxes need {needs} environment cores; {held} of the pool's {pool} are held")]
    NoEnvironment { job: JobId, needs: f64, held: f64, pool: f64 },
    #[error("job {job} cannot go to {target}: it breaks residency or a member's SLO")]
    Infeasible { job: JobId, target: String },
}
