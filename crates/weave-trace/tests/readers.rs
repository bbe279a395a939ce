//! Trace readers: the authors' data, our own format, and damaged input.

use weave_model::ProfileModel;
use weave_trace::{detect_format, generate, parse, write_jsonl, Format, ReadOptions, Summary};

const WILD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/rollmux/wild.trace");

fn wild_text() -> Option<String> {
    weave_testkit::read_or_skip("readers (the wild trace)", std::path::Path::new(WILD))
}

fn read(text: &str, format: Format) -> Result<weave_trace::Trace, weave_trace::TraceError> {
    parse(text, format, "t.trace", &ReadOptions::default())
}

#[test]
fn wild_trace_has_200_jobs_and_mean_lifetime_27_9_h() {
    let Some(text) = wild_text() else { return };
    assert_eq!(detect_format(&text), Format::Wild);
    let trace = read(&text, Format::Wild).unwrap();
    let s = Summary::of(&trace, &ProfileModel::builtin());
    assert_eq!(s.jobs, 200);
    assert!((s.mean_lifetime_h - 27.9).abs() < 0.05, "mean lifetime {}", s.mean_lifetime_h);
    assert!((s.max_lifetime_h - 154.9).abs() < 0.05, "max lifetime {}", s.max_lifetime_h);
    assert_eq!(s.types[0].job_type, "7B_8k");
    assert_eq!(s.types[0].jobs, 100);
    assert_eq!(s.types[1].job_type, "8B_32k");
    assert_eq!(s.types[1].jobs, 33);
    assert_eq!(s.start.as_deref(), Some("2025-07-30 15:33:33"));
    // Ids are dense in arrival order.
    assert!(trace.jobs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    assert!(trace.jobs.iter().enumerate().all(|(i, j)| j.id.0 as usize == i));
}

/// Replaces line `n` (1-based) of `text`.
fn with_line(text: &str, n: usize, new: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { new.to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn corrupted_wild_trace_names_the_line() {
    let Some(text) = wild_text() else { return };
    let line5 = text.lines().nth(4).unwrap().to_string();
    let cases = [
        (with_line(&text, 5, "job4, 2025-07-30 16:35:55, 1"), "5: expected 4 comma-separated fields"),
        (with_line(&text, 5, &line5.replace("16:35:55", "16:3x:55")), "5: field `time`"),
        (with_line(&text, 5, &line5.replace("7B_8k", "9B_8k")), "5: field `type`: unknown job type `9B_8k`"),
        (with_line(&text, 5, &line5.replace(", 1,", ", 2,")), "5: field `event`"),
        (with_line(&text, 5, &line5.replace("2025-07-30", "2025-07-29")), "5: field `time`: time goes backwards"),
        // job4 arrives on line 5 and leaves on line 9: drop the arrival.
        (with_line(&text, 5, ""), "9: field `event`: `job4` departs but never arrived"),
        // A second arrival of job0.
        (with_line(&text, 5, "job0, 2025-07-30 16:35:55, 1, 7B_8k"), "5: field `id`: duplicate arrival of `job0`"),
    ];
    for (bad, want) in cases {
        let e = read(&bad, Format::Wild).unwrap_err().to_string();
        assert!(e.starts_with("t.trace:") && e.contains(want), "want `{want}`, got `{e}`");
    }
}

#[test]
fn departures_without_arrivals_and_open_jobs_are_errors() {
    let e = read("a, 2025-01-01 00:00:00, -1, 7B_8k\n", Format::Wild).unwrap_err();
    assert_eq!(e.line, 1);
    let e = read("a, 2025-01-01 00:00:00, 1, 7B_8k\n", Format::Wild).unwrap_err();
    assert!(e.to_string().contains("arrives but never departs"), "{e}");
    let e = read("a, 2025-01-01 00:00:00, 1, 7B_8k\na, 2025-01-01 01:00:00, -1, 14B_8k\n", Format::Wild).unwrap_err();
    assert!(e.to_string().contains("left as 14B_8k but arrived as 7B_8k"), "{e}");
    let e = read(
        "a, 2025-01-01 00:00:00, 1, 7B_8k\na, 2025-01-01 01:00:00, -1, 7B_8k\na, 2025-01-01 02:00:00, 1, 7B_8k\n",
        Format::Wild,
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (3, Some("id")));
}

#[test]
fn philly_plain_and_parsed() {
    let plain = "7, 2017-10-03 10:00:00, 1\n8, 2017-10-03 10:30:00, 1\n7, 2017-10-03 12:00:00, -1\n8, 2017-10-04 10:30:00, -1\n";
    let t = read(plain, Format::Philly).unwrap();
    assert_eq!(t.jobs.len(), 2);
    assert_eq!(t.jobs[1].arrival.as_secs_f64(), 1_800.0);
    assert_eq!(t.jobs[0].job_type.to_string(), "7B_8k");
    assert!(t.jobs[0].phase_times.is_none());

    let parsed = "7, 2017-10-03 10:00:00, 1, 120.5, 80, 1.4\n7, 2017-10-03 12:00:00, -1\n";
    assert_eq!(detect_format(parsed), Format::Philly);
    let t = read(parsed, Format::Philly).unwrap();
    let job = &t.jobs[0];
    assert_eq!(job.phase_times.unwrap().rollout.as_secs_f64(), 120.5);
    assert_eq!(job.slo.unwrap().get(), 1.4);

    let e = read("7, 2017-10-03 10:00:00, 1, 120.5, 80, 0.5\n", Format::Philly).unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (1, Some("SLO")));
    let e = read("7, 2017-10-03 10:00:00, 1, -3, 80, 1.5\n", Format::Philly).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("T_roll"));
}

#[test]
fn jsonl_round_trips_generated_traces() {
    let profile = ProfileModel::builtin();
    for mode in [
        weave_trace::GenMode::Production,
        weave_trace::GenMode::Classes {
            profile: weave_trace::ProfileClass::Mixed,
            size: weave_trace::SizeClass::Mixed,
        },
    ] {
        let cfg = weave_trace::GenConfig { mode, ..weave_trace::GenConfig::default_workload() };
        let t = generate::generate(&cfg, &profile);
        let text = write_jsonl(&t);
        let back = read(&text, Format::Jsonl).unwrap();
        assert_eq!(back.jobs.len(), t.jobs.len());
        assert_eq!(back.jobs, t.jobs);
    }
}

#[test]
fn jsonl_errors_name_line_and_field() {
    let ok = r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10}"#;
    let cases = [
        (r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10,"colour":1}"#, None, "unknown field `colour`"),
        (r#"{"id":"b","arrival_s":-1,"type":"7B_8k","iterations":10}"#, Some("arrival_s"), "non-negative"),
        (r#"{"id":"b","arrival_s":0,"type":"7X_8k","iterations":10}"#, Some("type"), "7X_8k"),
        (r#"{"id":"b","arrival_s":0,"model":"7B","iterations":10}"#, Some("type"), "both `model` and `max_tokens`"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k"}"#, Some("iterations"), "exactly one"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"slo":0.5}"#, Some("slo"), "slowdown"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"rollout_s":3}"#, Some("rollout_s"), "both"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":0}"#, Some("iterations"), "at least 1"),
        (r#"{"id":"b","arrival_s":5,"type":"7B_8k","departure_s":5}"#, Some("departure"), "after the arrival"),
        (r#"{"id":"a","arrival_s":0,"type":"7B_8k","iterations":10}"#, Some("id"), "duplicate job id `a`"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10"#, None, "EOF"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"staleness":-1}"#, Some("staleness"), "-1"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"staleness":0.5}"#, Some("staleness"), "0.5"),
        (r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"staleness":9}"#, Some("staleness"), "0 to 8"),
        (
            r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"staleness":"1"}"#,
            Some("staleness"),
            "whole number",
        ),
    ];
    for (bad, field, want) in cases {
        let text = format!("# header\n{ok}\n{bad}\n");
        let e = read(&text, Format::Jsonl).unwrap_err();
        assert_eq!(e.line, 3, "{bad}: {e}");
        assert_eq!(e.field.as_deref(), field, "{bad}: {e}");
        assert!(e.to_string().contains(want), "{bad}: want `{want}` in `{e}`");
    }
    let t = read(&format!("{ok}\n{}\n", r#"{"id":"b","arrival_s":1,"model":"1.5B","max_tokens":"16k","batch":256,"algorithm":"PPO","slo":1.3,"departure_s":3600,"rollout_s":60,"train_s":40}"#), Format::Jsonl).unwrap();
    assert_eq!(t.jobs[1].job_type.to_string(), "1.5B_16k");
    // Bounded staleness reads, and writes back only where set.
    let stale = r#"{"id":"b","arrival_s":0,"type":"7B_8k","iterations":10,"staleness":2}"#;
    let t = read(&format!("{ok}\n{stale}\n"), Format::Jsonl).unwrap();
    assert_eq!((t.jobs[0].staleness, t.jobs[1].staleness), (0, 2));
    let line = |j| serde_json::to_string(&weave_trace::JsonlJob::from_spec(j)).unwrap();
    assert!(!line(&t.jobs[0]).contains("staleness") && line(&t.jobs[1]).contains(r#""staleness":2"#));
}

#[test]
fn empty_trace_is_an_error() {
    assert!(read("\n# nothing\n", Format::Jsonl).is_err());
}

#[test]
fn generator_is_deterministic_and_seed_sensitive() {
    let profile = ProfileModel::builtin();
    let cfg = weave_trace::GenConfig::default_workload();
    let a = write_jsonl(&generate::generate(&cfg, &profile));
    let b = write_jsonl(&generate::generate(&cfg, &profile));
    assert_eq!(a, b);
    let c = write_jsonl(&generate::generate(&weave_trace::GenConfig { seed: 7, ..cfg }, &profile));
    assert_ne!(a, c);
}

#[test]
fn production_mix_looks_like_production() {
    let profile = ProfileModel::builtin();
    let cfg = weave_trace::GenConfig { jobs: 4_000, ..weave_trace::GenConfig::default_workload() };
    let t = generate::generate(&cfg, &profile);
    let s = Summary::of(&t, &profile);
    // Log-normal lifetimes with a 16 h median: mean ~27-28 h, like the authors' tenant.
    assert!((22.0..34.0).contains(&s.mean_lifetime_h), "mean lifetime {}", s.mean_lifetime_h);
    assert!(t.jobs.iter().all(|j| (1.0..=2.0).contains(&j.slo.unwrap().get())));
    let sizes: std::collections::BTreeSet<u32> = t.jobs.iter().map(|j| j.job_type.model.0 / 1000).collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![3, 4, 7, 8, 14, 32]);
}

#[test]
fn class_mode_respects_the_rollout_share() {
    use weave_trace::{GenMode, ProfileClass, SizeClass};
    let profile = ProfileModel::builtin();
    for (class, lo, hi) in [
        (ProfileClass::Balanced, 0.9, 1.1),
        (ProfileClass::RolloutHeavy, 3.0, 4.0),
        (ProfileClass::TrainingHeavy, 0.4, 0.6),
    ] {
        let cfg = weave_trace::GenConfig {
            mode: GenMode::Classes { profile: class, size: SizeClass::Large },
            ..weave_trace::GenConfig::default_workload()
        };
        for j in generate::generate(&cfg, &profile).jobs {
            let p = j.phase_times.unwrap();
            let r = p.rollout.as_secs_f64() / p.train.as_secs_f64();
            assert!((lo..=hi).contains(&r), "{class:?}: rollout/train {r}");
            assert!(j.job_type.model.0 >= 14_000);
        }
    }
}
