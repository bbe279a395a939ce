//! LoRA jobs through the binary: the generator, the replay against `dedicated`, `colocated`
//! and `weave-full-model` with the cost floor, and bad declarations refused naming the line
//! and the field.

mod common;

use common::{stderr, stdout, temp_file, weave};

const JOB: &str = r#"{"id":"a","arrival_s":0,"type":"7B_8k","batch":128,"iterations":20,"slo":1.5,"lora":{"base":"qwen2.5-7b","rank":16}}"#;

#[test]
fn a_lora_mix_is_generated_and_replayed_against_its_baselines_with_the_floor() {
    let o = weave(&["trace", "generate", "--mode", "lora", "--jobs", "40", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().filter(|l| l.contains("\"lora\":{\"base\"")).count(), 40, "{text}");
    let t = temp_file("lora.jsonl", &text);
    let o = weave(&["simulate", "--trace", t.to_str().unwrap(), "--policy", "weave,dedicated,colocated", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["weave", "solo-disagg", "colocated", "weave-full-model"], "dedicated is solo-disagg");
    let iterations: Vec<u64> = policies.iter().map(|p| p["iterations"].as_u64().unwrap()).collect();
    assert!(iterations.windows(2).all(|w| w[0] == w[1]), "equal work: {iterations:?}");
    assert!(policies.iter().all(|p| p["jobs"].as_u64() == Some(40)), "every member is a job of its own");
    let floor = &v["lora_floor"];
    let floor_ipd = floor["iterations_per_k_dollars"].as_f64().unwrap();
    for p in policies {
        // No policy runs below the floor: it is what every GPU-second busy would cost.
        assert!(p["iterations_per_k_dollars"].as_f64().unwrap() <= floor_ipd, "{p} above {floor}");
    }
    assert!(floor["dollars"].as_f64().unwrap() <= floor["unshared_dollars"].as_f64().unwrap());
    let o = weave(&["simulate", "--trace", t.to_str().unwrap(), "--policy", "weave"]);
    assert!(stdout(&o).contains("LoRA floor: $"), "{}", stdout(&o));
}

#[test]
fn a_bad_lora_declaration_is_refused_naming_the_line_and_field() {
    for (bad, field) in [
        (JOB.replace("qwen2.5-7b", "qwen9"), "field `lora.base`: unknown base `qwen9`"),
        (JOB.replace("7B_8k", "8B_8k"), "field `lora.base`: `qwen2.5-7b` has 7B parameters; the job's type says 8B"),
        (JOB.replace("\"rank\":16", "\"rank\":1000"), "field `lora.rank`: from 1 to 512"),
        (
            JOB.replace("\"rank\":16", "\"rank\":16,\"targets\":[\"lm_head\"]"),
            "field `lora.targets`: unknown module `lm_head`",
        ),
        (JOB.replace("\"rank\":16", "\"rank\":16,\"alpha\":32"), "unknown field `alpha`"),
    ] {
        let t = temp_file("bad-lora.jsonl", &format!("# a comment\n{bad}\n"));
        let o = weave(&["simulate", "--trace", t.to_str().unwrap()]);
        assert!(!o.status.success(), "{bad}");
        let e = stderr(&o);
        assert!(e.contains(":2") && e.contains(field), "{bad}: {e}");
    }
}
