//! Trace replay: Weave against every baseline on the same jobs and the same random draws.
//!
//! The simulator drives the real placer ([`weave_place::Placer`]) and one real dispatcher
//! ([`weave_dispatch::Dispatcher`]) per group with simulated time. Admission uses each job's
//! conservative estimate; phases take the durations drawn from the job's own runtime stream,
//! so every policy sees the same draws for the same job.

pub mod agentic;
mod colocated;
pub mod dynamics;
mod engine;
pub mod lora;
pub mod metrics;
pub mod policy;
pub mod prototype;
pub mod spot_plan;
pub mod tenancy;
pub mod tenants_experiment;
pub mod waterfall;
pub mod workload;

pub use metrics::{DynamicsCounts, MoneySplit, PolicyReport, PoolReport, SplitPart};
pub use policy::Policy;
pub use workload::{prepare, with_staleness, SimJob, SloSetting};

use serde::Serialize;
use weave_core::ClusterConfig;
pub use weave_dispatch::EventRecord;
use weave_model::RuntimeModel;

/// Default allowed risk that a job's life slowdown exceeds its SLO.
pub const DEFAULT_SLO_EPSILON: f64 = weave_place::DEFAULT_SLO_EPSILON;

/// Sampled iterations per job that admission uses to see variation.
pub const VARIATION_SAMPLES: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CapacityMode {
    /// Nodes are rented when a group needs them and paid while held.
    Elastic,
    /// The configured pools are all there is; jobs that cannot be placed wait.
    Fixed,
}

#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    pub seed: u64,
    pub capacity: CapacityMode,
    pub slo: SloSetting,
    pub runtime: RuntimeModel,
    /// Keep the per-phase event log.
    pub events: bool,
    /// Skip saturated groups at admission (the paper's rule).
    pub skip_saturated: bool,
    /// Update each job's estimate from its measured iterations (median of the last 9).
    pub reestimate: bool,
    pub regroup: dynamics::Regroup,
    pub failures: Option<dynamics::Failures>,
    /// Consolidation limits for the policies that consolidate (see `Policy::colocate`).
    pub consolidation: dynamics::Consolidation,
    /// Admission's allowed risk that a job's life slowdown exceeds its SLO under run-time
    /// variation (`--slo-risk`).
    pub slo_epsilon: f64,
    /// The research prototype's accounting: every job leaves at the end of its trace lifetime,
    /// however many iterations it finished (`false`: every job runs its iterations, however
    /// long that takes).
    pub fixed_lifetimes: bool,
    /// The research prototype's group cap in place of the host-DRAM model (`None`: host DRAM
    /// limits groups).
    pub max_group_size: Option<usize>,
    /// Sampled iterations per job behind admission's SLO-risk check (0: admission trusts the
    /// estimate alone, as the research prototype does).
    pub admission_samples: usize,
    /// Tenants sharing fixed pools: quotas, priorities, preemption, backfill (`None`: one
    /// FIFO queue).
    pub share: Option<weave_place::share::SharePolicy>,
    /// Weave lends idle rollout blocks across groups (`--lending`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lending: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            capacity: CapacityMode::Elastic,
            slo: SloSetting::default(),
            runtime: RuntimeModel::default(),
            events: false,
            skip_saturated: true,
            reestimate: false,
            regroup: dynamics::Regroup::Static,
            failures: None,
            consolidation: dynamics::Consolidation::default(),
            slo_epsilon: DEFAULT_SLO_EPSILON,
            fixed_lifetimes: false,
            max_group_size: None,
            admission_samples: VARIATION_SAMPLES,
            share: None,
            lending: false,
        }
    }
}

pub struct Replay {
    pub report: PolicyReport,
    pub events: Vec<EventRecord>,
}

