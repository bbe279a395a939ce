//! The waterfall: from the research prototype's numbers to ours, one assumption at a time.
//!
//! Row 0 is prototype mode (its own reference engine, [`crate::prototype`]). Every later row
//! is the faithful engine ([`crate::replay`]); row 1 runs it under all of the prototype's
//! assumptions (so rows 0 and 1 differ only by the engines: the prototype's 100-iteration
//! FIFO group simulation and analytic baselines against our event-level replay), and each
//! following row switches one assumption to ours, keeping the earlier ones. Every row
//! reports both accountings: cost at fixed lifetimes (the paper's headline compares these)
//! and iterations per dollar at fixed iterations (ours).
//!
//! The order: first what changes only the scoreboard (prices, the 32B asymmetry), then the
//! group limit, then the costs the hardware imposes in a deterministic world (switches, cold
//! starts, weight sync), then run-time variation, and last our mechanisms that answer them
//! (risk-aware admission, long-tail migration, co-located mode with consolidation), so each
//! mechanism is measured against the conditions it exists for.

use crate::prototype::{self, ProtoConfig};
use crate::workload::{prepare, MigrationShape, SimJob, SloSetting};
use crate::{replay, Policy, PolicyReport, SimConfig, VARIATION_SAMPLES};
use serde::Serialize;
use weave_core::{ClusterConfig, Slo};
use weave_model::{ProfileModel, RuntimeModel};
use weave_trace::Trace;

/// One assumption of the prototype replaced by ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    ClusterPrices,
    No32bAsymmetry,
    HostDram,
    WarmSwitches,
    ColdStarts,
    WeightSync,
    RuntimeVariation,
    RiskAwareAdmission,
    LongTailMigration,
    ColocatedAndConsolidation,
}

