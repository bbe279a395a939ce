//! Drift, re-grouping and failures.

use weave_core::ClusterConfig;
use weave_model::{Drift, ProfileModel, RuntimeModel};
use weave_sim::dynamics::{assign_drift, DriftScenario, Failures, Regroup};
use weave_sim::{prepare, replay, Policy, SimConfig, SimJob};
use weave_trace::{generate, parse, Format, GenConfig, ReadOptions};

fn two_jobs() -> Vec<SimJob> {
    // A and B share a group; B's responses lengthen a lot over its life (its training time
    // triples), which pushes the shared training pool past A's SLO.
    let text = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":60,"slo":1.3,"rollout_s":100,"train_s":100}
{"id":"b","arrival_s":0,"type":"7B_8k","iterations":60,"slo":2.0,"rollout_s":100,"train_s":100}"#;
    let trace = parse(text, Format::Jsonl, "drift", &ReadOptions::default()).unwrap();
    let mut jobs = prepare(&trace, &ClusterConfig::default(), &ProfileModel::builtin(), Default::default(), 1);
    jobs[1].drift = Drift::Increasing { extent: 3.0 };
    jobs
}

fn attainment(r: &weave_sim::PolicyReport, name: &str) -> f64 {
    let j = r.per_job.iter().find(|j| j.name == name).unwrap();
    j.iterations_within_slo as f64 / j.iterations as f64
}

#[test]
fn incremental_regrouping_repairs_what_static_breaks() {
    let migrating = two_jobs();
    let mut jobs = migrating.clone();
    jobs.iter_mut().for_each(|j| j.migration = weave_sim::workload::MigrationShape::NONE);
    let cluster = ClusterConfig::default();
    let base = SimConfig { runtime: RuntimeModel::deterministic(), reestimate: true, ..SimConfig::default() };
    // The paper's Weave (disaggregated groups), first without long-tail migration, so the
    // scenario isolates re-grouping.
    let run = |policy: Policy, regroup: Regroup| {
        replay(&jobs, &cluster, policy, &SimConfig { regroup, ..base.clone() }, &mut |_, _| {}).report
    };
    let run_migrating = |policy: Policy, regroup: Regroup| {
        replay(&migrating, &cluster, policy, &SimConfig { regroup, ..base.clone() }, &mut |_, _| {}).report
    };
    let stat = run(Policy::WeaveDisaggOnly, Regroup::Static);
    let inc = run(Policy::WeaveDisaggOnly, Regroup::Incremental);
    let (a_static, a_inc) = (attainment(&stat, "a"), attainment(&inc, "a"));
    eprintln!("job a within SLO: static {a_static:.2}, incremental {a_inc:.2}; migrations {}", inc.events.migrations);
    assert_eq!(stat.admissions.direct, 1, "the two jobs start in one group");
    assert!(a_static < 0.75, "static should let a's SLO break: {a_static}");
    // 54 of 60: the iterations before the repair, and the first one after it, which pays the
    // move's cold start (a move the scheduler chose counts against the job's own SLO; only a
    // restart after a failure is excused, as a solo run would pay it too).
    assert!(a_inc >= 0.9, "incremental should repair it: {a_inc}");
    assert!(inc.events.migrations >= 1 && stat.events.migrations == 0);
    assert_eq!(inc.iterations, 120);
    // Periodic finds it too, later.
    let per = run(Policy::WeaveDisaggOnly, Regroup::periodic_default());
    assert!(attainment(&per, "a") > a_static, "periodic: {}", attainment(&per, "a"));
    // With long-tail migration on as well, incremental still beats static.
    let (stat_m, inc_m) = (
        run_migrating(Policy::WeaveDisaggOnly, Regroup::Static),
        run_migrating(Policy::WeaveDisaggOnly, Regroup::Incremental),
    );
    eprintln!("with migration: static {:.2}, incremental {:.2}", attainment(&stat_m, "a"), attainment(&inc_m, "a"));
    assert!(attainment(&inc_m, "a") > attainment(&stat_m, "a"));
}

#[test]
fn failures_never_lose_a_job() {
    let profile = ProfileModel::builtin();
    let trace =
        generate::generate(&GenConfig { jobs: 40, lifetime_median_h: 6.0, ..GenConfig::default_workload() }, &profile);
    let cluster = ClusterConfig::default();
    let mut jobs = prepare(&trace, &cluster, &profile, Default::default(), 3);
    assign_drift(&mut jobs, DriftScenario::Mixed { extent: 0.5 }, 3);
    let failures = Failures {
        job_rate_per_hour: 0.3,
        node_rate_per_hour: 0.02,
        checkpoint_every: 5,
        max_restarts: 4,
        ..Failures::default()
    };
    for regroup in [Regroup::Static, Regroup::periodic_default(), Regroup::Incremental] {
        let cfg = SimConfig { seed: 3, reestimate: true, regroup, failures: Some(failures), ..SimConfig::default() };
        let r = replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {}).report;
        assert_eq!(r.per_job.len(), jobs.len(), "{}: every job is reported", regroup.name());
        let mut complete = 0;
        for (o, j) in r.per_job.iter().map(|o| (o, jobs.iter().find(|j| j.spec.name == o.name).unwrap())) {
            if o.iterations == j.iterations {
                complete += 1;
            }
        }
        assert_eq!(
            complete as u64 + r.events.failed_permanently,
            jobs.len() as u64,
            "{}: each job completes or is reported failed",
            regroup.name()
        );
        assert!(r.events.restarts > 0 && r.events.lost_iterations > 0, "{}: failures were injected", regroup.name());
        eprintln!(
            "{}: {} restarts, {} node failures, {} lost iterations, {} failed permanently, {} migrations",
            regroup.name(),
            r.events.restarts,
            r.events.node_failures,
            r.events.lost_iterations,
            r.events.failed_permanently,
            r.events.migrations
        );
    }
}

#[test]
fn drift_assignment_is_seeded_and_smaller_models_drift_less() {
    let profile = ProfileModel::builtin();
    let trace = generate::generate(&GenConfig { jobs: 30, ..GenConfig::default_workload() }, &profile);
    let mut a = prepare(&trace, &ClusterConfig::default(), &profile, Default::default(), 1);
    let mut b = a.clone();
    assign_drift(&mut a, DriftScenario::Mixed { extent: 1.0 }, 9);
    assign_drift(&mut b, DriftScenario::Mixed { extent: 1.0 }, 9);
    assert!(a.iter().zip(&b).all(|(x, y)| x.drift == y.drift));
    assign_drift(&mut a, DriftScenario::Increasing { extent: 1.0 }, 9);
    for j in &a {
        let Drift::Increasing { extent } = j.drift else { panic!() };
        let b = j.spec.job_type.model.params_b();
        assert!(if b >= 14.0 { extent == 1.0 } else { extent < 1.0 }, "{b}B: {extent}");
    }
}
