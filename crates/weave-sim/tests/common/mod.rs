//! What several of the replay's test files build the same way.

/// A JSON Lines trace of jobs, one per tuple (arrival s, type index, iterations, SLO in tenths
/// above 1), named j0, j1, ... in order.
pub fn random_trace(jobs: &[(u32, u8, u64, u8)]) -> String {
    let types = ["7B_8k", "3B_8k", "14B_8k", "8B_32k"];
    jobs.iter()
        .enumerate()
        .map(|(i, (arrival, t, iterations, slo))| {
            format!(
                r#"{{"id":"j{i}","arrival_s":{arrival},"type":"{}","iterations":{iterations},"slo":{}}}"#,
                types[*t as usize % types.len()],
                1.0 + *slo as f64 / 10.0
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
