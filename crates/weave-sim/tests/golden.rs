//! Tiny traces with hand-checked costs (deterministic durations: every iteration takes the
//! conservative estimate). Prices: H20 node $14.80/h, H800 node $42.24/h. 7B switch times
//! [paper, Fig. 4]: rollout cold 38.8 s / warm 0.9 s, training cold 32.7 s / warm 4.1 s.
//! 7B topology-aware sync, 8 -> 8 GPUs: 14 GB / (8 x 2.5 GB/s x 0.85) + 0.06 s + 50 us
//! message latency = 0.883579 s.

use weave_core::{ClusterConfig, Money};
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{prepare, replay, Policy, SimConfig, SloSetting};
use weave_trace::{parse, Format, ReadOptions};

fn run(jsonl: &str, policy: Policy) -> weave_sim::PolicyReport {
    run_with(jsonl, policy, true)
}

/// `migration = false` takes long-tail migration out of every job (the paper's Weave without it).
fn run_with(jsonl: &str, policy: Policy, migration: bool) -> weave_sim::PolicyReport {
    let trace = parse(jsonl, Format::Jsonl, "golden", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), slo: SloSetting::default(), ..SimConfig::default() };
    let mut jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    if !migration {
        jobs.iter_mut().for_each(|j| j.migration = weave_sim::workload::MigrationShape::NONE);
    }
    replay(&jobs, &cluster, policy, &cfg, &mut |_, _| {}).report
}

const ONE_7B: &str = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10,"slo":1.5}"#;

#[test]
fn solo_disagg_one_job() {
    // Cold loads 38.8 + 32.7 s, then 10 x (133.8 + 112.8) s of phases and 9 syncs (none after
    // the last training): 2545.452211 s on one H20 and one H800 node.
    let r = run(ONE_7B, Policy::SoloDisagg);
    assert_eq!(r.total_cost, Money(40_331_276));
    assert!((r.makespan_h * 3600.0 - 2545.452211).abs() < 1e-6);
    assert_eq!(r.iterations, 10);
    assert_eq!(r.slowdown.max, 1.0);
    assert_eq!((r.rollout.peak_gpus, r.training.peak_gpus), (8, 8));
}

#[test]
fn colocated_one_job() {
    // Cold loads 71.5 s, then 10 x (159.6 + 98.2) s on one H800 node: 2649.5 s.
    let r = run(ONE_7B, Policy::Colocated);
    assert_eq!(r.total_cost, Money(31_087_467));
    assert_eq!(r.rollout.gpu_hours, 0.0);
    // Busy time excludes the cold loads: 2578 s x $42.24/h.
    assert_eq!(r.lower_bound_cost, Money(30_248_533));
}

#[test]
fn two_jobs_share_one_weave_group() {
    // Two 100 s / 100 s jobs of two iterations; the second packs directly into the first's
    // group. Timeline (s): A cold rollout switch 0-38.8, rollout 38.8-138.8; A cold training
    // switch 138.8-171.5, training 171.5-271.5; B cold rollout switch 138.8-177.6, rollout
    // 177.6-277.6; A warm rollout switch 277.6-278.5, rollout 278.5-378.5; B cold training
    // switch 277.6-310.3, training 310.3-410.3; A warm training switch 410.3-414.4, training
    // 414.4-514.4 (A done); B warm rollout switch 411.18-412.08, rollout -512.08; B warm
    // training switch 514.4-518.5, training 518.5-618.5 (B done). One H20 + one H800 node for
    // 618.5 s.
    let trace = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":2,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"b","arrival_s":0,"type":"7B_8k","iterations":2,"slo":2.0,"rollout_s":100,"train_s":100}"#;
    // The hand-derived timeline is the dispatcher's without long-tail migration.
    let r = run_with(trace, Policy::WeaveDisaggOnly, false);
    assert_eq!((r.admissions.isolated, r.admissions.direct, r.admissions.scaling), (1, 1, 0));
    assert!((r.makespan_h * 3600.0 - 618.5).abs() < 1e-6);
    assert_eq!(r.total_cost, Money(9_799_789));
    // With migration, a rollout on the shared node reaches its trigger at 60.3% of its length
    // (the request-level model's release point for 7B_8k); it hands the node on only if the
    // other job is waiting for it and the delay is absorbed (its own cycle with stragglers
    // 32.8% longer still fits the group's meta-iteration), and then its stragglers take
    // 32.8% longer. Here B trains 300 s (both allow 3x: A's period is ~2x its solo), so A's cycle (238.7 s with the delay) has room in
    // the ~408 s meta-iteration. A's first rollout finds B waiting (trigger at 99.1 s) and
    // hands r0 on; B's rollout runs beside A's stragglers until 171.6 s (slowed by their
    // share of the node), reaches its trigger at 203.3 s while A is still training, and
    // finishes in place; A's second rollout starts at 305.2 s while B trains. One release.
    let slack = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":2,"slo":3.0,"rollout_s":100,"train_s":100}
{"id":"b","arrival_s":0,"type":"7B_8k","iterations":2,"slo":3.0,"rollout_s":100,"train_s":300}"#;
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), events: true, ..SimConfig::default() };
    let parsed = parse(slack, Format::Jsonl, "golden", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let jobs = prepare(&parsed, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    let shape = jobs[0].migration;
    assert!((shape.release - 0.6026).abs() < 1e-3 && (shape.end - 1.3281).abs() < 1e-3, "{shape:?}");
    let mig = replay(&jobs, &cluster, Policy::WeaveDisaggOnly, &cfg, &mut |_, _| {});
    let released: Vec<_> =
        mig.events.iter().filter(|e| e.entry.kind == weave_dispatch::LogKind::RolloutReleased).collect();
    assert_eq!(released.len(), 1);
    assert_eq!(mig.report.events.long_tail_migrations, 1);
    assert_eq!(released[0].entry.job, weave_core::JobId(0));
    let starts: Vec<_> = mig
        .events
        .iter()
        .filter(|e| {
            e.entry.kind == weave_dispatch::LogKind::PhaseStart && e.entry.phase == Some(weave_dispatch::Phase::Rollout)
        })
        .collect();
    for rel in &released {
        let start = starts
            .iter()
            .rev()
            .find(|s| s.entry.job == rel.entry.job && s.entry.iteration == rel.entry.iteration)
            .unwrap();
        let took = rel.entry.time.0 - start.entry.time.0;
        assert!((took as f64 - 100e6 * shape.release).abs() <= 1.0 + 100e6 * shape.share, "released after {took} us");
    }
    let without = run_with(slack, Policy::WeaveDisaggOnly, false);
    assert_ne!(mig.report.makespan_h, without.makespan_h);
    // Where A's delay would lengthen the meta-iteration (the first pair: both cycles ~206 s),
    // nothing migrates.
    assert_eq!(run(trace, Policy::WeaveDisaggOnly).events.long_tail_migrations, 0);
    // Solo-disagg pays two pairs of nodes.
    let solo = run(trace, Policy::SoloDisagg);
    assert_eq!((solo.rollout.peak_gpus, solo.training.peak_gpus), (16, 16));
    assert!(solo.total_cost > r.total_cost);
}