impl Step {
    /// The order the waterfall applies them in (see the module doc for why).
    pub const ORDER: [Step; 10] = [
        Step::ClusterPrices,
        Step::No32bAsymmetry,
        Step::HostDram,
        Step::WarmSwitches,
        Step::ColdStarts,
        Step::WeightSync,
        Step::RuntimeVariation,
        Step::RiskAwareAdmission,
        Step::LongTailMigration,
        Step::ColocatedAndConsolidation,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Step::ClusterPrices => "cluster-prices",
            Step::No32bAsymmetry => "no-32b-asymmetry",
            Step::HostDram => "host-dram",
            Step::WarmSwitches => "warm-switches",
            Step::ColdStarts => "cold-starts",
            Step::WeightSync => "weight-sync",
            Step::RuntimeVariation => "runtime-variation",
            Step::RiskAwareAdmission => "risk-aware-admission",
            Step::LongTailMigration => "long-tail-migration",
            Step::ColocatedAndConsolidation => "colocated-and-consolidation",
        }
    }

    /// What the step changes, prototype -> ours.
    pub fn change(self) -> &'static str {
        match self {
            Step::ClusterPrices => "unit prices (training node 1, rollout node 1/3) -> the cluster's $ per GPU-hour",
            Step::No32bAsymmetry => "32B jobs train on 1 node in groups but pay 2 in baselines -> 2 nodes everywhere",
            Step::HostDram => "at most N jobs per group -> host-DRAM residency decides",
            Step::WarmSwitches => "free phase switches -> warm switch costs (state from host DRAM)",
            Step::ColdStarts => "free first starts -> cold loads from storage at a job's first start",
            Step::WeightSync => "free weight updates -> weight sync across the inter-cluster link",
            Step::RuntimeVariation => "every iteration takes its estimate -> iterations drawn from the runtime model",
            Step::RiskAwareAdmission => "admission trusts the estimate -> admission bounds SLO risk under variation",
            Step::LongTailMigration => "no long-tail migration -> long-tail migration where it is absorbed",
            Step::ColocatedAndConsolidation => {
                "disaggregated groups only -> co-located mode as an option, consolidation"
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct WaterfallConfig {
    pub seed: u64,
    /// The prototype's group cap (its experiments use 5 and 3).
    pub max_group_size: usize,
}

impl Default for WaterfallConfig {
    fn default() -> Self {
        WaterfallConfig { seed: 1, max_group_size: 5 }
    }
}

/// One row: Weave under one set of assumptions against both baselines under the same.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `prototype-mode`, `engine-prototype-assumptions`, or the step just applied.
    pub step: String,
    pub change: String,
    /// Baseline cost over Weave's with every job alive for exactly its trace lifetime.
    pub cost_ratio_vs_solo_disagg: f64,
    pub cost_ratio_vs_colocated: f64,
    /// Weave's iterations per dollar over the baseline's with every job running its
    /// iterations (`None` for prototype mode, which has no such run).
    pub iterations_per_dollar_vs_solo_disagg: Option<f64>,
    pub iterations_per_dollar_vs_colocated: Option<f64>,
    /// Weave's SLO attainment at fixed iterations (prototype mode: jobs whose group period
    /// never reached their SLO, its own count).
    pub slo_met_jobs: f64,
    pub slo_met_iterations: Option<f64>,
    /// Where Weave's jobs started (at fixed iterations; prototype mode: its own).
    pub admissions: crate::metrics::Admissions,
}

/// Runs the whole waterfall on `trace`. Jobs without an SLO get the prototype's draw, so both
/// engines see the same SLOs.
pub fn run(trace: &Trace, cluster: &ClusterConfig, profile: &ProfileModel, cfg: &WaterfallConfig) -> Vec<Row> {
    let proto_cfg = ProtoConfig { max_members: cfg.max_group_size, seed: cfg.seed, ..ProtoConfig::default() };
    let trace = with_prototype_slos(trace, &proto_cfg);
    let mut rows = vec![prototype_row(&trace, profile, &proto_cfg)];
    for ours in 0..=Step::ORDER.len() {
        let setting = Setting { ours: &Step::ORDER[..ours], cfg };
        let (step, change) = match ours.checked_sub(1).map(|k| Step::ORDER[k]) {
            None => ("engine-prototype-assumptions", "the prototype's rules on the faithful engine"),
            Some(s) => (s.name(), s.change()),
        };
        rows.push(setting.row(&trace, cluster, profile, step.into(), change.into()));
    }
    rows
}

fn with_prototype_slos(trace: &Trace, cfg: &ProtoConfig) -> Trace {
    let mut t = trace.clone();
    for j in &mut t.jobs {
        if j.slo.is_none() {
            j.slo = Slo::new(prototype::job_slo(j, cfg)).ok();
        }
    }
    t
}

fn prototype_row(trace: &Trace, profile: &ProfileModel, cfg: &ProtoConfig) -> Row {
    let r = prototype::run(trace, profile, cfg);
    let weave = &r.policies[0];
    Row {
        step: "prototype-mode".into(),
        change: "the prototype's rules on its own reference engine".into(),
        cost_ratio_vs_solo_disagg: weave.cost_ratio_vs_solo_disagg,
        cost_ratio_vs_colocated: weave.cost_ratio_vs_colocated,
        iterations_per_dollar_vs_solo_disagg: None,
        iterations_per_dollar_vs_colocated: None,
        slo_met_jobs: 1.0 - r.slo_violations as f64 / r.jobs.max(1) as f64,
        slo_met_iterations: None,
        admissions: r.admissions,
    }
}

/// The faithful engine with the first steps switched to ours and the prototype's rules for
/// the rest.
struct Setting<'a> {
    ours: &'a [Step],
    cfg: &'a WaterfallConfig,
}

