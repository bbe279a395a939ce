//! LoRA jobs in the replay: packs run every member's iterations exactly once and judge each
//! member on its own, the policies do equal work, and the same seed gives the same bytes.

use std::collections::BTreeMap;
use weave_core::ClusterConfig;
use weave_model::ProfileModel;
use weave_sim::{compare, prepare, replay, Policy, SimConfig, SimJob};
use weave_trace::generate::{Arrivals, GenMode};
use weave_trace::{generate, GenConfig};

fn lora_jobs(jobs: usize, seed: u64) -> Vec<SimJob> {
    let profile = ProfileModel::builtin();
    let cfg = GenConfig {
        mode: GenMode::Lora,
        jobs,
        arrivals: Arrivals::Poisson { per_hour: 20.0 },
        seed,
        lifetime_median_h: 1.0,
    };
    let trace = generate::generate(&cfg, &profile);
    prepare(&trace, &ClusterConfig::default(), &profile, SimConfig::default().slo, seed)
}

#[test]
fn every_member_of_a_pack_runs_its_iterations_once_and_is_judged_on_its_own() {
    let jobs = lora_jobs(300, 1);
    let packed = weave_sim::lora::pack_jobs(&jobs, &ProfileModel::builtin(), &ClusterConfig::default());
    assert!(packed.iter().any(|j| j.pack.is_some()), "the mix forms packs");
    let r = replay(&jobs, &ClusterConfig::default(), Policy::Weave, &SimConfig::default(), &mut |_, _| {});
    let declared: BTreeMap<&str, (u64, f64)> =
        jobs.iter().map(|j| (j.spec.name.as_str(), (j.iterations, j.slo))).collect();
    let outcomes = &r.report.per_job;
    assert_eq!(outcomes.len(), jobs.len());
    for o in outcomes {
        let (iterations, slo) = declared[o.name.as_str()];
        assert_eq!((o.iterations, o.slo), (iterations, slo), "{}", o.name);
        assert!(o.iterations_within_slo <= o.iterations && o.slowdown > 0.0, "{}", o.name);
    }
    let names: std::collections::BTreeSet<&str> = outcomes.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names.len(), jobs.len(), "each job once");
}

#[test]
fn the_lora_policies_do_equal_work_and_replay_to_the_same_bytes() {
    let jobs = lora_jobs(120, 2);
    let policies = [Policy::Weave, Policy::WeaveFullModel, Policy::SoloDisagg, Policy::Colocated];
    let run = || compare(&jobs, &ClusterConfig::default(), &policies, &SimConfig::default(), &mut |_, _, _| {});
    let a = run();
    let iterations: Vec<u64> = a.iter().map(|r| r.report.iterations).collect();
    assert!(iterations.windows(2).all(|w| w[0] == w[1]), "{iterations:?}");
    let json =
        |rs: &[weave_sim::Replay]| rs.iter().map(|r| serde_json::to_string(&r.report).unwrap()).collect::<Vec<_>>();
    assert_eq!(json(&a), json(&run()));
}
