//! A member that joins a running group must not lock round-robin into a serial order.

use weave_core::ClusterConfig;
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{prepare, replay, Policy, SimConfig, SloSetting};
use weave_trace::{parse, Format, ReadOptions};

/// x14 opens a group, a7 shares its rollout node, c8 gets a node of its own; x14 leaves and
/// b14 takes its place on the shared node at a moment (found by sweeping arrivals) when the
/// old join rule (a newcomer level with the least-served member) put b14 before a7 on the
/// training pool but after it on the rollout node: round-robin then ran rollout, rollout,
/// train, train (b14 1.58x, a7 2.11x against predicted 1.02x and 1.80x).
#[test]
fn a_late_joiner_keeps_the_pipelined_order() {
    let text = r#"{"id":"x14","arrival_s":0,"type":"14B_8k","iterations":40}
{"id":"a7","arrival_s":1,"type":"7B_8k","iterations":300}
{"id":"c8","arrival_s":2,"type":"8B_8k","iterations":300}
{"id":"b14","arrival_s":20481,"type":"14B_8k","iterations":100}"#;
    let trace = parse(text, Format::Jsonl, "join-order", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), SloSetting::Fixed { value: 1.9 }, 1);
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), ..SimConfig::default() };
    let r = replay(&jobs, &cluster, Policy::WeaveDisaggOnly, &cfg, &mut |_, _| {}).report;
    assert_eq!((r.admissions.direct, r.admissions.scaling, r.admissions.isolated), (2, 1, 1));
    for j in &r.per_job {
        assert!(
            j.slowdown <= j.predicted_slowdown * 1.02 + 1e-9,
            "{}: {} > predicted {}",
            j.name,
            j.slowdown,
            j.predicted_slowdown
        );
    }
}
