//! The preemptible rollout tier: a replayed preemption's cost worked out by hand, and a seeded
//! run that keeps Weave's promise and reproduces bit for bit.

use weave_core::{ClusterConfig, Micros, Preemption, SpotConfig};
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{compare, prepare, replay, Policy, PolicyReport, SimConfig, SloSetting};
use weave_trace::{generate, parse, Format, GenConfig, ReadOptions};

/// Spot at 60% off ($0.74 per H20 GPU-hour), 2-minute notice, replacement 5 minutes after it.
fn spot_cluster(rate: f64, trace: Vec<Preemption>) -> ClusterConfig {
    let base = ClusterConfig::default();
    let mut spot = SpotConfig::at_discount(&base.rollout, 0.6, rate);
    spot.trace = trace;
    ClusterConfig { rollout_spot: Some(spot), ..base }
}

fn one_job(policy: Policy, cluster: &ClusterConfig) -> PolicyReport {
    let jsonl = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10,"slo":1.5}"#;
    let trace = parse(jsonl, Format::Jsonl, "spot", &ReadOptions::default()).unwrap();
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), slo: SloSetting::default(), ..SimConfig::default() };
    let jobs = prepare(&trace, cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    replay(&jobs, cluster, policy, &cfg, &mut |_, _| {}).report
}

/// One 7B job (cold loads 38.8 + 32.7 s, rollouts 133.8 s, 2,545.452211 s in all on demand,
/// see `golden.rs`); its one rollout node is taken 100 s in, 61.2 s into its first rollout
/// with 72.6 s left. The node is its block's only one, so the rollout waits 180 s for the
/// replacement (asked for at the notice, 300 s to arrive) either way. Restarting redoes the
/// 61.2 s done (+241.2 s); moving the requests to the replacement costs the 20 s resume
/// (+200 s): the baseline restarts, Weave takes the cheaper.
#[test]
fn a_replayed_preemption_costs_what_the_model_says_moved_or_restarted() {
    let cluster = spot_cluster(0.0, vec![Preemption { node: 0, at: Micros::from_secs(100) }]);
    let on_demand = 2545.452211;
    for (policy, delay, moved) in [(Policy::SoloDisagg, 241.2, 0), (Policy::WeaveDisaggOnly, 200.0, 1)] {
        let r = one_job(policy, &cluster);
        let spot = r.spot.expect("a spot run reports its tier");
        assert_eq!((spot.counts.spot_jobs, spot.counts.preemptions, spot.counts.moved), (1, 1, moved), "{policy}");
        let seconds = r.makespan_h * 3600.0;
        assert!((seconds - (on_demand + delay)).abs() < 1e-5, "{policy}: {seconds}");
        assert!((spot.delay_hours * 3600.0 - delay).abs() < 1e-5, "{policy}");
        // The H20 node at the spot price ($5.92/h), the H800 at $42.24/h, for the whole run.
        let expected = seconds / 3600.0 * (0.74 * 8.0 + 42.24);
        assert!((r.total_cost.as_dollars() - expected).abs() < 1e-5, "{policy}: {}", r.total_cost.as_dollars());
        assert_eq!(r.slo_attainment_jobs, 1.0, "{policy}");
        let lost = r.money.lost_to_preemption.expect("lost to preemption");
        assert!((lost.gpu_hours - delay * 8.0 / 3600.0).abs() < 1e-6, "{policy}");
    }
}

fn thirty_jobs(cluster: &ClusterConfig) -> Vec<PolicyReport> {
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig { jobs: 30, ..GenConfig::default_workload() }, &profile);
    let cfg = SimConfig { seed: 3, ..SimConfig::default() };
    let jobs = prepare(&trace, cluster, &profile, cfg.slo, cfg.seed);
    let policies = [Policy::Weave, Policy::SoloDisagg];
    compare(&jobs, cluster, &policies, &cfg, &mut |_, _, _| {}).into_iter().map(|r| r.report).collect()
}

/// Preempted every two hours per node at 60% off: Weave keeps every job within its SLO, moves
/// most in-flight requests rather than restarting them, costs less per iteration than on
/// demand, and the run reproduces bit for bit.
#[test]
fn weave_on_spot_keeps_its_promise_and_reproduces() {
    let cluster = spot_cluster(0.5, Vec::new());
    let (a, b) = (thirty_jobs(&cluster), thirty_jobs(&cluster));
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
    let on_demand = thirty_jobs(&ClusterConfig::default());
    let per_iteration = |r: &PolicyReport| r.total_cost.as_dollars() / r.iterations as f64;
    let (weave, baseline) = (&a[0], &a[1]);
    let counts = weave.spot.expect("spot").counts;
    assert!(counts.preemptions > 0 && counts.spot_jobs > 0, "{counts:?}");
    assert!(counts.moved > counts.restarted, "{counts:?}");
    assert_eq!(weave.slo_attainment_jobs, 1.0);
    assert_eq!(weave.iterations, on_demand[0].iterations);
    assert!(per_iteration(weave) < per_iteration(&on_demand[0]));
    // The spot-only baseline restarts every preempted node's requests.
    let base = baseline.spot.expect("spot").counts;
    assert_eq!((base.moved, base.spot_jobs), (0, 30));
    assert!(base.restarted > 0);
}

