//! Readers never panic, whatever bytes they are given.

use proptest::prelude::*;
use weave_trace::{parse, Format, ReadOptions};

const FORMATS: [Format; 3] = [Format::Jsonl, Format::Wild, Format::Philly];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        for f in FORMATS {
            let _ = parse(&text, f, "fuzz", &ReadOptions::default());
        }
    }

    #[test]
    fn plausible_lines_never_panic(lines in proptest::collection::vec(
        (0u8..6, "[a-z0-9]{0,4}", 0u32..40, -2i8..3, "[0-9A-Za-z_.]{0,7}", "[-0-9.e]{0,6}"), 0..12)) {
        let text: String = lines.iter().map(|(shape, id, hour, ev, ty, num)| match shape {
            0 => format!("{id}, 2025-07-{:02} {:02}:00:00, {ev}, {ty}\n", 1 + hour / 24, hour % 24),
            1 => format!("{id}, 2025-07-01 {:02}:00:00, {ev}\n", hour % 24),
            2 => format!("{id}, 2025-07-01 {:02}:00:00, {ev}, {num}, {num}, {num}\n", hour % 24),
            3 => format!("{{\"id\":\"{id}\",\"arrival_s\":{num},\"type\":\"{ty}\",\"iterations\":{hour}}}\n"),
            4 => format!("{{\"id\":\"{id}\",\"arrival_s\":{hour},\"model\":\"{ty}\",\"max_tokens\":\"{num}\",\"departure_s\":{num}}}\n"),
            _ => format!("{ty}, {num}\n"),
        }).collect();
        for f in FORMATS {
            let _ = parse(&text, f, "fuzz", &ReadOptions::default());
        }
    }
}

/// Every single-line mutation of the real trace is either accepted or rejected with a line
/// number inside the file; never a panic.
#[test]
fn mutated_wild_trace_never_panics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/rollmux/wild.trace");
    let Some(text) = weave_testkit::read_or_skip("mutated_wild_trace_never_panics", std::path::Path::new(path)) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    let mutations: [fn(&str) -> String; 5] = [
        |l| l.replacen(", ", ",", 1),
        |l| l.chars().rev().collect(),
        |l| l[..l.len() / 2].to_string(),
        |l| l.replace('1', "\u{1F600}"),
        |_| String::new(),
    ];
    for i in (0..lines.len()).step_by(7) {
        for m in mutations {
            let mut copy = lines.clone();
            let mutated = m(lines[i]);
            copy[i] = &mutated;
            if let Err(e) = parse(&copy.join("\n"), Format::Wild, "w", &ReadOptions::default()) {
                assert!(e.line >= 1 && e.line <= lines.len(), "line {} out of range: {e}", e.line);
            }
        }
    }
}