/// Replays prepared jobs under one policy.
pub fn replay(
    jobs: &[SimJob],
    cluster: &ClusterConfig,
    policy: Policy,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Replay {
    // The synchronous baselines run every job on-policy, judged against its on-policy solo run.
    let on_policy: Vec<SimJob>;
    let jobs = if !policy.runs_stale() && jobs.iter().any(|j| j.spec.staleness > 0) {
        on_policy = jobs.iter().map(SimJob::on_policy).collect();
        &on_policy[..]
    } else {
        jobs
    };
    let agentic: Vec<SimJob>;
    let jobs = if jobs.iter().any(|j| j.agentic.is_some()) {
        agentic = jobs
            .iter()
            .map(|j| match policy {
                Policy::RollArt => j.three_tier().at_least_stale(1),
                p if p.three_tier() => j.three_tier(),
                _ => j.clone(),
            })
            .collect();
        &agentic[..]
    } else {
        jobs
    };
    let full_model: Vec<SimJob>;
    let jobs = if policy == Policy::WeaveFullModel && jobs.iter().any(|j| j.spec.lora.is_some()) {
        full_model = jobs.iter().map(|j| j.as_full_model(cluster)).collect();
        &full_model[..]
    } else {
        jobs
    };
    let packed: Vec<SimJob>;
    // Packs grow only where a pack's whole life is counted in iterations (a fixed lifetime
    // would end a member with its pack).
    let growing_packs = policy.shares_bases() && lora::packs_apply(jobs, cfg) && !cfg.fixed_lifetimes;
    let jobs = if policy.shares_bases() && lora::packs_apply(jobs, cfg) {
        // Every replay's jobs are prepared with the built-in profile (no other is loaded).
        packed = lora::pack_jobs(jobs, &weave_model::ProfileModel::builtin(), cluster);
        &packed[..]
    } else {
        jobs
    };
    match policy.placement() {
        None => {
            let mut m = colocated::run(jobs, cluster, cfg);
            progress(jobs.len(), jobs.len());
            m.environment_core_hours = environment_core_hours(jobs, &m.jobs);
            Replay { report: m.report(policy.name(), cluster), events: Vec::new() }
        }
        Some(placement) => {
            let mut e = engine::Engine::new(jobs, cluster, cfg, placement, policy.scaling(), policy.resident())
                .with_migration(policy.migration())
                .with_colocation(policy.colocate())
                .with_spot(policy.migration())
                .with_lending(cfg.lending && policy.lends())
                .with_growing_packs(growing_packs);
            e.run(progress);
            e.metrics.environment_core_hours = environment_core_hours(jobs, &e.metrics.jobs);
            Replay { report: e.metrics.report(policy.name(), cluster), events: std::mem::take(&mut e.events) }
        }
    }
}

/// Sandbox core-hours the agentic jobs held for the iterations they ran (`None`: no agentic
/// job in the run).
fn environment_core_hours(jobs: &[SimJob], outcomes: &[metrics::JobOutcome]) -> Option<f64> {
    let per_iteration: std::collections::BTreeMap<&str, f64> =
        jobs.iter().filter_map(|j| Some((j.spec.name.as_str(), j.agentic.as_ref()?.core_hours()))).collect();
    if per_iteration.is_empty() {
        return None;
    }
    Some(outcomes.iter().filter_map(|o| Some(per_iteration.get(o.name.as_str())? * o.iterations as f64)).sum())
}

/// Replays several policies and fills in the cost-efficiency ratios against solo-disagg and
/// colocated (running those baselines too if they were not asked for).
pub fn compare(
    jobs: &[SimJob],
    cluster: &ClusterConfig,
    policies: &[Policy],
    cfg: &SimConfig,
    progress: &mut dyn FnMut(Policy, usize, usize),
) -> Vec<Replay> {
    let mut out: Vec<Replay> =
        policies.iter().map(|&p| replay(jobs, cluster, p, cfg, &mut |d, t| progress(p, d, t))).collect();
    let baseline = |p: Policy, out: &[Replay]| -> f64 {
        match out.iter().find(|r| r.report.policy == p.name()) {
            Some(r) => r.report.iterations_per_k_dollars,
            None => {
                replay(jobs, cluster, p, &SimConfig { events: false, ..cfg.clone() }, &mut |_, _| {})
                    .report
                    .iterations_per_k_dollars
            }
        }
    };
    let solo = baseline(Policy::SoloDisagg, &out);
    let colo = baseline(Policy::Colocated, &out);
    let solo_async = jobs.iter().any(|j| j.spec.staleness > 0).then(|| baseline(Policy::SoloAsync, &out));
    for r in &mut out {
        let e = r.report.iterations_per_k_dollars;
        r.report.vs_solo_disagg = (solo > 0.0).then(|| e / solo);
        r.report.vs_colocated = (colo > 0.0).then(|| e / colo);
        r.report.vs_solo_async = solo_async.filter(|&a| a > 0.0).map(|a| e / a);
    }
    out
}
