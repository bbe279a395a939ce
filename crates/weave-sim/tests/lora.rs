//! LoRA jobs in the replay: packs run every member's iterations exactly once and judge each
//! member on its own, a later arrival joins a running pack only where every SLO holds, the
//! policies do equal work, and the same seed gives the same bytes.

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
    assert!(r.report.lora_pack_joins.is_some_and(|n| n > 0), "later arrivals join running packs");
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

/// `(name, arrival s, type, base, iterations, SLO)` as a trace's jobs.
fn trace_of(jobs: &[(&str, u32, &str, &str, u64, f64)]) -> Vec<SimJob> {
    let lines: Vec<String> = jobs
        .iter()
        .map(|(id, arrival, ty, base, iterations, slo)| {
            format!(
                r#"{{"id":"{id}","arrival_s":{arrival},"type":"{ty}","batch":64,"iterations":{iterations},"slo":{slo},"lora":{{"base":"{base}","rank":8}}}}"#
            )
        })
        .collect();
    let opts = weave_trace::ReadOptions::default();
    let trace = weave_trace::parse(&lines.join("\n"), weave_trace::Format::Jsonl, "t.jsonl", &opts).unwrap();
    let profile = ProfileModel::builtin();
    prepare(&trace, &ClusterConfig::default(), &profile, SimConfig::default().slo, 1)
}

#[test]
fn a_later_arrival_joins_a_running_pack_of_its_base_where_every_slo_holds() {
    let jobs = trace_of(&[
        ("a", 0, "7B_4k", "qwen2.5-7b", 60, 2.0),
        // Joins a's engine and trainer while a runs.
        ("b", 600, "7B_4k", "qwen2.5-7b", 20, 2.0),
        // Too tight for a shared engine's longer iteration.
        ("c", 700, "7B_4k", "qwen2.5-7b", 20, 1.02),
        // Another base: never in a's pack.
        ("d", 800, "8B_4k", "llama-3.1-8b", 20, 2.0),
    ]);
    let run = |p| replay(&jobs, &ClusterConfig::default(), p, &SimConfig::default(), &mut |_, _| {}).report;
    let weave = run(Policy::Weave);
    assert_eq!(weave.lora_pack_joins, Some(1), "b alone joins");
    for o in &weave.per_job {
        let declared = jobs.iter().find(|j| j.spec.name == o.name).unwrap();
        assert_eq!(o.iterations, declared.iterations, "{}", o.name);
        assert!(o.slowdown <= o.slo, "{}: {} over {}", o.name, o.slowdown, o.slo);
        assert_eq!(o.queued, weave_core::Micros::ZERO, "{} waited", o.name);
    }
    // b ran beside a (a's 60 iterations outlast b's arrival and its 20 by far).
    let b = weave.per_job.iter().find(|o| o.name == "b").unwrap();
    assert!(b.slowdown < 1.5, "{}", b.slowdown);
    assert_eq!(run(Policy::WeaveFullModel).lora_pack_joins, None, "today's Weave runs no packs");
    // Without b, neither c nor d joins anything: b was the one.
    let without_b: Vec<SimJob> = jobs.iter().filter(|j| j.spec.name != "b").cloned().collect();
    let r = replay(&without_b, &ClusterConfig::default(), Policy::Weave, &SimConfig::default(), &mut |_, _| {});
    assert_eq!(r.report.lora_pack_joins, Some(0));
}

#[test]
fn a_lora_job_holds_a_frozen_base_and_syncs_its_adapter_unless_run_as_a_full_model() {
    let jobs = trace_of(&[("a", 0, "7B_4k", "qwen2.5-7b", 10, 2.0)]);
    let lora = &jobs[0];
    let full = lora.as_full_model(&ClusterConfig::default());
    // Table 2's 240 GB for a 7B's training, scaled to a bf16 base and a rank-8 adapter.
    let gb = |b: weave_core::Bytes| b.as_gb_f64();
    assert!((gb(lora.place.train_state_total) - 30.692).abs() < 1e-2, "{}", gb(lora.place.train_state_total));
    assert!((gb(full.place.train_state_total) - 240.0).abs() < 1e-6);
    assert_eq!(lora.place.rollout_state, full.place.rollout_state, "the engine's state is the base's either way");
    // 14 GB of weights against 40 MB of adapter: the adapter's sync is the plan's start-up.
    assert!(lora.place.sync.0 * 10 < full.place.sync.0, "{:?} against {:?}", lora.place.sync, full.place.sync);
    // What it is judged against stays its own: phases, iterations and solo sync.
    assert_eq!((full.disagg, full.iterations, full.sync), (lora.disagg, lora.iterations, lora.sync));
}
