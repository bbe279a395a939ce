//! The waterfall's knobs on the faithful engine: fixed lifetimes, the group cap, and that its
//! two ends are prototype mode and the faithful model exactly.

use weave_core::ClusterConfig;
use weave_model::ProfileModel;
use weave_sim::prototype::{self, ProtoConfig};
use weave_sim::waterfall::{self, Step, WaterfallConfig};
use weave_sim::{prepare, replay, Policy, SimConfig, SloSetting};
use weave_trace::{parse, Format, ReadOptions, Trace};

/// Two 7B_8k jobs living [0, 3600) s and [1800, 5400) s, SLO 1.5 (see tests/prototype.rs).
const TWO_JOBS: &str = r#"{"id":"a","arrival_s":0,"type":"7B_8k","departure_s":3600,"slo":1.5}
{"id":"b","arrival_s":1800,"type":"7B_8k","departure_s":5400,"slo":1.5}"#;

fn trace(text: &str) -> Trace {
    parse(text, Format::Jsonl, "waterfall", &ReadOptions::default()).unwrap()
}

fn cost(policy: Policy, cfg: &SimConfig) -> (f64, weave_sim::PolicyReport) {
    let cluster = ClusterConfig::default();
    let jobs = prepare(&trace(TWO_JOBS), &cluster, &ProfileModel::builtin(), SloSetting::default(), 1);
    let r = replay(&jobs, &cluster, policy, cfg, &mut |_, _| {}).report;
    (r.total_cost.as_dollars(), r)
}

#[test]
fn at_fixed_lifetimes_baselines_pay_exactly_each_lifetime() {
    let cfg = SimConfig { fixed_lifetimes: true, ..SimConfig::default() };
    let c = ClusterConfig::default();
    let node_hour = |p: &weave_core::PoolConfig| p.price_per_gpu_hour * p.gpus_per_node as f64;
    // Each job holds one rollout and one training node for exactly one hour.
    let (solo, _) = cost(Policy::SoloDisagg, &cfg);
    assert!((solo - 2.0 * (node_hour(&c.rollout) + node_hour(&c.training))).abs() < 1e-3, "{solo}");
    let (colo, r) = cost(Policy::Colocated, &cfg);
    assert!((colo - 2.0 * node_hour(&c.training)).abs() < 1e-3, "{colo}");
    // One hour of 257.8 s co-located iterations after the cold start: fewer than the 14
    // solo iterations the trace's lifetime stands for.
    assert!(r.iterations > 0 && r.iterations < 28, "{}", r.iterations);
}

/// Without run-time variation the count is arithmetic: each job runs the whole co-located
/// iterations that fit its lifetime after its cold start (the last one cut), from the
/// model's own figures.
#[test]
fn at_fixed_lifetimes_colocated_runs_the_iterations_that_fit() {
    let cfg = SimConfig {
        fixed_lifetimes: true,
        runtime: weave_model::RuntimeModel::deterministic(),
        ..SimConfig::default()
    };
    let (_, r) = cost(Policy::Colocated, &cfg);
    let jobs = prepare(&trace(TWO_JOBS), &ClusterConfig::default(), &ProfileModel::builtin(), SloSetting::default(), 1);
    let fit = |j: &weave_sim::SimJob| (j.lifetime() - j.cold_start).0 / j.colo.solo().0;
    let expected: u64 = jobs.iter().map(fit).sum();
    assert_eq!(r.iterations, expected, "{:?}", jobs.iter().map(fit).collect::<Vec<_>>());
    assert_eq!(expected, 26, "two jobs of 13 whole 257.8 s iterations in an hour after a cold start");
}

#[test]
fn at_fixed_iterations_a_job_runs_all_its_iterations() {
    let (_, fixed_life) = cost(Policy::SoloDisagg, &SimConfig { fixed_lifetimes: true, ..SimConfig::default() });
    let (_, fixed_iters) = cost(Policy::SoloDisagg, &SimConfig::default());
    let jobs = prepare(&trace(TWO_JOBS), &ClusterConfig::default(), &ProfileModel::builtin(), SloSetting::default(), 1);
    assert_eq!(fixed_iters.iterations, jobs.iter().map(|j| j.iterations).sum::<u64>());
    // The lifetime includes the cold start and syncs the iteration count was derived with.
    assert!(fixed_life.iterations <= fixed_iters.iterations);
}

