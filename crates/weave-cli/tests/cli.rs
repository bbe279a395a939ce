//! The `weave` binary end to end: real processes, real files.

mod common;

use common::{stderr, stdout, temp_file, weave};
use std::process::Command;

const WILD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/rollmux/wild.trace");

#[test]
fn simulate_runs_on_the_default_workload_without_files() {
    let o = weave(&["simulate"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("jobs: 60") && stdout(&o).contains("solo-disagg"), "{}", stdout(&o));
    let o = weave(&["simulate", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["workload"]["jobs"], 60);
}

#[test]
fn trace_show_wild() {
    if !weave_testkit::exists_or_skip("trace_show_wild", std::path::Path::new(WILD)) {
        return;
    }
    let o = weave(&["trace", "show", WILD, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["jobs"], 200);
    let mean = v["summary"]["mean_lifetime_h"].as_f64().unwrap();
    assert!((mean - 27.9).abs() < 0.05, "{mean}");
}

#[test]
fn corrupted_trace_error_names_file_and_line() {
    let Some(text) =
        weave_testkit::read_or_skip("corrupted_trace_error_names_file_and_line", std::path::Path::new(WILD))
    else {
        return;
    };
    let bad = text.replacen("job3, 2025-07-30 15:43:08, 1, 8B_8k", "job3, 2025-07-30 15:43:08, 1, 8B_8q", 1);
    let p = temp_file("bad.trace", &bad);
    let o = weave(&["trace", "show", p.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("bad.trace:4: field `type`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn generate_convert_show_round_trip() {
    let o = weave(&["trace", "generate", "--jobs", "25", "--seed", "9"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = temp_file("gen.jsonl", &stdout(&o));
    let o2 = weave(&["trace", "convert", p.to_str().unwrap()]);
    assert_eq!(stdout(&o2), stdout(&o), "converting our own format is the identity");
    let o3 = weave(&["simulate", "--trace", p.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o3.stdout).unwrap();
    assert_eq!(v["workload"]["jobs"], 25);
}

#[test]
fn bad_generator_flags_are_errors() {
    let o = weave(&["trace", "generate", "--jobs", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--jobs"));
    let o = weave(&["trace", "generate", "--rate=-1"]);
    assert!(stderr(&o).contains("--rate"), "{}", stderr(&o));
}

#[test]
fn config_show_and_bad_config() {
    let o = weave(&["config", "show"]);
    assert!(o.status.success());
    let toml = stdout(&o);
    assert!(toml.contains("nodes = 41") && toml.contains("price_per_gpu_hour = 5.28"), "{toml}");
    let p = temp_file("bad.toml", &toml.replace("gpus_per_node = 8", "gpus_per_nod = 8"));
    let o = weave(&["config", "show", "--cluster", p.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("gpus_per_nod"), "{}", stderr(&o));
    let p = temp_file("zero.toml", &toml.replacen("nodes = 41", "nodes = 0", 1));
    let o = weave(&["config", "show", "--cluster", p.to_str().unwrap()]);
    assert!(stderr(&o).contains("rollout.nodes"), "{}", stderr(&o));
}

#[test]
fn missing_files_are_clear_errors() {
    let o = weave(&["trace", "show", "/nonexistent/x.trace"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot read trace /nonexistent/x.trace"), "{}", stderr(&o));
}

/// A member with staleness 1 is timed as one-step off-policy: alone it would run at its
/// rollout's pace (300 s), not rollout + training (400 s).
#[test]
fn group_analyze_times_bounded_staleness() {
    let group = "[[member]]\nrollout_s = 300\ntrain_s = 100\nnodes = [0]\nstaleness = 1\n\n\
                 [[member]]\nrollout_s = 100\ntrain_s = 200\nnodes = [1]\n";
    let p = temp_file("stale.toml", group);
    let o = weave(&["group", "analyze", "--file", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["timing"]["members"][0]["solo"].as_u64(), Some(300_000_000));
    assert!(v["timing"]["members"][1]["solo"].as_u64().unwrap() > 300_000_000, "on-policy: rollout + training + sync");
    let p = temp_file("too-stale.toml", &group.replace("staleness = 1", "staleness = 9"));
    let o = weave(&["group", "analyze", "--file", p.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("member 1: `staleness` 9"), "{}", stderr(&o));
}

/// The replay runs bounded-staleness jobs: solo-async overlaps their phases (rollouts lag by
/// up to k versions), the synchronous baselines run them on-policy (never behind), and
/// prototype mode, which reproduces on-policy research code, refuses them.
#[test]
fn simulate_runs_bounded_staleness_jobs() {
    let lines = [
        r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":20,"staleness":1}"#,
        r#"{"id":"b","arrival_s":60,"type":"7B_16k","iterations":20}"#,
        r#"{"id":"c","arrival_s":120,"type":"14B_8k","iterations":20,"staleness":2}"#,
    ];
    let t = temp_file("stale.jsonl", &lines.join("\n"));
    let args = ["simulate", "--trace", t.to_str().unwrap(), "--policy", "weave,solo-async,solo-disagg,colocated"];
    let o = weave(&[&args[..], &["--json", "--per-job"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let policy = |name: &str| v["policies"].as_array().unwrap().iter().find(|p| p["policy"] == name).unwrap().clone();
    let (solo_async, solo) = (policy("solo-async"), policy("solo-disagg"));
    assert_eq!(solo_async["vs_solo_async"], 1.0);
    assert!(solo_async["vs_solo_disagg"].as_f64().unwrap() > 1.0, "overlapping phases pays: {solo_async}");
    let job = |p: &serde_json::Value, name: &str| {
        p["per_job"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap().clone()
    };
    let a = job(&solo_async, "a");
    assert_eq!(a["staleness"], 1);
    let behind = a["versions_behind"].as_f64().unwrap();
    assert!(behind > 0.0 && behind <= 1.0, "{a}");
    assert!(job(&solo_async, "c")["versions_behind"].as_f64().unwrap() <= 2.0);
    assert!(job(&solo_async, "b").get("staleness").is_none(), "on-policy jobs carry no staleness fields");
    assert!(job(&solo, "a").get("versions_behind").is_none(), "solo-disagg runs every job on-policy");
    for p in v["policies"].as_array().unwrap() {
        assert_eq!(p["slo_attainment_jobs"], 1.0, "{}", p["policy"]);
    }
    let text = weave(&args);
    assert!(stdout(&text).contains("vs solo-async"), "{}", stdout(&text));
    let o = weave(&["simulate", "--trace", t.to_str().unwrap(), "--model", "prototype"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("job `a` has `staleness` 1: prototype mode reproduces"), "{}", stderr(&o));
}

#[test]
fn group_analyze_reports_timing_and_memory() {
    let o = weave(&["group", "analyze", "--member", "300:100@0", "--member", "100:200@1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Unsaturated: the meta-iteration is the longest solo cycle (rollout + train + sync).
    assert_eq!(v["timing"]["saturated"], false);
    assert_eq!(v["timing"]["method"], "cycle-mean");
    let meta = v["timing"]["meta_iteration"].as_u64().unwrap();
    let solo0 = v["timing"]["members"][0]["solo"].as_u64().unwrap();
    assert!(meta >= solo0 && meta < solo0 + 10_000_000, "{meta} vs {solo0}");
    assert_eq!(v["memory"].as_array().unwrap().len(), 3);

    let events = temp_file("events.jsonl", "");
    let o = weave(&[
        "group",
        "analyze",
        "--member",
        "7B_8k@0",
        "--member",
        "7B_8k@0",
        "--events",
        events.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    let log = std::fs::read_to_string(&events).unwrap();
    let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "join");
    // Two members, four iterations each: every phase start is logged.
    assert_eq!(log.lines().filter(|l| l.contains("\"phase_start\"")).count(), 16);
    assert!(out.contains("saturated: yes") && out.contains("each training node"), "{out}");
}

#[test]
fn group_analyze_refuses_what_does_not_fit_and_bad_specs() {
    // Five 32B jobs on one rollout node: 5 x 490 GB of rollout state exceeds 2 TB.
    let mut args = vec!["group", "analyze"];
    for _ in 0..5 {
        args.extend(["--member", "32B_8k@0"]);
    }
    let o = weave(&args);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("host DRAM"), "{}", stderr(&o));
    let o = weave(&["group", "analyze", "--member", "7B_8k"]);
    assert!(stderr(&o).contains("--member #1"), "{}", stderr(&o));
    let o = weave(&["group", "analyze", "--member", "0:5@0"]);
    assert!(stderr(&o).contains("positive"), "{}", stderr(&o));
    let o = weave(&["group", "analyze"]);
    assert!(stderr(&o).contains("no members"), "{}", stderr(&o));
}

#[test]
fn group_file_toml() {
    let p = temp_file("group.toml", "[[member]]\ntype = \"14B_8k\"\nnodes = [0]\n\n[[member]]\nrollout_s = 50\ntrain_s = 60\nmodel = \"3B\"\nnodes = [1]\n");
    let o = weave(&["group", "analyze", "--file", p.to_str().unwrap(), "--cold", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["resident"], false);
    let p = temp_file("bad-group.toml", "[[member]]\ntype = \"14B_8k\"\nnodez = [0]\n");
    let o = weave(&["group", "analyze", "--file", p.to_str().unwrap()]);
    assert!(stderr(&o).contains("nodez"), "{}", stderr(&o));
}

#[test]
fn migration_bench_reports_a_gain_per_pair() {
    let o = weave(&["bench", "migration", "--rounds", "4", "--repeats", "2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        assert!(r["throughput_gain"].as_f64().unwrap() > 0.0, "{r}");
    }
    let o = weave(&["bench", "migration", "--trigger", "sometimes"]);
    assert!(!o.status.success());
}

#[test]
fn placement_and_optimality_benches_run() {
    let o = weave(&["bench", "placement", "--sizes", "50", "--probes", "5", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["jobs"], 50);
    let o = weave(&["bench", "optimality", "--jobs", "4", "--instances", "2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for row in v.as_array().unwrap() {
        // The optimum is a lower bound on the heuristic's cost.
        assert!(row["mean_ratio"].as_f64().unwrap() >= 1.0 - 1e-12, "{row}");
    }
    let o = weave(&["bench", "optimality", "--jobs", "40"]);
    assert!(!o.status.success());
}

#[test]
fn simulate_compares_policies() {
    let o = weave(&["simulate", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v["policies"].as_array().unwrap().iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["weave", "weave-disagg-only", "solo-disagg", "colocated", "random", "most-idle"]);
    let solo = &v["policies"][2];
    assert_eq!(solo["vs_solo_disagg"], 1.0);
    // Weave never loses to what a user already has, every job within its SLO.
    let full = &v["policies"][0];
    assert!(full["vs_colocated"].as_f64().unwrap() >= 1.0 && full["vs_solo_disagg"].as_f64().unwrap() >= 1.0);
    assert_eq!(full["slo_attainment_jobs"], 1.0);
    // The money split accounts for every dollar.
    let m = &full["money"];
    let parts: i64 =
        ["busy", "switching", "sync", "idle_alone", "idle_other"].iter().map(|k| m[k]["cost"].as_i64().unwrap()).sum();
    assert!((parts - full["total_cost"].as_i64().unwrap()).abs() <= 5, "{m}");
    // Same bytes for the same seed.
    let again = weave(&["simulate", "--json"]);
    assert_eq!(again.stdout, o.stdout);
}

#[test]
fn simulate_options_and_errors() {
    let events = temp_file("sim-events.jsonl", "");
    let o = weave(&[
        "simulate",
        "--policy",
        "weave,weave-cold",
        "--capacity",
        "fixed",
        "--slo",
        "uniform:1.2,1.8",
        "--seed",
        "3",
        "--events",
        events.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["capacity"], "fixed");
    let log = std::fs::read_to_string(&events).unwrap();
    let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["policy"], "weave");
    assert!(first["group"].is_number() && first["time"].is_number(), "{first}");
    for (args, want) in [
        (vec!["simulate", "--policy", "magic"], "unknown policy `magic`"),
        (vec!["simulate", "--slo", "0.5"], ">= 1"),
        (vec!["simulate", "--slo", "uniform:2,1"], "LO <= HI"),
    ] {
        let o = weave(&args);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
    }
}

#[test]
fn sweeps_run() {
    let o = weave(&["sweep", "slo", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 4);
    let o = weave(&["sweep", "classes", "--jobs", "12"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("rollout-heavy"), "{}", stdout(&o));
}

#[test]
fn prototype_mode_on_the_wild_trace() {
    if !weave_testkit::exists_or_skip("prototype_mode_on_the_wild_trace", std::path::Path::new(WILD)) {
        return;
    }
    let o = weave(&["simulate", "--model", "prototype", "--trace", WILD, "--policy", "weave", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["jobs"], 200);
    assert_eq!(v["definitions"].as_array().unwrap().len(), 4);
    let names: Vec<&str> = v["policies"].as_array().unwrap().iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["weave", "solo-disagg", "colocated"]);
    let a = &v["admissions"];
    let total = a["direct"].as_u64().unwrap() + a["scaling"].as_u64().unwrap() + a["isolated"].as_u64().unwrap();
    assert_eq!(total, 200);
    let o = weave(&["simulate", "--model", "prototype", "--trace", WILD, "--policy", "weave"]);
    assert!(stdout(&o).contains("new group"), "{}", stdout(&o));
    assert!(stdout(&o).contains("what these numbers mean"), "{}", stdout(&o));
}

#[test]
fn prototype_mode_baselines_on_a_philly_derived_trace() {
    // The "parsed" variant: arrival lines carry T_roll, T_train and the SLO.
    let mut text = String::new();
    for i in 0..12 {
        let (h, m) = (i / 4, (i % 4) * 15);
        text.push_str(&format!(
            "{i}, 2017-10-03 0{h}:{m:02}:00, 1, {}, {}, {}\n",
            200 + 20 * i,
            100 + 5 * i,
            1.3 + 0.05 * i as f64
        ));
    }
    for i in 0..12 {
        text.push_str(&format!("{i}, 2017-10-03 1{}:00:00, -1\n", i / 6));
    }
    let trace = temp_file("philly-parsed.txt", &text);
    let t = trace.to_str().unwrap();
    let args = [
        "simulate",
        "--model",
        "prototype",
        "--trace",
        t,
        "--policy",
        "weave,random,most-idle",
        "--max-group-size",
        "3",
    ];
    let o = weave(&[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["jobs"], 12);
    for name in ["random", "most-idle"] {
        let seeds: Vec<u64> = v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["policy"] == name)
            .map(|p| p["seed"].as_u64().unwrap())
            .collect();
        assert_eq!(seeds, (1..=10).collect::<Vec<u64>>(), "{name}");
    }
    let o = weave(&args);
    assert!(stdout(&o).contains("group cap 3") && stdout(&o).contains("random over 10 seeds"), "{}", stdout(&o));
    let bad = weave(&["simulate", "--model", "prototype", "--trace", t, "--policy", "weave-cold"]);
    assert!(!bad.status.success() && stderr(&bad).contains("no prototype version"), "{}", stderr(&bad));
}

#[test]
fn simulate_report_and_weave_report() {
    let html = temp_file("report.html", "");
    let events = temp_file("report-events.jsonl", "");
    let sim = temp_file("report-sim.json", "");
    let o = weave(&[
        "simulate",
        "--policy",
        "weave,solo-disagg",
        "--report",
        html.to_str().unwrap(),
        "--window",
        "0,3",
        "--events",
        events.to_str().unwrap(),
        "--json",
        "--per-job",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&sim, &o.stdout).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("Phase timeline: weave") && page.contains("<svg"));
    let out = temp_file("report2.html", "");
    let o = weave(&["report", events.to_str().unwrap(), "--sim", sim.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("solo-disagg") && page.contains("timeline of group"), "report from files");
    let o = weave(&["report", events.to_str().unwrap(), "--policy", "nope", "-o", out.to_str().unwrap()]);
    assert!(stderr(&o).contains("no events of policy `nope`"), "{}", stderr(&o));
    let o = weave(&["simulate", "--report", html.to_str().unwrap(), "--window", "3,1"]);
    assert!(stderr(&o).contains("--window"), "{}", stderr(&o));
}

/// A server's saved events (`GET /v1/events`) drawn: per job its phases and mean durations
/// (grant to finish) and re-admissions, and a timeline; a file that is not events is named.
#[test]
fn report_draws_a_servers_events() {
    let ev = |seq: u64, t: u64, job: &str, kind: &str, phase: &str, it: u64| {
        serde_json::json!({ "seq": seq, "time_us": t, "job": job, "kind": kind, "phase": phase, "iteration": it,
                            "group": 0, "meta": null })
    };
    let mut events = vec![
        ev(0, 0, "a", "grant", "rollout", 0),
        ev(1, 2_000_000, "a", "finish", "rollout", 0),
        ev(2, 2_000_000, "a", "grant", "train", 0),
        ev(3, 3_000_000, "a", "finish", "train", 0),
        ev(4, 2_000_000, "b", "grant", "rollout", 0),
        ev(5, 6_000_000, "b", "finish", "rollout", 0),
    ];
    events.push(serde_json::json!({ "seq": 6, "time_us": 6_500_000, "job": "b", "kind": "requeued", "phase": null,
                                    "iteration": null, "group": null, "meta": { "resume_from": 0 } }));
    let file = temp_file("server-events.json", &serde_json::to_string(&events).unwrap());
    let out = temp_file("server-report.html", "");
    let o = weave(&["report", "--server", file.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("<td>a</td><td>1</td><td>2.000</td><td>1</td><td>1.000</td><td>0</td>"), "{page}");
    assert!(page.contains("<td>b</td><td>1</td><td>4.000</td><td>0</td><td></td><td>1</td>"), "{page}");
    assert!(page.contains("<svg") && page.contains("a rollout 0"), "a timeline with a's rollout");
    let bad = temp_file("server-events-bad.json", "{\"seq\": 0}\n");
    let o = weave(&["report", "--server", bad.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(stderr(&o).contains("server-events-bad.json:1: not an event"), "{}", stderr(&o));
}

/// More jobs than a tenant may hold by default (100): the benchmark's one driver holds them all.
#[test]
fn serve_bench_runs_bounded() {
    let o = weave(&["bench", "serve", "--jobs", "120", "--round-trips", "20", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["jobs"], 120);
    assert_eq!(v["round_trips"], 20);
    // The shape of a measurement, not its timing: every round trip measured once (a start and
    // a finish each, in or outside a snapshot), percentiles ordered, and no snapshot taken
    // (none was asked for), so nothing counted during one.
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    for phase in ["start", "finish"] {
        let n = |w: &str| v[format!("{phase}_{w}_snapshots")]["n"].as_u64().unwrap();
        assert_eq!((n("during"), n("outside")), (0, 20), "{phase}: {v}");
        let (p50, p99, max) =
            (f(&format!("{phase}_p50_ms")), f(&format!("{phase}_p99_ms")), f(&format!("{phase}_max_ms")));
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{phase}: {v}");
    }
    assert!(0.0 < f("submit_p50_ms") && f("submit_p50_ms") <= f("submit_p99_ms"), "{v}");
    assert!(f("submissions_per_second") > 0.0, "{v}");
    assert_eq!((v["snapshots"].as_u64(), v["requests_during_snapshots"].as_u64()), (Some(0), Some(0)), "{v}");
    assert!(f("max_outside_snapshots_ms") >= f("finish_max_ms").max(f("start_max_ms")), "{v}");
}

/// Readers of another tenant while the gate is measured, over a history built first.
#[test]
fn serve_bench_runs_readers_of_another_tenant() {
    let o = weave(&[
        "bench",
        "serve",
        "--jobs",
        "20",
        "--round-trips",
        "200",
        "--history-round-trips",
        "100",
        "--readers",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["history_events"].as_u64().unwrap() >= 200, "{v}");
    assert!(v["reads_per_second"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn serve_refuses_to_run_without_auth_choice() {
    let o = weave(&["serve", "--addr", "127.0.0.1:0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--tenants"), "{}", stderr(&o));
    let p = temp_file("bad-tenants.toml", "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"zz\"\n");
    let o = weave(&["serve", "--addr", "127.0.0.1:0", "--tenants", p.to_str().unwrap()]);
    assert!(stderr(&o).contains("tenant #1"), "{}", stderr(&o));
}

#[test]
fn drift_experiment_runs() {
    let o = weave(&["trace", "generate", "--jobs", "6", "--lifetime-median-h", "1", "--seed", "4"]);
    let p = temp_file("drift.jsonl", &stdout(&o));
    let o = weave(&["experiment", "drift", "--trace", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 5 drift scenarios x failures off/on x 3 re-grouping policies.
    assert_eq!(v.as_array().unwrap().len(), 30);
}

#[test]
fn waterfall_experiment_runs_with_json_and_report() {
    let o = weave(&["trace", "generate", "--jobs", "8", "--lifetime-median-h", "1", "--seed", "4"]);
    let p = temp_file("waterfall.jsonl", &stdout(&o));
    let html = temp_file("waterfall.html", "");
    let o = weave(&[
        "experiment",
        "waterfall",
        "--trace",
        p.to_str().unwrap(),
        "--json",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // Prototype mode, the engine under its assumptions, then ten steps.
    assert_eq!(rows.len(), 12);
    assert_eq!(rows[0]["step"], "prototype-mode");
    assert_eq!(rows[11]["step"], "colocated-and-consolidation");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("colocated-and-consolidation"));
    let o = weave(&["experiment", "waterfall", "--max-group-size", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--max-group-size"), "{}", stderr(&o));
}

#[test]
fn tenants_experiment_compares_the_four_modes_per_tenant() {
    let o = weave(&["trace", "generate", "--jobs", "12", "--lifetime-median-h", "2", "--seed", "3"]);
    let p = temp_file("tenants.jsonl", &stdout(&o));
    let html = std::env::temp_dir().join(format!("weave-tenants-{}.html", std::process::id()));
    let o = weave(&[
        "experiment",
        "tenants",
        "--trace",
        p.to_str().unwrap(),
        "--rollout-nodes",
        "4",
        "--training-nodes",
        "4",
        "--json",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    // Per mode, two charts (one per pool) with one line per tenant and its entitlement.
    assert_eq!(page.matches("<svg").count(), 8);
    assert!(page.contains("quotas+preemption+backfill") && page.contains("team-c"));
    assert!(page.matches("<polyline").count() >= 24, "a line per tenant per chart");
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let modes: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["fifo", "quotas", "quotas+preemption", "quotas+preemption+backfill"]);
    // Backfill is compared with no backfill, and a rerun with one setting nudged shows how far
    // first starts move between runs anyway.
    assert!(rows[3]["perturbed"]["started_over_1h_earlier"].is_u64(), "{}", rows[3]);
    assert!(rows[3]["against_no_backfill"]["started_over_1h_later"].is_u64(), "{}", rows[3]);
    assert!(rows[2]["perturbed"].is_null() && rows[2]["high_over_bound"].is_u64());
    // Backfill's promise is checked in its own run only.
    assert!(rows[3]["backfill_promise"]["jumped"].is_u64(), "{}", rows[3]);
    assert!(rows[2]["backfill_promise"].is_null());
    for r in rows.as_array().unwrap() {
        assert_eq!(r["tenants"].as_array().unwrap().len(), 3, "{r}");
        assert_eq!(r["never_ran"], 0);
        // Work preemptions threw away is busy, not useful.
        let (busy, useful) = (r["training_busy_share"].as_f64().unwrap(), r["training_useful_share"].as_f64().unwrap());
        assert!(useful <= busy + 1e-12, "{r}");
        // Every job above its SLO is counted once by priority and once by cause.
        let missed = |k: &str| r[k].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).sum::<u64>();
        assert_eq!(missed("slo_missed_by_priority"), missed("slo_missed_by_cause"), "{r}");
        let jobs = r["jobs_run"].as_f64().unwrap();
        let met = r["slo_met_jobs"].as_f64().unwrap();
        assert_eq!(missed("slo_missed_by_cause"), ((1.0 - met) * jobs).round() as u64, "{r}");
        // Each tenant's use hour by hour is reported (the chart's data).
        for t in r["tenants"].as_array().unwrap() {
            assert!(!t["hourly_use"].as_array().unwrap().is_empty(), "{t}");
        }
    }
    // Who may displace its own tenant's jobs is a priority, and a wrong one is named.
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--preempts-own", "normal", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--preempts-own", "urgent"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--preempts-own"), "{}", stderr(&o));
    // Graceful preemption (the default): victims saved at their iteration's end are among the
    // preemptions; without it none is saved; a grace period that is not a number of minutes
    // is named.
    for r in rows.as_array().unwrap() {
        assert!(r["preemptions_saved"].as_u64().unwrap() <= r["preemptions"].as_u64().unwrap(), "{r}");
    }
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--grace-min", "0", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows.as_array().unwrap().iter().all(|r| r["preemptions_saved"] == 0), "{rows}");
    // Fair share without decay is a half-life of 0; a half-life too short to mean anything is named.
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--half-life-h", "0", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--half-life-h", "0.001"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--half-life-h"), "{}", stderr(&o));
    let o = weave(&["experiment", "tenants", "--trace", p.to_str().unwrap(), "--grace-min=-1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--grace-min"), "{}", stderr(&o));
    let bad = temp_file("bad-tenants.toml", "[[tenant]]\nname = \"x\"\nrollout_nodes = -1\ntraining_nodes = 2\n");
    let o = weave(&["experiment", "tenants", "--tenants", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    // The file, the tenant and the field (the server's tenants-file parser).
    let err = stderr(&o);
    assert!(
        err.contains("bad-tenants.toml") && err.contains("tenant #1 `x`") && err.contains("rollout_nodes"),
        "{err}"
    );
}

#[test]
fn traces_that_are_not_utf8_or_absurd_are_refused_with_where() {
    let bad = temp_file("bad-utf8.jsonl", "");
    std::fs::write(&bad, b"{\"id\":\"a\",\"arrival_s\":0,\"type\":\"7B_8k\",\"iterations\":3}\n{\"id\":\"b\xff\"}\n")
        .unwrap();
    let o = weave(&["simulate", "--trace", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(":2: not UTF-8 at byte 9 of the line"), "{}", stderr(&o));
    let big = temp_file("big.jsonl", "{\"id\":\"a\",\"arrival_s\":0,\"type\":\"7B_8k\",\"iterations\":1000000000}\n");
    let o = weave(&["simulate", "--trace", big.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("`iterations` 1000000000 is more than a replay runs"), "{}", stderr(&o));
}

#[test]
fn trace_generate_makes_multi_tenant_workloads_and_names_a_bad_tenant() {
    let o = weave(&["trace", "generate", "--jobs", "50", "--tenant", "a:3:high=0.5", "--tenant", "b:1:burst=4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 50);
    assert!(lines.iter().all(|j| j["tenant"] == "a" || j["tenant"] == "b"), "{text}");
    assert!(lines.iter().any(|j| j["priority"] == "high"));
    let o = weave(&["trace", "generate", "--tenant", "a:1:burst=0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tenant `a:1:burst=0`: burst"));
    let o = weave(&["trace", "generate", "--tenant", "a:1", "--tenant", "a:2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("each tenant once"));
}

/// Regression: with fair share decayed over 8 hours, a preemption inside a batch of dispatcher
/// actions left a stale action for the victim and the replay panicked ("running job").
#[test]
fn tenants_experiment_with_fair_share_decay_on_the_wild_trace() {
    if !weave_testkit::exists_or_skip(
        "tenants_experiment_with_fair_share_decay_on_the_wild_trace",
        std::path::Path::new(WILD),
    ) {
        return;
    }
    let o = weave(&["experiment", "tenants", "--trace", WILD, "--half-life-h", "8", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for r in rows.as_array().unwrap() {
        assert_eq!(r["never_ran"], 0, "{}", r["mode"]);
    }
    assert!(rows[2]["preemptions"].as_u64().unwrap() > 0);
}

/// `weave token hash` reads the secret from standard input (never on the command line, where
/// `ps` and shell history keep it); an empty input is refused.
#[test]
fn token_hash_reads_the_secret_from_standard_input() {
    use std::io::Write;
    let hash = |input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weave"))
            .args(["token", "hash"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    let sha_of_abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    for input in [&b"abc\n"[..], b"abc", b"abc\r\n"] {
        let o = hash(input);
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), sha_of_abc);
    }
    let empty = hash(b"");
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("standard input"));
}
