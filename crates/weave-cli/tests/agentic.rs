//! Agentic jobs through the binary: the generator, the replay with an environment pool and the
//! agentic baselines, and bad input refused naming the file, the line or job, and the field.

mod common;

use common::{stderr, stdout, temp_file, weave};

const SWE_JOB: &str = r#"{"id":"swe","arrival_s":0,"type":"8B_8k","batch":32,"iterations":10,"agentic":{"turns":{"short_mean":4,"long_mean":20,"long_share":0.5,"max":60},"gen_s_per_turn":2,"env":{"dist":"log_normal","p50_s":1,"p99_s":3},"startup":{"cold_s":40,"cached_s":0.5,"cached_share":0.5},"sandbox":{"cores":2,"mem_gib":8}}}"#;

#[test]
fn an_agentic_workload_is_generated_and_replayed_against_the_agentic_baselines() {
    let o = weave(&["trace", "generate", "--mode", "agentic", "--class", "mixed", "--jobs", "8", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().filter(|l| l.contains("\"agentic\"")).count(), 8, "{text}");
    let t = temp_file("agentic.jsonl", &text);
    let o = weave(&["simulate", "--trace", t.to_str().unwrap(), "--env-nodes", "4", "--policy", "weave", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v["policies"].as_array().unwrap().iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["weave", "weave-two-tier", "rollart"]);
    for p in v["policies"].as_array().unwrap() {
        assert!(p["environment"]["core_hours"].as_f64().unwrap() > 0.0, "{p}");
    }
    let o = weave(&["trace", "generate", "--class", "swe"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("use it with --mode agentic"), "{}", stderr(&o));
}

/// `--staleness K` gives every generated job bounded staleness K (the comparison with
/// RollArt at its own staleness) and changes nothing else; above the bound it is refused.
#[test]
fn a_workload_is_generated_at_a_staleness_and_nothing_else_changes() {
    let args = ["trace", "generate", "--mode", "agentic", "--class", "mixed", "--jobs", "4", "--seed", "3"];
    let on_policy = stdout(&weave(&args));
    let o = weave(&[&args[..], &["--staleness", "1"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let stale = stdout(&o);
    assert_eq!(stale.matches("\"staleness\":1,").count(), 4, "{stale}");
    assert_eq!(stale.replace("\"staleness\":1,", ""), on_policy);
    let o = weave(&[&args[..], &["--staleness", "9"]].concat());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--staleness: at most 8, got 9"), "{}", stderr(&o));
}

#[test]
fn an_agentic_job_the_cluster_cannot_host_is_refused_naming_the_field() {
    let t = temp_file("swe.jsonl", SWE_JOB);
    let o = weave(&["simulate", "--trace", t.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("job `swe`: `agentic`: an agentic job needs an environment pool") && e.contains("--env-nodes"),
        "{e}"
    );
    let big = temp_file("big.jsonl", &SWE_JOB.replace("\"mem_gib\":8", "\"mem_gib\":512"));
    let o = weave(&["simulate", "--trace", big.to_str().unwrap(), "--env-nodes", "2"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`agentic.sandbox.mem_gib`: 512 GiB, above an environment node's 256"),
        "{}",
        stderr(&o)
    );
    let negative = temp_file("negative.jsonl", &format!("\n{}", SWE_JOB.replace("\"p50_s\":1", "\"p50_s\":-1")));
    let o = weave(&["simulate", "--trace", negative.to_str().unwrap(), "--env-nodes", "2"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(":2: field `agentic.env.p50_s`"), "{}", stderr(&o));
    let o = weave(&["simulate", "--trace", t.to_str().unwrap(), "--env-nodes", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("env.nodes"), "{}", stderr(&o));
}
