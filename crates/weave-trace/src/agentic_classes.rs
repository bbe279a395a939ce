//! Synthetic agentic job classes for `weave trace generate --mode agentic` (labelled
//! synthetic wherever they are used), from the published shapes in the brief, section 7:
//!
//! - `swe`: tens of turns (bimodal: short about 5, long about 30, at most 100), shell actions
//!   of 0.3-3 s (log-normal, p50 1 s, p99 3 s), a sandbox of 2 cores and 8 GiB held for the
//!   trajectory's life, cold starts of about 55 s (RollArt's start-up is 15% of a 366 s
//!   iteration) for the half not cached, and a failed start about once in ten iterations of
//!   128 trajectories, noticed after 150 s (RollArt: time-outs take an iteration from 366 to
//!   513 s);
//! - `search`: a few turns (mean about 2.6), a local retriever (p50 0.16 s, p99 2.7 s), tiny
//!   pausable sandboxes (PolyTrace Search-R1);
//! - `math-tool`: a code interpreter, a handful of turns, steps of p50 0.5 s and p99 5 s, a
//!   pausable sandbox of 1 core;
//! - `mixed`: each job one of the three, equally likely.
//!
//! Generation per turn is set so that generation is about half of a SWE iteration, as in
//! RollArt's run, and scales with the model's rollout speed in the profile.

use weave_core::agentic::{AgenticSpec, LatencySpec, SandboxSpec, StartupSpec, TurnsSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgenticClass {
    Swe,
    Search,
    MathTool,
    Mixed,
}

impl AgenticClass {
    /// The class a job of a `mixed` workload gets from its draw in [0, 3).
    pub fn pick(self, draw: u32) -> AgenticClass {
        match (self, draw % 3) {
            (AgenticClass::Mixed, 0) => AgenticClass::Swe,
            (AgenticClass::Mixed, 1) => AgenticClass::Search,
            (AgenticClass::Mixed, _) => AgenticClass::MathTool,
            (c, _) => c,
        }
    }

    /// Model sizes (billions) its jobs draw from, and their generation length (thousands of
    /// tokens).
    pub fn models(self) -> (&'static [u32], u32) {
        match self {
            AgenticClass::Swe => (&[8, 14, 32], 8),
            AgenticClass::Search => (&[3, 7], 4),
            AgenticClass::MathTool | AgenticClass::Mixed => (&[7, 14], 8),
        }
    }

    /// The declaration, with `gen_scale` the job's rollout speed against an 8B model's.
    pub fn spec(self, gen_scale: f64) -> AgenticSpec {
        match self {
            AgenticClass::Swe => AgenticSpec {
                turns: TurnsSpec { short_mean: 5.0, long_mean: 30.0, long_share: 0.5, max: 100 },
                gen_s_per_turn: 1.15 * gen_scale,
                env: LatencySpec::LogNormal { p50_s: 1.0, p99_s: 3.0 },
                startup: StartupSpec {
                    cold_s: 55.0,
                    cached_s: 0.6,
                    cached_share: 0.0,
                    failure_rate: 0.0008,
                    timeout_s: 150.0,
                },
                reward_s: 10.0,
                sandbox: SandboxSpec { cores: 2.0, mem_gib: 8.0, pausable: false },
            },
            AgenticClass::Search => AgenticSpec {
                turns: TurnsSpec { short_mean: 2.0, long_mean: 6.0, long_share: 0.15, max: 10 },
                gen_s_per_turn: 12.0 * gen_scale,
                env: LatencySpec::LogNormal { p50_s: 0.16, p99_s: 2.7 },
                startup: StartupSpec {
                    cold_s: 1.0,
                    cached_s: 0.1,
                    cached_share: 0.95,
                    failure_rate: 0.0,
                    timeout_s: 0.0,
                },
                reward_s: 0.0,
                sandbox: SandboxSpec { cores: 0.25, mem_gib: 1.0, pausable: true },
            },
            AgenticClass::MathTool | AgenticClass::Mixed => AgenticSpec {
                turns: TurnsSpec { short_mean: 2.0, long_mean: 8.0, long_share: 0.3, max: 16 },
                gen_s_per_turn: 10.0 * gen_scale,
                env: LatencySpec::LogNormal { p50_s: 0.5, p99_s: 5.0 },
                startup: StartupSpec {
                    cold_s: 5.0,
                    cached_s: 0.5,
                    cached_share: 0.9,
                    failure_rate: 0.0,
                    timeout_s: 0.0,
                },
                reward_s: 0.5,
                sandbox: SandboxSpec { cores: 1.0, mem_gib: 2.0, pausable: true },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_declares_a_valid_rollout() {
        for c in [AgenticClass::Swe, AgenticClass::Search, AgenticClass::MathTool, AgenticClass::Mixed] {
            assert_eq!(c.spec(1.0).validate(), Ok(()), "{c:?}");
        }
        let picked: Vec<_> = (0..3).map(|d| AgenticClass::Mixed.pick(d)).collect();
        assert_eq!(picked, [AgenticClass::Swe, AgenticClass::Search, AgenticClass::MathTool]);
        assert_eq!(AgenticClass::Swe.pick(1), AgenticClass::Swe);
    }
}