#[test]
fn a_group_cap_of_one_keeps_every_job_alone() {
    let (_, open) = cost(Policy::WeaveDisaggOnly, &SimConfig::default());
    assert_eq!(open.admissions.direct, 1, "b packs onto a's rollout node without a cap");
    let (_, capped) = cost(Policy::WeaveDisaggOnly, &SimConfig { max_group_size: Some(1), ..SimConfig::default() });
    assert_eq!((capped.admissions.direct, capped.admissions.scaling, capped.admissions.isolated), (0, 0, 2));
}

#[test]
fn the_waterfall_starts_at_prototype_mode_and_ends_at_the_faithful_model() {
    let t = trace(TWO_JOBS);
    let cluster = ClusterConfig::default();
    let profile = ProfileModel::builtin();
    let rows = waterfall::run(&t, &cluster, &profile, &WaterfallConfig::default());
    let names: Vec<&str> = rows.iter().map(|r| r.step.as_str()).collect();
    let mut expected = vec!["prototype-mode", "engine-prototype-assumptions"];
    expected.extend(Step::ORDER.iter().map(|s| s.name()));
    assert_eq!(names, expected);

    let proto = prototype::run(&t, &profile, &ProtoConfig::default());
    assert_eq!(rows[0].cost_ratio_vs_solo_disagg, proto.policies[0].cost_ratio_vs_solo_disagg);
    assert_eq!(rows[0].cost_ratio_vs_colocated, proto.policies[0].cost_ratio_vs_colocated);

    // Every assumption switched to ours is the plain faithful replay.
    let jobs = prepare(&t, &cluster, &profile, SloSetting::default(), 1);
    let eff = |p: Policy| replay(&jobs, &cluster, p, &SimConfig::default(), &mut |_, _| {}).report;
    let (w, s, c) = (eff(Policy::Weave), eff(Policy::SoloDisagg), eff(Policy::Colocated));
    let last = rows.last().unwrap();
    assert_eq!(
        last.iterations_per_dollar_vs_solo_disagg,
        Some(w.iterations_per_k_dollars / s.iterations_per_k_dollars)
    );
    assert_eq!(last.iterations_per_dollar_vs_colocated, Some(w.iterations_per_k_dollars / c.iterations_per_k_dollars));
    assert_eq!(last.slo_met_iterations, Some(w.slo_attainment_iterations));
}

#[test]
fn under_the_prototype_assumptions_the_engine_agrees_with_prototype_mode_by_hand() {
    // Both engines: b packs onto a's rollout node, one group of 1 + 1/3 node over [0, 5400) s;
    // solo-disagg pays 2 x 3600 s x 4/3, colocated 2 x 3600 s.
    let rows = waterfall::run(
        &trace(TWO_JOBS),
        &ClusterConfig::default(),
        &ProfileModel::builtin(),
        &WaterfallConfig::default(),
    );
    for r in &rows[..2] {
        assert!(
            (r.cost_ratio_vs_solo_disagg - 9600.0 / 7200.0).abs() < 1e-3,
            "{}: {}",
            r.step,
            r.cost_ratio_vs_solo_disagg
        );
        assert!((r.cost_ratio_vs_colocated - 1.0).abs() < 1e-3, "{}: {}", r.step, r.cost_ratio_vs_colocated);
    }
}

#[test]
fn the_32b_asymmetry_is_priced_until_its_step_removes_it() {
    // One 32B job: in a Weave group 2 rollout nodes + 1 training node (1 + 2/3 at unit prices),
    // in solo-disagg 2 of each (8/3): 1.6x for nothing; removed, Weave runs it as solo does.
    let t = trace(r#"{"id":"big","arrival_s":0,"type":"32B_8k","departure_s":7200,"slo":1.5}"#);
    let rows = waterfall::run(&t, &ClusterConfig::default(), &ProfileModel::builtin(), &WaterfallConfig::default());
    let at = |name: &str| rows.iter().find(|r| r.step == name).unwrap().cost_ratio_vs_solo_disagg;
    for step in ["prototype-mode", "engine-prototype-assumptions"] {
        assert!((at(step) - 1.6).abs() < 1e-3, "{step}: {}", at(step));
    }
    assert!((at("no-32b-asymmetry") - 1.0).abs() < 1e-3, "{}", at("no-32b-asymmetry"));
}
