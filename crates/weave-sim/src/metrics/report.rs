//! The report a replay produces: per policy, its cost and where the money went, GPU time per
//! pool, slowdowns and SLO attainment, and what its features did.

use super::{DynamicsCounts, JobOutcome, LendingCounts, SpotCounts};
use serde::{Deserialize, Serialize};
use weave_core::Money;

/// The environment tier in one replay: sandbox core-hours held and their price.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EnvironmentReport {
    pub core_hours: f64,
    pub cost: Money,
    /// Of the run's whole cost (GPUs and environment).
    pub share: f64,
}

/// Bounded-staleness jobs in one replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StalenessReport {
    /// Jobs that declared a staleness above 0.
    pub jobs: usize,
    /// Their mean declared staleness.
    pub mean_declared: f64,
    /// Their mean effective staleness: versions behind per rollout, averaged over jobs
    /// (0 when the policy ran them on-policy).
    pub mean_versions_behind: f64,
}

impl PolicyReport {
    /// Whether the replay had bounded-staleness jobs (the tables then show them).
    pub fn shows_staleness(&self) -> bool {
        self.staleness.is_some() || self.vs_solo_async.is_some()
    }

    /// The staleness table's cells for this policy: stale jobs, mean declared k, mean versions
    /// behind (the text table and the HTML report show the same).
    pub fn staleness_cells(&self) -> [String; 3] {
        match &self.staleness {
            Some(s) => {
                [s.jobs.to_string(), format!("{:.2}", s.mean_declared), format!("{:.2}", s.mean_versions_behind)]
            }
            None => ["0 (run on-policy)".into(), "-".into(), "-".into()],
        }
    }
}

impl StalenessReport {
    pub(super) fn of(jobs: &[JobOutcome]) -> Option<StalenessReport> {
        let stale: Vec<&JobOutcome> = jobs.iter().filter(|j| j.staleness > 0).collect();
        let n = stale.len();
        (n > 0).then(|| StalenessReport {
            jobs: n,
            mean_declared: stale.iter().map(|j| f64::from(j.staleness)).sum::<f64>() / n as f64,
            mean_versions_behind: stale.iter().map(|j| j.versions_behind.unwrap_or(0.0)).sum::<f64>() / n as f64,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolReport {
    pub gpu_hours: f64,
    pub busy_gpu_hours: f64,
    pub switching_gpu_hours: f64,
    /// Held but neither running a phase nor switching: the bubbles.
    pub idle_gpu_hours: f64,
    pub peak_gpus: u32,
    pub cost: Money,
}

/// Held GPU-time by what it did, both pools together.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MoneySplit {
    /// Running a phase.
    pub busy: SplitPart,
    /// Loading a job's state (warm from host DRAM or cold).
    pub switching: SplitPart,
    /// Rollout GPUs waiting for their own job's weight sync.
    pub sync: SplitPart,
    /// Idle in a group with a single member (fragmentation: a lone job's bubbles).
    pub idle_alone: SplitPart,
    /// Other idle: dependency bubbles and imbalance inside shared groups.
    pub idle_other: SplitPart,
    /// Rollout GPUs held while spot preemptions delayed their rollouts (spot runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_to_preemption: Option<SplitPart>,
    /// Rollout GPUs lent to another group's rollout, out of `busy` (lending runs only): what
    /// one group lent another borrowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lent: Option<SplitPart>,
}

/// Lending in one replay: what it did and what the lent GPU-time was worth.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct LendingReport {
    #[serde(flatten)]
    pub counts: LendingCounts,
    pub lent_gpu_hours: f64,
    pub loading_gpu_hours: f64,
    /// Rollout time the loans saved their borrowers, summed over rollouts.
    pub saved_rollout_hours: f64,
}

/// The spot tier in one replay: what it held and cost, and what its preemptions did.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpotReport {
    #[serde(flatten)]
    pub counts: SpotCounts,
    pub spot_gpu_hours: f64,
    pub spot_cost: Money,
    /// Rollout time preemptions added, summed over rollouts.
    pub delay_hours: f64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SplitPart {
    pub gpu_hours: f64,
    pub cost: Money,
    /// Share of the total cost.
    pub share: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Distribution {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// Of sorted values.
    pub fn of(sorted: &[f64]) -> Distribution {
        if sorted.is_empty() {
            return Distribution { mean: 0.0, p50: 0.0, p90: 0.0, p99: 0.0, max: 0.0 };
        }
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        Distribution {
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: sorted[sorted.len() - 1],
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Admissions {
    pub direct: u64,
    pub scaling: u64,
    pub isolated: u64,
    /// Weave's co-located option (the co-located baseline counts its jobs as isolated).
    #[serde(default)]
    pub colocated: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PolicyReport {
    pub policy: String,
    pub jobs: usize,
    /// Jobs that could not run at all (their state exceeds a node's host DRAM).
    pub rejected: u64,
    pub total_cost: Money,
    pub cost_per_hour: f64,
    pub makespan_h: f64,
    pub rollout: PoolReport,
    pub training: PoolReport,
    /// Where the money went: every GPU-hour held is in exactly one part.
    pub money: MoneySplit,
    pub iterations: u64,
    pub iterations_per_k_dollars: f64,
    pub slowdown: Distribution,
    pub slo_attainment_jobs: f64,
    pub slo_attainment_iterations: f64,
    pub admissions: Admissions,
    /// Cost if no allocated GPU ever idled or switched: busy GPU-time only.
    pub lower_bound_cost: Money,
    pub queued_jobs: usize,
    pub mean_queue_delay_h: f64,
    pub max_queue_delay_h: f64,
    /// Cost efficiency (iterations per $) relative to solo-disagg and colocated.
    pub vs_solo_disagg: Option<f64>,
    pub vs_colocated: Option<f64>,
    /// Against solo-async: only when some job declares bounded staleness (otherwise
    /// solo-async is solo-disagg).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_solo_async: Option<f64>,
    /// Jobs that declared bounded staleness and how far behind their rollouts ran (omitted
    /// when every job is on-policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<StalenessReport>,
    /// Flattened: the counters stay top-level fields of the JSON report.
    #[serde(flatten)]
    pub events: DynamicsCounts,
    /// GPUs held over time (at most 1,000 points; per-bucket maxima).
    pub gpu_series: Vec<SeriesPoint>,
    /// Every job's outcome (omitted from JSON when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_job: Vec<JobOutcome>,
    /// Per tenant, when tenants share fixed pools (omitted otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<crate::tenancy::TenantReport>,
    /// Backfill's promise checked in the run, when the policy backfills (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<crate::tenancy::BackfillReport>,
    /// Training GPU-hours charged busy for work preemptions threw away: busy, not useful
    /// (tenants sharing fixed pools; omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_training_gpu_hours: Option<f64>,
    /// The spot tier, when the cluster has one (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<SpotReport>,
    /// Lending idle rollout blocks across groups, when on (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending: Option<LendingReport>,
    /// The environment tier's sandboxes, when the run has agentic jobs (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentReport>,
    /// LoRA jobs that joined a running pack of their base, when packs grow (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_pack_joins: Option<u64>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub hours: f64,
    pub rollout_gpus: u32,
    pub training_gpus: u32,
}
