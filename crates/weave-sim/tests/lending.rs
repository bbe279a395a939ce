//! Lending idle rollout blocks across groups: one loan followed by hand, the lender never
//! delayed, and a seeded run that keeps every promise and reproduces bit for bit.

use weave_core::ClusterConfig;
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{compare, prepare, replay, Policy, PolicyReport, SimConfig, SloSetting};
use weave_trace::{generate, parse, Format, GenConfig, ReadOptions};

fn two_jobs(lending: bool) -> PolicyReport {
    // Job a (2 iterations) trains from 205.3 s to 318.1 s (cold loads 38.8 + 32.7 s, rollout
    // 133.8 s, training 112.8 s); b (1 iteration, SLO 1.0: a group of its own) arrives at
    // 180 s and starts its rollout at 218.8 s, while a's block waits for a's training.
    let jsonl = concat!(
        r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":2,"slo":1.0}"#,
        "\n",
        r#"{"id":"b","arrival_s":180,"type":"7B_8k","iterations":1,"slo":1.0}"#,
    );
    let trace = parse(jsonl, Format::Jsonl, "lending", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig {
        runtime: RuntimeModel::deterministic(),
        slo: SloSetting::default(),
        lending,
        ..SimConfig::default()
    };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    replay(&jobs, &cluster, Policy::WeaveDisaggOnly, &cfg, &mut |_, _| {}).report
}

/// b borrows a's block for its one rollout; its life (318.1 s without the loan) shortens by
/// exactly the rollout time the loan saved, and a, the lender, runs exactly as without it.
#[test]
fn one_loan_shortens_the_borrower_by_what_it_saved_and_leaves_the_lender_alone() {
    let (off, on) = (two_jobs(false), two_jobs(true));
    assert!(off.lending.is_none() && off.money.lent.is_none());
    let lending = on.lending.expect("a lending run reports it");
    let c = lending.counts;
    assert_eq!((c.loans, c.reclaimed_early, c.lender_delays), (1, 0, 0), "{c:?}");
    let saved = c.saved_us as f64 / 1e6;
    // The request-level model gives a shortening, and one no larger than the cheaper step can
    // give (a quarter of the rollout with the block doubled).
    assert!(saved > 0.0 && saved < 133.8 * 0.25, "{saved}");
    let job = |r: &PolicyReport, name: &str| r.per_job.iter().find(|j| j.name == name).cloned().unwrap();
    let (a_off, a_on) = (job(&off, "a"), job(&on, "a"));
    assert_eq!(a_off.slowdown, a_on.slowdown, "the lender is never delayed");
    let (b_off, b_on) = (job(&off, "b"), job(&on, "b"));
    assert!((b_off.slowdown - 1.0).abs() < 1e-9, "{}", b_off.slowdown);
    let life = 38.8 + 133.8 + 32.7 + 112.8;
    assert!((b_on.slowdown * life - (life - saved)).abs() < 1e-5, "{} {saved}", b_on.slowdown);
    // The lent GPU-time: 8 GPUs from the end of the loading to the end of b's rollout.
    assert!(lending.lent_gpu_hours > 0.0 && lending.lent_gpu_hours < 8.0 * 133.8 / 3600.0);
    assert_eq!(on.money.lent.expect("split").gpu_hours, lending.lent_gpu_hours);
    assert!(on.total_cost < off.total_cost, "{} vs {}", on.total_cost.as_dollars(), off.total_cost.as_dollars());
}

fn forty_jobs(lending: bool, seed: u64) -> Vec<PolicyReport> {
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig { jobs: 40, ..GenConfig::default_workload() }, &profile);
    let cfg = SimConfig { seed, lending, ..SimConfig::default() };
    let cluster = ClusterConfig::default();
    let jobs = prepare(&trace, &cluster, &profile, cfg.slo, cfg.seed);
    let policies = [Policy::Weave, Policy::SoloDisagg];
    compare(&jobs, &cluster, &policies, &cfg, &mut |_, _, _| {}).into_iter().map(|r| r.report).collect()
}

/// Lending on a generated workload: loans are made, no lender rollout ever finds its block
/// still lent, every job stays within its SLO, the baselines never lend, and the run
/// reproduces bit for bit.
#[test]
fn lending_keeps_every_promise_and_reproduces() {
    for seed in [1, 2] {
        let (a, b) = (forty_jobs(true, seed), forty_jobs(true, seed));
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        let c = a[0].lending.expect("weave lends").counts;
        assert!(c.loans > 0, "seed {seed}: {c:?}");
        assert_eq!(c.lender_delays, 0, "seed {seed}: {c:?}");
        assert_eq!(a[0].slo_attainment_jobs, 1.0, "seed {seed}");
        assert!(a[1].lending.is_none(), "the solo baseline never lends");
        let off = forty_jobs(false, seed);
        assert_eq!(a[0].iterations, off[0].iterations);
        assert_eq!(serde_json::to_string(&a[1]).unwrap(), serde_json::to_string(&off[1]).unwrap());
    }
}

/// A JSON Lines trace of jobs (arrival s, type, iterations, SLO in tenths above 1).
fn random_trace(jobs: &[(u32, u8, u64, u8)]) -> String {
    let types = ["7B_8k", "3B_8k", "14B_8k", "8B_32k"];
    jobs.iter()
        .enumerate()
        .map(|(i, (arrival, t, iterations, slo))| {
            format!(
                r#"{{"id":"j{i}","arrival_s":{arrival},"type":"{}","iterations":{iterations},"slo":{}}}"#,
                types[*t as usize % types.len()],
                1.0 + *slo as f64 / 10.0
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever the jobs, their timing and the run-time variation: no lender rollout ever
    /// finds its block still lent, every job runs all its iterations, and the same seed gives
    /// the same bytes.
    #[test]
    fn no_lender_is_ever_delayed(
        jobs in proptest::collection::vec((0u32..900, 0u8..4, 2u64..25, 0u8..10), 4..16),
        seed in 0u64..1000,
        policy in proptest::prelude::prop_oneof![
            proptest::prelude::Just(Policy::Weave),
            proptest::prelude::Just(Policy::WeaveDisaggOnly)
        ],
    ) {
        let trace = parse(&random_trace(&jobs), Format::Jsonl, "lending", &ReadOptions::default()).unwrap();
        let cluster = ClusterConfig::default();
        let cfg = SimConfig { seed, lending: true, ..SimConfig::default() };
        let prepared = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
        let run = || replay(&prepared, &cluster, policy, &cfg, &mut |_, _| {}).report;
        let r = run();
        let c = r.lending.expect("weave lends").counts;
        proptest::prop_assert_eq!(c.lender_delays, 0, "{:?}", c);
        let total: u64 = jobs.iter().map(|j| j.2).sum();
        proptest::prop_assert_eq!(r.iterations, total);
        proptest::prop_assert_eq!(serde_json::to_string(&r).unwrap(), serde_json::to_string(&run()).unwrap());
    }
}
