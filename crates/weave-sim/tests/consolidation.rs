//! Consolidation in the replay, on a small hand-checked scenario.

mod common;
use common::random_trace;

use weave_core::{ClusterConfig, JobId, Money};
use weave_dispatch::LogKind;
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{prepare, replay, Policy, SimConfig, SloSetting};
use weave_trace::{parse, Format, ReadOptions};

/// Four 7B jobs of 100 s rollouts and 100 s trainings arrive together. A runs co-located
/// (alone, cheapest per unit of work); B opens a group and A is to move onto its rollout node
/// (pairing on arrival). A holds its first rollout then, so it runs that iteration to the end
/// where it is (a move never throws work away) and moves when its first training ends. C,
/// arriving meanwhile, finds B alone and joins its rollout node directly; D runs co-located;
/// A's move still fits B's group (now three members) when it takes effect, and it goes.
#[test]
fn a_move_decided_mid_iteration_takes_effect_at_the_iterations_end() {
    let text = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":80,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"b","arrival_s":0,"type":"7B_8k","iterations":40,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"c","arrival_s":0,"type":"7B_8k","iterations":80,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"d","arrival_s":0,"type":"7B_8k","iterations":40,"slo":2.0,"rollout_s":100,"train_s":100}"#;
    let trace = parse(text, Format::Jsonl, "merge", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), events: true, ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), SloSetting::default(), 1);
    let r = replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {});
    let report = &r.report;
    let a = &report.admissions;
    assert_eq!((a.colocated, a.isolated, a.direct), (2, 1, 1), "{a:?}");
    assert_eq!(report.events.consolidation_moves, 1);
    // The estimate counted when the move was decided: a cold start (38.8 s rollout + 32.7 s
    // training) plus half a solo iteration ((100 + 100 + 0.883579) / 2 = 100.4417895 s,
    // truncated to microseconds) on the job's own nodes ($14.80 + $42.24 per hour):
    // 171.941789 s x $57.04/h = $2.724322.
    assert_eq!(report.events.consolidation_cost_estimate, Money(2_724_322));
    // Nothing is lost or redone in the count: every job ran all its iterations.
    assert_eq!(report.iterations, 240);
    let placements = |name: &str| report.per_job.iter().find(|j| j.name == name).unwrap().placements;
    assert_eq!((placements("a"), placements("b"), placements("c"), placements("d")), (2, 1, 1, 1));
    // A leaves its co-located group at the end of its first iteration there (its cold start
    // and one co-located iteration), never before, and joins B's group at that instant.
    let first_iteration = jobs[0].cold_start + jobs[0].colo.solo();
    let left = r.events.iter().find(|e| e.entry.kind == LogKind::Leave && e.entry.job == JobId(0)).expect("a left");
    assert_eq!(left.entry.time, first_iteration);
    let joined = r
        .events
        .iter()
        .find(|e| e.entry.kind == LogKind::Join && e.entry.job == JobId(0) && e.entry.time.0 > 0)
        .expect("a joins b's group");
    let b_group = r.events.iter().find(|e| e.entry.kind == LogKind::Join && e.entry.job == JobId(1)).unwrap().group;
    assert_eq!((joined.entry.time, joined.group), (first_iteration, b_group));
    // No phase of A's was started twice: nothing in flight was thrown away.
    let starts: Vec<_> = r
        .events
        .iter()
        .filter(|e| e.entry.kind == LogKind::PhaseStart && e.entry.job == JobId(0))
        .map(|e| (e.entry.phase, e.entry.iteration))
        .collect();
    let unique: std::collections::BTreeSet<_> = starts.iter().collect();
    assert_eq!(unique.len(), starts.len());
    // Every job within its SLO, the mover included.
    assert!(report.per_job.iter().all(|j| j.slowdown <= j.slo), "{:?}", report.per_job);
}

/// Fixed pools with a queue: a job that moves keeps the nodes it frees until it is placed
/// again (before, the queue took them and the mover waited for hours: 88% of jobs within
/// SLO on this workload, against 100% now).
#[test]
fn a_move_on_fixed_pools_never_loses_the_mover_its_place() {
    use weave_sim::CapacityMode;
    use weave_trace::{generate, GenConfig};
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig::default_workload(), &profile);
    let mut cluster = ClusterConfig::default();
    cluster.rollout.nodes = 8;
    cluster.training.nodes = 8;
    let cfg = SimConfig { capacity: CapacityMode::Fixed, ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let r = replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {}).report;
    assert!(r.queued_jobs > 0 && r.events.consolidation_moves > 0, "the scenario queues and moves");
    let late: Vec<_> = r.per_job.iter().filter(|j| j.slowdown > j.slo).map(|j| (&j.name, j.slowdown, j.slo)).collect();
    assert!(late.is_empty(), "{late:?}");
}

/// Phases started more than once, per job: each is work a move (the only way a job leaves
/// its place in these runs: no failures, no sharing) threw away and did again.
fn phases_redone(events: &[weave_sim::EventRecord]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    events
        .iter()
        .filter(|e| e.entry.kind == LogKind::PhaseStart)
        .filter(|e| !seen.insert((e.entry.job, e.entry.phase, e.entry.iteration)))
        .count()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

    /// Whatever the arrivals, full Weave's moves never throw a phase in flight away: no phase
    /// of any job starts twice, and every job runs all its iterations.
    #[test]
    fn no_move_ever_loses_a_phase_in_flight(
        jobs in proptest::collection::vec((0u32..3600, 0u8..4, 2u64..30, 0u8..10), 3..14),
        seed in 0u64..1000,
    ) {
        let trace = parse(&random_trace(&jobs), Format::Jsonl, "moves", &ReadOptions::default()).unwrap();
        let cluster = ClusterConfig::default();
        let cfg = SimConfig { seed, events: true, ..SimConfig::default() };
        let prepared = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
        let r = replay(&prepared, &cluster, Policy::Weave, &cfg, &mut |_, _| {});
        proptest::prop_assert_eq!(phases_redone(&r.events), 0);
        proptest::prop_assert_eq!(r.report.iterations, jobs.iter().map(|j| j.2).sum::<u64>());
    }
}

/// The property above is not vacuous: over seeded arrivals of the same shape, moves happen
/// (and the oracle is shown to count a phase started twice).
#[test]
fn moves_happen_in_such_runs_and_a_redone_phase_is_counted() {
    let mut moves = 0;
    for seed in 0..12u64 {
        let jobs: Vec<(u32, u8, u64, u8)> = (0..10u64)
            .map(|k| (((k * 331 + seed * 97) % 3600) as u32, (k % 4) as u8, 5 + (k + seed) % 20, (k % 10) as u8))
            .collect();
        let trace = parse(&random_trace(&jobs), Format::Jsonl, "moves", &ReadOptions::default()).unwrap();
        let cluster = ClusterConfig::default();
        let cfg = SimConfig { seed, events: true, ..SimConfig::default() };
        let prepared = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
        let r = replay(&prepared, &cluster, Policy::Weave, &cfg, &mut |_, _| {});
        assert_eq!(phases_redone(&r.events), 0, "seed {seed}");
        moves += r.report.events.consolidation_moves;
        if seed == 0 {
            let mut twice = r.events.clone();
            let start = twice.iter().find(|e| e.entry.kind == LogKind::PhaseStart).unwrap().clone();
            twice.push(start);
            assert_eq!(phases_redone(&twice), 1);
        }
    }
    assert!(moves > 0, "no move in any run: the property would check nothing");
}