impl Setting<'_> {
    fn has(&self, s: Step) -> bool {
        self.ours.contains(&s)
    }

    fn row(&self, trace: &Trace, cluster: &ClusterConfig, profile: &ProfileModel, step: String, change: String) -> Row {
        let cluster = self.cluster(cluster);
        let base = self.jobs(trace, &cluster, profile);
        let grouped = self.grouped_jobs(&base);
        let weave = if self.has(Step::ColocatedAndConsolidation) { Policy::Weave } else { Policy::WeaveDisaggOnly };
        let run = |jobs: &[SimJob], policy: Policy, fixed_lifetimes: bool| -> PolicyReport {
            replay(jobs, &cluster, policy, &self.sim_config(fixed_lifetimes), &mut |_, _| {}).report
        };
        let cost = |r: &PolicyReport| r.total_cost.as_dollars();
        let (w, s, c) =
            (run(&grouped, weave, true), run(&base, Policy::SoloDisagg, true), run(&base, Policy::Colocated, true));
        let (wi, si, ci) =
            (run(&grouped, weave, false), run(&base, Policy::SoloDisagg, false), run(&base, Policy::Colocated, false));
        let per_dollar = |a: &PolicyReport, b: &PolicyReport| {
            (b.iterations_per_k_dollars > 0.0).then(|| a.iterations_per_k_dollars / b.iterations_per_k_dollars)
        };
        Row {
            step,
            change,
            cost_ratio_vs_solo_disagg: cost(&s) / cost(&w).max(1e-9),
            cost_ratio_vs_colocated: cost(&c) / cost(&w).max(1e-9),
            iterations_per_dollar_vs_solo_disagg: per_dollar(&wi, &si),
            iterations_per_dollar_vs_colocated: per_dollar(&wi, &ci),
            slo_met_jobs: wi.slo_attainment_jobs,
            slo_met_iterations: Some(wi.slo_attainment_iterations),
            admissions: wi.admissions,
        }
    }

    /// Unit prices keep the prototype's 1 : 1/3 per node (as 3 : 1, exact in micro-dollars;
    /// only ratios are reported). Without host DRAM, memory never limits a group.
    fn cluster(&self, cluster: &ClusterConfig) -> ClusterConfig {
        let mut c = cluster.clone();
        if !self.has(Step::ClusterPrices) {
            c.training.price_per_gpu_hour = 3.0 / c.training.gpus_per_node.max(1) as f64;
            c.rollout.price_per_gpu_hour = 1.0 / c.rollout.gpus_per_node.max(1) as f64;
        }
        if !self.has(Step::HostDram) {
            c.training.host_dram_gb = 1e9;
            c.rollout.host_dram_gb = 1e9;
        }
        c
    }

    fn sim_config(&self, fixed_lifetimes: bool) -> SimConfig {
        SimConfig {
            seed: self.cfg.seed,
            runtime: if self.has(Step::RuntimeVariation) {
                RuntimeModel::default()
            } else {
                RuntimeModel::deterministic()
            },
            admission_samples: if self.has(Step::RiskAwareAdmission) { VARIATION_SAMPLES } else { 0 },
            max_group_size: (!self.has(Step::HostDram)).then_some(self.cfg.max_group_size),
            fixed_lifetimes,
            ..SimConfig::default()
        }
    }

    /// Every policy's jobs: the costs not yet switched on are zero.
    fn jobs(&self, trace: &Trace, cluster: &ClusterConfig, profile: &ProfileModel) -> Vec<SimJob> {
        let mut jobs = prepare(trace, cluster, profile, SloSetting::default(), self.cfg.seed);
        for j in &mut jobs {
            if !self.has(Step::WarmSwitches) {
                j.place.costs.rollout_warm = weave_core::Micros::ZERO;
                j.place.costs.train_warm = weave_core::Micros::ZERO;
            }
            if !self.has(Step::ColdStarts) {
                j.place.costs.rollout_cold = weave_core::Micros::ZERO;
                j.place.costs.train_cold = weave_core::Micros::ZERO;
                j.cold_start = weave_core::Micros::ZERO;
            }
            if !self.has(Step::WeightSync) {
                j.sync = weave_core::Micros::ZERO;
                j.place.sync = weave_core::Micros::ZERO;
            }
            if !self.has(Step::LongTailMigration) {
                j.migration = MigrationShape::NONE;
            }
            // A solo iteration's length changed with the costs: so did the trace's iterations.
            j.iterations = weave_model::iterations(&j.spec, j.disagg.solo() + j.sync);
        }
        jobs
    }

    /// The jobs Weave's groups see: under the prototype's asymmetry a multi-node trainer
    /// trains on one node (same duration, its per-node state), while baselines pay its width.
    fn grouped_jobs(&self, base: &[SimJob]) -> Vec<SimJob> {
        let mut jobs = base.to_vec();
        if self.has(Step::No32bAsymmetry) {
            return jobs;
        }
        for j in jobs.iter_mut().filter(|j| j.spec.train_nodes > 1) {
            j.place.train_state_total = weave_core::Bytes(j.place.train_state_total.0 / j.spec.train_nodes as u64);
            j.spec.train_nodes = 1;
            j.place.train_width = 1;
        }
        jobs
    }
}
