//! Small hand-computed groups with exact expected timelines.
//!
//! Events at the same instant are processed in (time, class, sequence) order with classes
//! training end < rollout end < sync end < training switch end < rollout switch end, so the
//! log order of same-instant starts follows from that rule. Zero-cost switches still appear
//! in the log: a pool changing hands is always recorded.

use weave_core::{JobId, Micros};
use weave_dispatch::timing::{closed_form, evaluate, run_group, simulate};
use weave_dispatch::{LogKind, SwitchCosts, TimingMember};

fn s(x: u64) -> Micros {
    Micros::from_secs(x)
}

fn member(job: u32, roll: u64, train: u64, nodes: &[u32]) -> TimingMember {
    TimingMember {
        job: JobId(job),
        rollout: s(roll),
        train: s(train),
        nodes: nodes.to_vec(),
        costs: SwitchCosts::default(),
        sync: Micros::ZERO,
        resident: true,
        staleness: 0,
    }
}

/// Phase and switch starts as `t=<s> <job> <what>`, for the first `n` entries.
fn timeline(members: &[TimingMember], iterations: u64, n: usize) -> Vec<String> {
    let names = ["A", "B", "C", "D"];
    run_group(members, iterations)
        .log
        .iter()
        .filter(|e| matches!(e.kind, LogKind::PhaseStart | LogKind::SwitchStart))
        .take(n)
        .map(|e| {
            let phase = match e.phase {
                Some(weave_dispatch::Phase::Rollout) => "rollout",
                _ => "train",
            };
            let what = match e.switch {
                Some(k) => format!("switch-{k:?}-{phase}").to_lowercase(),
                None => phase.to_string(),
            };
            format!("t={} {} {} {}", e.time.0 / 1_000_000, names[e.job.0 as usize], what, e.iteration)
        })
        .collect()
}

#[test]
fn two_balanced_jobs_sharing_everything_with_switch_and_sync_costs() {
    let costs = SwitchCosts { rollout_warm: s(1), rollout_cold: s(30), train_warm: s(4), train_cold: s(40) };
    let mk = |j| TimingMember { costs, sync: s(2), ..member(j, 100, 100, &[0]) };
    let g = [mk(0), mk(1)];
    let expected = [
        "t=0 A switch-cold-rollout 0",
        "t=30 A rollout 0",
        "t=130 A switch-cold-train 0",
        "t=130 B switch-cold-rollout 0",
        "t=160 B rollout 0",
        "t=170 A train 0",
        "t=270 B switch-cold-train 0",
        "t=272 A switch-warm-rollout 1",
        "t=273 A rollout 1",
        "t=310 B train 0",
        "t=410 A switch-warm-train 1",
        "t=412 B switch-warm-rollout 1",
        "t=413 B rollout 1",
        "t=414 A train 1",
        "t=514 B switch-warm-train 1",
        "t=516 A switch-warm-rollout 2",
        "t=517 A rollout 2",
        "t=518 B train 1",
    ];
    assert_eq!(timeline(&g, 6, expected.len()), expected);
    // Training-bound: 2 x (100 + 4 warm) = 208 s per meta-iteration; each member alone needs
    // 100 + 1 + 100 + 4 + 2 = 207 s, so the group is (just) saturated.
    assert!(closed_form(&g).is_none());
    let t = evaluate(&g);
    assert!(t.saturated);
    assert_eq!(t.t_load, s(208));
    assert_eq!(t.t_cycle, s(207));
    assert_eq!(t.meta_iteration, s(208));
    for m in &t.members {
        assert_eq!(m.solo, s(202));
        assert_eq!(m.coexec, s(208));
    }
}

#[test]
fn rollout_heavy_plus_training_heavy_on_separate_nodes() {
    // A: rollout-heavy on r0; B: training-heavy on r1. T_solo 400 and 300; training load 300.
    let g = [member(0, 300, 100, &[0]), member(1, 100, 200, &[1])];
    let expected = [
        "t=0 A switch-cold-rollout 0",
        "t=0 B switch-cold-rollout 0",
        "t=0 A rollout 0",
        "t=0 B rollout 0",
        "t=100 B switch-cold-train 0",
        "t=100 B train 0",
        "t=300 A switch-cold-train 0",
        "t=300 B rollout 1",
        "t=300 A train 0",
        "t=400 B switch-warm-train 1",
        "t=400 A rollout 1",
        "t=400 B train 1",
        "t=600 B rollout 2",
        "t=700 A switch-warm-train 1",
        "t=700 A train 1",
        "t=800 B switch-warm-train 2",
        "t=800 A rollout 2",
        "t=800 B train 2",
    ];
    assert_eq!(timeline(&g, 6, expected.len()), expected);
    let cf = closed_form(&g).expect("unsaturated");
    assert_eq!(cf.meta_iteration, s(400));
    assert_eq!(cf.t_load, s(300));
    let ev = simulate(&g, 24);
    assert_eq!(ev.meta_iteration, s(400));
    assert_eq!(ev.members[0].coexec, s(400));
    assert_eq!(ev.members[1].coexec, s(400));
    assert!((cf.members[1].slowdown - 4.0 / 3.0).abs() < 1e-9);
    // Training pool: 300 of 400 s busy.
    assert!((cf.pools[0].busy - 0.75).abs() < 1e-9);
    assert!((ev.pools[0].busy - 0.75).abs() < 1e-9, "{:?}", ev.pools);
}

#[test]
fn saturated_three_job_group() {
    let g = [member(0, 100, 100, &[0]), member(1, 100, 100, &[0]), member(2, 100, 100, &[0])];
    let starts: Vec<String> = timeline(&g, 6, 40).into_iter().filter(|l| !l.contains("switch")).take(12).collect();
    let expected = [
        "t=0 A rollout 0",
        "t=100 A train 0",
        "t=100 B rollout 0",
        "t=200 B train 0",
        "t=200 C rollout 0",
        "t=300 C train 0",
        "t=300 A rollout 1",
        "t=400 A train 1",
        "t=400 B rollout 1",
        "t=500 B train 1",
        "t=500 C rollout 1",
        "t=600 C train 1",
    ];
    assert_eq!(starts, expected);
    let t = evaluate(&g);
    assert!(t.saturated);
    assert_eq!(t.t_cycle, s(200));
    assert_eq!(t.t_load, s(300));
    assert_eq!(t.meta_iteration, s(300));
    assert!(t.members.iter().all(|m| (m.slowdown - 1.5).abs() < 1e-9));
    assert!(t.pools.iter().all(|p| (p.busy - 1.0).abs() < 1e-9), "{:?}", t.pools);
}
