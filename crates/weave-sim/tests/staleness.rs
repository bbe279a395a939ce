//! Bounded-staleness jobs in the replay: solo-async is the reference their slowdown is
//! measured against (so it runs at exactly 1.0, under variation too), the synchronous
//! baselines run them on-policy, and Weave keeps their SLOs.

use weave_core::ClusterConfig;
use weave_model::{ProfileModel, RuntimeModel};
use weave_sim::{prepare, replay, Policy, PolicyReport, SimConfig};
use weave_trace::{parse, Format, ReadOptions};

const STALE: &str = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":40,"staleness":1}
{"id":"b","arrival_s":100,"type":"14B_16k","iterations":30,"staleness":2}
{"id":"c","arrival_s":200,"type":"7B_16k","iterations":30}
{"id":"d","arrival_s":300,"type":"8B_8k","iterations":50,"staleness":1}"#;

fn run(jsonl: &str, policy: Policy, runtime: RuntimeModel) -> PolicyReport {
    let trace = parse(jsonl, Format::Jsonl, "staleness", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { runtime, ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    replay(&jobs, &cluster, policy, &cfg, &mut |_, _| {}).report
}

/// The solo reference of a stale job is its solo-async run on the durations it drew: a job
/// run that way is never slower or faster than its reference, whatever the variation.
#[test]
fn solo_async_runs_at_exactly_its_own_reference() {
    for runtime in [RuntimeModel::deterministic(), RuntimeModel::default()] {
        let r = run(STALE, Policy::SoloAsync, runtime);
        for j in &r.per_job {
            assert!((j.slowdown - 1.0).abs() < 1e-9, "{}: slowdown {}", j.name, j.slowdown);
        }
        let a = r.per_job.iter().find(|j| j.name == "a").unwrap();
        assert_eq!(a.staleness, 1);
        let behind = a.versions_behind.unwrap();
        assert!(behind > 0.0 && behind <= 1.0, "{behind}");
        let b = r.per_job.iter().find(|j| j.name == "b").unwrap();
        assert!(b.versions_behind.unwrap() <= 2.0);
        assert_eq!(r.per_job.iter().find(|j| j.name == "c").unwrap().versions_behind, None);
    }
}

/// Overlapping rollout with training does the same work in less time and money.
#[test]
fn solo_async_beats_solo_disagg_and_the_sync_baselines_run_on_policy() {
    let on_policy = STALE.replace(r#","staleness":1"#, "").replace(r#","staleness":2"#, "");
    let rt = RuntimeModel::default;
    let (asy, sync) = (run(STALE, Policy::SoloAsync, rt()), run(STALE, Policy::SoloDisagg, rt()));
    assert_eq!(asy.iterations, sync.iterations, "equal work");
    assert!(asy.total_cost < sync.total_cost && asy.makespan_h < sync.makespan_h);
    // solo-disagg and colocated run the stale trace exactly as its on-policy twin.
    for p in [Policy::SoloDisagg, Policy::Colocated] {
        let (a, b) = (run(STALE, p, rt()), run(&on_policy, p, rt()));
        assert_eq!((a.total_cost, a.iterations), (b.total_cost, b.iterations), "{p}");
        assert!(a.per_job.iter().all(|j| j.staleness == 0 && j.versions_behind.is_none()), "{p}");
        assert!(a.staleness.is_none(), "{p}");
    }
}

#[test]
fn weave_keeps_stale_jobs_within_slo_and_replays_bit_for_bit() {
    let a = run(STALE, Policy::Weave, RuntimeModel::default());
    assert_eq!(a.slo_attainment_jobs, 1.0, "{:?}", a.per_job);
    let s = a.staleness.as_ref().expect("stale jobs reported");
    assert_eq!(s.jobs, 3);
    let b = run(STALE, Policy::Weave, RuntimeModel::default());
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}
