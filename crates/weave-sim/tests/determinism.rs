//! The same seed gives byte-identical results; another seed changes the runtime draws.

use weave_core::ClusterConfig;
use weave_model::ProfileModel;
use weave_sim::{compare, prepare, Policy, SimConfig};
use weave_trace::{generate, GenConfig};

fn run(seed: u64) -> String {
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig { jobs: 30, ..GenConfig::default_workload() }, &profile);
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { seed, events: true, ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let replays = compare(&jobs, &cluster, &Policy::ALL, &cfg, &mut |_, _, _| {});
    let reports: Vec<_> = replays.iter().map(|r| &r.report).collect();
    let events: usize = replays.iter().map(|r| r.events.len()).sum();
    format!("{}\n{events}", serde_json::to_string(&reports).unwrap())
}

#[test]
fn same_seed_same_bytes() {
    assert_eq!(run(5), run(5));
}

#[test]
fn different_seed_different_draws() {
    assert_ne!(run(5), run(6));
}

#[test]
fn every_policy_completes_every_iteration() {
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig { jobs: 40, ..GenConfig::default_workload() }, &profile);
    let cluster = ClusterConfig::default();
    let cfg = SimConfig::default();
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let expected: u64 = jobs.iter().map(|j| j.iterations).sum();
    for r in compare(&jobs, &cluster, &Policy::ALL, &cfg, &mut |_, _, _| {}) {
        assert_eq!(r.report.iterations, expected, "{}", r.report.policy);
        assert_eq!(r.report.jobs, 40, "{}", r.report.policy);
        // Never cheaper than the GPUs it kept busy.
        assert!(r.report.total_cost >= r.report.lower_bound_cost, "{}", r.report.policy);
    }
}
