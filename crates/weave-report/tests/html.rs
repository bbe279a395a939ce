//! The report is well-formed, self-contained, and shows what it promises, for a small
//! golden scenario.

use weave_core::ClusterConfig;
use weave_model::{ProfileModel, RuntimeModel};
use weave_report::{render, ReportData, Timeline};
use weave_sim::{compare, prepare, replay, Policy, SimConfig};
use weave_trace::{parse, Format, ReadOptions};

fn report() -> String {
    let text = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":4,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"b","arrival_s":0,"type":"7B_8k","iterations":4,"slo":2.0,"rollout_s":100,"train_s":100}
{"id":"c","arrival_s":600,"type":"14B_8k","iterations":3,"slo":1.2}"#;
    let trace = parse(text, Format::Jsonl, "golden", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { runtime: RuntimeModel::deterministic(), ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    let policies = [Policy::Weave, Policy::SoloDisagg, Policy::Colocated];
    let reports: Vec<_> =
        compare(&jobs, &cluster, &policies, &cfg, &mut |_, _, _| {}).into_iter().map(|r| r.report).collect();
    let logged = replay(&jobs, &cluster, Policy::Weave, &SimConfig { events: true, ..cfg.clone() }, &mut |_, _| {});
    let timeline = Timeline::from_events("weave", &logged.events, None, 8);
    render(&ReportData {
        title: "golden".into(),
        notes: vec!["a <note> & more".into()],
        reports: &reports,
        prices: (1.85, 5.28),
        timeline: Some(timeline),
    })
}

#[test]
fn well_formed_and_self_contained() {
    let html = report();
    let doc = roxmltree::Document::parse_with_options(
        &html,
        roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
    )
    .expect("the report parses as XML");
    let svgs = doc.descendants().filter(|n| n.has_tag_name("svg")).count();
    // cost bars, two GPU charts, cost over time, three slowdown plots, one timeline per group.
    assert!(svgs >= 8, "{svgs} svg elements");
    for bad in ["<script", "src=", "href=", "url(", "@import", "<link", "<img"] {
        assert!(!html.contains(bad), "external reference or script: {bad}");
    }
    // The only URL is the SVG namespace identifier.
    let urls: Vec<&str> = html.match_indices("http").map(|(i, _)| &html[i..i + 26]).collect();
    assert!(urls.iter().all(|u| u.starts_with("http://www.w3.org/2000/svg")), "{urls:?}");
    assert!(html.contains("a &lt;note&gt; &amp; more"));
}

#[test]
fn shows_the_promised_elements() {
    let html = report();
    let doc = roxmltree::Document::parse_with_options(
        &html,
        roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() },
    )
    .unwrap();
    let titles: Vec<String> =
        doc.descendants().filter(|n| n.has_tag_name("title")).filter_map(|n| n.text().map(str::to_string)).collect();
    // Timeline bars: phases of both jobs, switches, syncs.
    for want in [
        "job 0 rollout 0",
        "job 1 rollout 0",
        "job 0 training 0",
        "cold switch to rollout",
        "warm switch",
        "weight sync",
    ] {
        assert!(titles.iter().any(|t| t.contains(want)), "no bar titled `{want}`");
    }
    // One slowdown dot per job and policy (3 jobs x 3 policies).
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("circle")).count(), 9);
    // Axes carry units; the headline table lists every policy.
    for want in [
        "time (hours)",
        "H20 GPUs held",
        "cost ($ per hour)",
        "slowdown",
        "solo-disagg",
        "colocated",
        "lower bound",
        "Where the money goes",
        "idle alone in a group",
        "predicted",
    ] {
        assert!(html.contains(want), "missing `{want}`");
    }
    let rows = doc.descendants().filter(|n| n.has_tag_name("tr")).count();
    assert_eq!(rows, 4, "header + 3 policies");
    // Deterministic.
    assert_eq!(html, report());
}

#[test]
fn window_clips_the_timeline() {
    let text = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":30,"slo":2.0}"#;
    let trace = parse(text, Format::Jsonl, "w", &ReadOptions::default()).unwrap();
    let cluster = ClusterConfig::default();
    let cfg = SimConfig { events: true, runtime: RuntimeModel::deterministic(), ..SimConfig::default() };
    let jobs = prepare(&trace, &cluster, &ProfileModel::builtin(), cfg.slo, cfg.seed);
    let r = replay(&jobs, &cluster, Policy::Weave, &cfg, &mut |_, _| {});
    let t = Timeline::from_events("weave", &r.events, Some((0.5, 1.0)), 8);
    let bars: Vec<_> = t.groups.iter().flat_map(|g| g.lanes.iter().flat_map(|l| l.bars.iter())).collect();
    assert!(!bars.is_empty());
    assert!(bars.iter().all(|b| b.start_h >= 0.5 && b.end_h <= 1.0 && b.end_h > b.start_h));
}