/// A job whose SLO leaves no room for preemption delays stays on demand under Weave; the
/// spot-only baseline puts it on spot anyway (and misses its SLO when a preemption hits).
#[test]
fn a_job_without_slack_for_preemptions_stays_on_demand() {
    let jsonl = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10,"slo":1.0}"#;
    let trace = parse(jsonl, Format::Jsonl, "spot", &ReadOptions::default()).unwrap();
    let cluster = spot_cluster(0.0, vec![Preemption { node: 0, at: Micros::from_secs(100) }]);
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), slo: SloSetting::default(), ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    let run = |p| replay(&jobs, &cluster, p, &cfg, &mut |_, _| {}).report;
    let weave = run(Policy::WeaveDisaggOnly);
    let counts = weave.spot.expect("spot run").counts;
    assert_eq!((counts.spot_jobs, counts.preemptions, counts.unheld), (0, 0, 1));
    assert_eq!(weave.slo_attainment_jobs, 1.0);
    let baseline = run(Policy::SoloDisagg);
    assert_eq!(baseline.spot.expect("spot run").counts.preemptions, 1);
    assert_eq!(baseline.slo_attainment_jobs, 0.0);
}

/// A job that may use spot opens a spot group only while most recent arrivals could join it:
/// after three jobs whose SLOs leave no room for preemptions (gone before it arrives), the
/// job that would go on spot alone (see the first test) stays on demand; arriving first, it
/// goes on spot.
#[test]
fn a_job_opens_a_spot_group_only_where_the_tier_finds_partners() {
    let no_room =
        |id: &str, at: u64| format!(r#"{{"id":"{id}","arrival_s":{at},"type":"7B_8k","iterations":10,"slo":1.0}}"#);
    let roomy = |at: u64| format!(r#"{{"id":"a","arrival_s":{at},"type":"7B_8k","iterations":10,"slo":1.5}}"#);
    let cluster = spot_cluster(0.1, Vec::new());
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), slo: SloSetting::default(), ..SimConfig::default() };
    let spot_jobs = |lines: Vec<String>| {
        let trace = parse(&lines.join("\n"), Format::Jsonl, "spot", &ReadOptions::default()).unwrap();
        let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
        let r = replay(&jobs, &cluster, Policy::WeaveDisaggOnly, &cfg, &mut |_, _| {}).report;
        r.spot.expect("spot run").counts.spot_jobs
    };
    let later = vec![no_room("b", 0), no_room("c", 1), no_room("d", 2), roomy(100_000)];
    assert_eq!(spot_jobs(later), 0);
    let first = vec![roomy(0), no_room("b", 100_000), no_room("c", 100_001), no_room("d", 100_002)];
    assert_eq!(spot_jobs(first), 1);
}

/// Planning at one spot price and billing at another changes only the bill: Weave planned as
/// at 30% off and billed at 60% off does exactly the work of the run at 30% off, on the same
/// spot GPU-hours, and costs that run's bill with its spot hours re-priced. This is what lets
/// `weave sweep spot` recommend a shallower plan at a deeper discount (`spot_plan`).
#[test]
fn a_plan_made_at_one_spot_price_runs_the_same_at_another_and_only_its_bill_changes() {
    let base = ClusterConfig::default();
    let at = |plan: f64, billed: f64| {
        let mut spot = SpotConfig::at_discount(&base.rollout, billed, 0.125);
        spot.plan_price_per_gpu_hour = Some(base.rollout.price_per_gpu_hour * (1.0 - plan));
        ClusterConfig { rollout_spot: Some(spot), ..base.clone() }
    };
    let planned = &thirty_jobs(&at(0.3, 0.3))[0];
    let moved = &thirty_jobs(&at(0.3, 0.6))[0];
    let (p, m) = (planned.spot.expect("spot"), moved.spot.expect("spot"));
    assert!(p.counts.spot_jobs > 0, "{:?}", p.counts);
    assert_eq!((m.counts, m.spot_gpu_hours, moved.iterations), (p.counts, p.spot_gpu_hours, planned.iterations));
    assert_eq!(moved.makespan_h, planned.makespan_h);
    let rebilled = weave_sim::spot_plan::RunFigures::of(planned).dollars_at(base.rollout.price_per_gpu_hour * 0.4);
    assert!((moved.total_cost.as_dollars() - rebilled).abs() < 0.01, "{} vs {rebilled}", moved.total_cost.as_dollars());
    // Planned at its own price, the run at 60% off chooses differently.
    let own = &thirty_jobs(&at(0.6, 0.6))[0];
    assert_ne!(own.spot.expect("spot").spot_gpu_hours, p.spot_gpu_hours);
}
