//! Every published calibration point the model covers, within 10% [brief, section 3].

use weave_core::{ClusterConfig, JobType, Micros, ModelSize, Pool};
use weave_model::*;

fn within(pred: f64, published: f64, what: &str) {
    let err = (pred / published - 1.0).abs();
    assert!(err <= 0.10, "{what}: model {pred:.3} vs published {published} ({:.1}% off)", err * 100.0);
}

#[test]
fn cached_state_table_2() {
    let rows = [(3, 1, 113.4, 156.2), (7, 1, 275.7, 240.0), (14, 1, 445.4, 456.1), (32, 2, 490.3, 520.4)];
    for (b, width, roll, train) in rows {
        let m = ModelSize::billions(b);
        within(rollout_state_per_node(m, width).as_gb_f64(), roll, &format!("{b}B rollout state"));
        within(training_state_per_node(m, width).as_gb_f64(), train, &format!("{b}B training state"));
    }
}

#[test]
fn switch_times_fig_4() {
    let rows =
        [(3, 25.3, 0.8, 26.7, 1.9), (7, 38.8, 0.9, 32.7, 4.1), (14, 60.4, 1.8, 59.0, 4.7), (32, 81.7, 1.7, 81.2, 5.9)];
    for (b, rc, rw, tc, tw) in rows {
        let m = ModelSize::billions(b);
        let s = |pool, kind| switch_time(m, pool, kind).as_secs_f64();
        within(s(Pool::Rollout, SwitchKind::Cold), rc, &format!("{b}B rollout cold"));
        within(s(Pool::Rollout, SwitchKind::Warm), rw, &format!("{b}B rollout warm"));
        within(s(Pool::Training, SwitchKind::Cold), tc, &format!("{b}B training cold"));
        within(s(Pool::Training, SwitchKind::Warm), tw, &format!("{b}B training warm"));
    }
    let m70 = ModelSize::billions(70);
    within(switch_time(m70, Pool::Rollout, SwitchKind::Cold).as_secs_f64(), 135.8, "70B rollout cold");
    within(switch_time(m70, Pool::Training, SwitchKind::Cold).as_secs_f64(), 116.0, "70B training cold");
}

#[test]
fn sync_times_fig_12() {
    let net = ClusterConfig::default().network;
    for (b, topo, flat) in [(7, 0.9, 7.5), (14, 1.7, 13.8), (32, 3.9, 30.7)] {
        let m = ModelSize::billions(b);
        within(
            sync_time(m, SyncPlanKind::TopologyAware, 8, 8, &net).as_secs_f64(),
            topo,
            &format!("{b}B topology-aware sync"),
        );
        within(sync_time(m, SyncPlanKind::Flat, 8, 8, &net).as_secs_f64(), flat, &format!("{b}B flat sync"));
    }
}

#[test]
fn profile_table_reproduced() {
    let model = ProfileModel::builtin();
    for dep in [Deployment::Disagg, Deployment::Colo] {
        let rows: Vec<_> = model.measured_types(dep).collect();
        assert_eq!(rows.len(), 16);
        for (ty, measured) in rows {
            let w = weave_core::JobSpec::default_width(ty.model);
            let est = model.predict(dep, ty, REFERENCE_BATCH, (w, w));
            within(est.times.rollout.as_secs_f64(), measured.rollout.as_secs_f64(), &format!("{ty} {dep:?} rollout"));
            within(est.times.train.as_secs_f64(), measured.train.as_secs_f64(), &format!("{ty} {dep:?} train"));
        }
    }
}

/// How well the analytic scaling predicts a measured type from its neighbours alone: each
/// entry is held out and predicted from the rest. This is the honest accuracy figure for
/// types outside the table; the noise of the measurements (7B_8k vs 8B_8k rollout differ 2.3x)
/// bounds it.
#[test]
fn leave_one_out_accuracy_of_the_analytic_model() {
    let full = ProfileModel::builtin();
    let mut errors = Vec::new();
    for (ty, measured) in full.measured_types(Deployment::Disagg) {
        let json = held_out_json(&full, ty);
        let reduced = ProfileModel::from_json(&json).unwrap();
        let w = weave_core::JobSpec::default_width(ty.model);
        let est = reduced.predict(Deployment::Disagg, ty, REFERENCE_BATCH, (w, w)).times;
        let total = |p: weave_core::PhaseTimes| p.solo().as_secs_f64();
        errors.push((total(est) / total(measured) - 1.0).abs());
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    eprintln!(
        "leave-one-out error of solo iteration time: median {:.0}%, worst {:.0}%",
        median * 100.0,
        errors.last().unwrap() * 100.0
    );
    assert!(median < 0.35, "median leave-one-out error {median}");
}

fn held_out_json(model: &ProfileModel, skip: JobType) -> String {
    let section = |dep| {
        model
            .measured_types(dep)
            .filter(|(t, _)| *t != skip)
            .map(|(t, p)| format!("\"{t}\": {{\"generate\": {}, \"train\": {}}}", secs(p.rollout), secs(p.train)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("{{\"disagg\": {{{}}}, \"colo\": {{{}}}}}", section(Deployment::Disagg), section(Deployment::Colo))
}

fn secs(t: Micros) -> f64 {
    t.as_secs_f64()
}

/// The embedded table equals the authors' file when it is present beside the project.
#[test]
fn embedded_table_matches_shared_data() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/rollmux/profile.json");
    let Some(text) = weave_testkit::read_or_skip("embedded_table_matches_shared_data", std::path::Path::new(path))
    else {
        return;
    };
    let file = ProfileModel::from_json(&text).expect("shared profile.json parses");
    assert_eq!(file, ProfileModel::builtin());
}
