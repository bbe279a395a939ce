//! Agentic jobs in the replay: equal work across policies, the environment tier paid, the
//! same trajectories for every policy, sandboxes started ahead only where the policy is
//! three-tier, and the same bytes for the same seed.

use weave_core::agentic::EnvPoolConfig;
use weave_core::{ClusterConfig, Micros};
use weave_model::ProfileModel;
use weave_sim::workload::MigrationShape;
use weave_sim::{compare, prepare, Policy, SimConfig, SimJob};
use weave_trace::generate::{Arrivals, GenMode};
use weave_trace::{generate, AgenticClass, GenConfig};

fn agentic_trace(class: AgenticClass, jobs: usize, seed: u64) -> weave_trace::Trace {
    let profile = ProfileModel::builtin();
    let cfg = GenConfig {
        mode: GenMode::Agentic { class },
        jobs,
        arrivals: Arrivals::Poisson { per_hour: 3.0 },
        seed,
        lifetime_median_h: 4.0,
    };
    generate::generate(&cfg, &profile)
}

fn cluster() -> ClusterConfig {
    ClusterConfig { env: Some(EnvPoolConfig::of_nodes(8)), ..ClusterConfig::default() }
}

fn policies() -> Vec<Policy> {
    vec![Policy::Weave, Policy::WeaveTwoTier, Policy::SoloDisagg, Policy::Colocated, Policy::RollArt]
}

fn prepared(class: AgenticClass, jobs: usize, seed: u64) -> Vec<SimJob> {
    let trace = agentic_trace(class, jobs, seed);
    prepare(&trace, &cluster(), &ProfileModel::builtin(), SimConfig::default().slo, 1)
}

#[test]
fn every_policy_runs_the_same_work_and_pays_for_the_sandboxes() {
    let jobs = prepared(AgenticClass::Mixed, 24, 3);
    assert!(jobs.iter().all(|j| j.agentic.is_some()));
    let expected: u64 = jobs.iter().map(|j| j.iterations).sum();
    let cfg = SimConfig::default();
    for r in compare(&jobs, &cluster(), &policies(), &cfg, &mut |_, _, _| {}) {
        let r = &r.report;
        assert_eq!(r.iterations, expected, "{}", r.policy);
        let env = r.environment.as_ref().unwrap_or_else(|| panic!("{}: no environment report", r.policy));
        assert!(env.core_hours > 0.0 && env.cost.0 > 0, "{}: {env:?}", r.policy);
        // The environment's share and every GPU part add up to the whole bill.
        let m = &r.money;
        let parts = m.busy.share + m.switching.share + m.sync.share + m.idle_alone.share + m.idle_other.share;
        assert!((parts + env.share - 1.0).abs() < 1e-6, "{}: {parts} + {}", r.policy, env.share);
    }
}

#[test]
fn sandboxes_started_ahead_shorten_every_rollout_but_the_first_on_the_same_draws() {
    for j in prepared(AgenticClass::Swe, 6, 5) {
        let two = j.agentic.clone().unwrap();
        let three = j.three_tier();
        let early = three.agentic.as_ref().unwrap();
        assert!(early.started_early && !two.started_early);
        // The first iteration has no training before it: the same rollout either way.
        assert_eq!(two.rollout(0), early.rollout(0));
        for k in 1..20 {
            let (late, ahead) = (two.rollout(k), early.rollout(k));
            assert!(ahead.duration <= late.duration, "{k}: {ahead:?} {late:?}");
            assert_eq!((ahead.turns, ahead.generating), (late.turns, late.generating), "{k}");
        }
        // Admission plans with the shorter rollout, and the job's work is unchanged.
        assert!(three.disagg.rollout < j.disagg.rollout, "{:?} {:?}", three.disagg, j.disagg);
        assert_eq!(three.place.times, three.disagg);
        assert_eq!(three.iterations, j.iterations);
        // Only a three-tier policy hands a rollout's tail on (the request-level model does not
        // describe an agentic rollout, so the job as declared migrates nothing).
        assert_eq!(j.migration, MigrationShape::NONE);
        let m = three.migration;
        assert!(0.3 < m.release && m.release < 1.0 && m.end > 1.0 && m.end < 1.05 && m.share == 0.1, "{m:?}");
    }
}

#[test]
fn co_located_generation_speeds_up_but_the_environment_does_not() {
    for j in prepared(AgenticClass::Swe, 4, 2) {
        // The environment's waits and start-ups are the same on either GPU: the co-located
        // rollout is shorter only by the generation it speeds up.
        let gap = j.disagg.rollout.saturating_sub(j.colo.rollout);
        assert!(gap > Micros::ZERO && gap < j.disagg.rollout.scale(0.9), "{:?} {:?}", j.disagg, j.colo);
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let run = || {
        let jobs = prepared(AgenticClass::Mixed, 12, 4);
        let cfg = SimConfig { seed: 4, ..SimConfig::default() };
        let out = compare(&jobs, &cluster(), &policies(), &cfg, &mut |_, _, _| {});
        serde_json::to_string(&out.iter().map(|r| &r.report).collect::<Vec<_>>()).unwrap()
    };
    assert_eq!(run(), run());
}

/// With fixed pools every policy reserves the environment pool for agentic jobs' sandboxes,
/// the co-located baseline included: on a pool too small for all the jobs at once, jobs wait
/// that renting on demand would have started at once, and every job still runs its work.
#[test]
fn fixed_pools_reserve_the_environment_pool_in_every_policy() {
    let jobs = prepared(AgenticClass::Swe, 8, 7);
    let expected: u64 = jobs.iter().map(|j| j.iterations).sum();
    let mut small = cluster();
    // Room for one SWE job's sandboxes at a time, with all the GPU nodes there are.
    let one = jobs.iter().map(|j| j.spec.agentic.as_ref().unwrap().cores_held(j.spec.batch, 1)).fold(0.0, f64::max);
    small.env = Some(EnvPoolConfig { nodes: 1, cores_per_node: one as u32, ..EnvPoolConfig::of_nodes(1) });
    small.rollout.nodes = 1_000;
    small.training.nodes = 1_000;
    let fixed = SimConfig { capacity: weave_sim::CapacityMode::Fixed, ..SimConfig::default() };
    for r in compare(&jobs, &small, &policies(), &fixed, &mut |_, _, _| {}) {
        let r = &r.report;
        assert_eq!(r.iterations, expected, "{}", r.policy);
        assert!(r.queued_jobs > 0, "{}: nobody waited for the environment pool", r.policy);
    }
    small.env = Some(EnvPoolConfig::of_nodes(1_000));
    for r in compare(&jobs, &small, &policies(), &fixed, &mut |_, _, _| {}) {
        assert_eq!(r.report.queued_jobs, 0, "{}: waited with room to spare", r.report.policy);
    }
}
