//! The spot tier from the command line: a bad tier or trace is refused naming the file and
//! the line or key; the sweep checks its flags; a declared tier shows in `simulate`.

mod common;

use common::{stderr, stdout, temp_file, weave};

fn base() -> String {
    stdout(&weave(&["config", "show"]))
}

#[test]
fn a_bad_spot_tier_or_trace_is_refused_naming_the_file_and_the_line() {
    let trace = temp_file("spot.trace", "# node seconds\n0 3600\n99 100\n");
    let with_trace =
        format!("{}\n[rollout_spot]\nprice_per_gpu_hour = 0.74\npreemption_trace = \"spot.trace\"\n", base());
    let cluster = temp_file("spot-trace.toml", &with_trace);
    let o = weave(&["simulate", "--cluster", cluster.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(trace.to_str().unwrap()) && err.contains("line 3") && err.contains("unknown node 99"),
        "{err}"
    );
    let negative = temp_file(
        "spot-rate.toml",
        &format!("{}\n[rollout_spot]\nprice_per_gpu_hour = 0.74\npreemptions_per_node_hour = -2\n", base()),
    );
    let err = stderr(&weave(&["simulate", "--cluster", negative.to_str().unwrap()]));
    assert!(err.contains("spot-rate.toml") && err.contains("rollout_spot.preemptions_per_node_hour"), "{err}");
}

#[test]
fn a_declared_spot_tier_shows_in_simulate_and_the_sweep_checks_its_flags() {
    let cluster = temp_file(
        "spot.toml",
        &format!("{}\n[rollout_spot]\nprice_per_gpu_hour = 0.74\npreemptions_per_node_hour = 0.125\n", base()),
    );
    let o = weave(&["simulate", "--cluster", cluster.to_str().unwrap(), "--policy", "weave,solo-disagg"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("started on spot") && out.contains("lost to preemption $"), "{out}");
    let err = stderr(&weave(&["sweep", "spot", "--discounts", "120"]));
    assert!(err.contains("--discounts: 120"), "{err}");
    let err = stderr(&weave(&["sweep", "spot", "--cluster", cluster.to_str().unwrap()]));
    assert!(err.contains("declares `rollout_spot`"), "{err}");
    let o = weave(&["sweep", "spot", "--discounts", "60", "--rates", "0.125"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("on-demand weave"), "{}", stdout(&o));
    // The same sweep as JSON, checked for what it claims: equal work on spot and on demand,
    // every job within its SLO, fewer dollars per iteration on spot, yet no more saved than
    // 60% off the whole on-demand rollout bill would give (the bound the README states), and
    // Weave ahead of the spot-only baseline.
    let o = weave(&["sweep", "spot", "--discounts", "60", "--rates", "0.125", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (on_demand, row) = (&v["on_demand"], &v["rows"][0]);
    let spot = &row["weave"];
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(spot["iterations"], on_demand["iterations"], "equal work");
    assert_eq!(spot["slo_attainment_jobs"].as_f64(), Some(1.0));
    let per_iteration = |r: &serde_json::Value| r["total_cost"].as_f64().unwrap() / r["iterations"].as_f64().unwrap();
    let saved = 1.0 - per_iteration(spot) / per_iteration(on_demand);
    let rollout_share = on_demand["rollout"]["cost"].as_f64().unwrap() / on_demand["total_cost"].as_f64().unwrap();
    assert!(
        saved > 0.0 && saved <= 0.6 * rollout_share,
        "saved {saved:.4} of $/iteration, bound {:.4}",
        0.6 * rollout_share
    );
    let ipd = |r: &serde_json::Value| r["iterations_per_k_dollars"].as_f64().unwrap();
    assert!(ipd(spot) > ipd(&row["spot_only"]), "{} vs spot-only {}", ipd(spot), ipd(&row["spot_only"]));
}

/// The sweep's recommendation over discounts and preemption rates: at every rate, its
/// iterations per dollar never fall as the discount grows and never fall below on-demand
/// Weave, and it never plans deeper than the cell's discount.
#[test]
fn the_sweeps_recommendation_never_falls_with_a_deeper_discount() {
    let o = weave(&["sweep", "spot", "--discounts", "0,30,50,60,70", "--rates", "0.125,0.5", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let on_demand = v["on_demand"]["iterations_per_k_dollars"].as_f64().unwrap();
    let rows = v["rows"].as_array().unwrap();
    for rate in [0.125, 0.5] {
        let mut last = on_demand;
        for row in rows.iter().filter(|r| r["preemptions_per_node_hour"].as_f64() == Some(rate)) {
            let (plan, discount) = (&row["recommended"], row["discount_pct"].as_f64().unwrap());
            let ipd = plan["iterations_per_k_dollars"].as_f64().unwrap();
            assert!(
                ipd >= last && ipd >= on_demand,
                "{discount}% at {rate}: {ipd} after {last} ({on_demand} on demand)"
            );
            assert!(plan["planned_at_pct"].as_f64().is_none_or(|at| at <= discount), "{plan}");
            assert_eq!(plan["slo_attainment_jobs"].as_f64(), Some(1.0));
            last = ipd;
        }
    }
}
