//! How actual iterations vary around the admission estimate.
//!
//! Admission uses the conservative estimate: the measured profile, whose rollouts run until
//! the longest response hits the max length. At run time response lengths are long-tailed
//! and drift over training (they usually lengthen as the policy learns to reason) [paper]:
//!
//! - the mean length fraction of an iteration is `mean_fraction x drift(progress)`;
//! - rollout lasts until the longest response ends: `rollout = cons x (prefill + (1 -
//!   prefill) x min(1, mean x G)) x (1 + w x (drift - 1))`, with G log-normal (the
//!   longest-to-mean ratio of a batch): without drift it never exceeds the conservative
//!   estimate; with drift more tokens per step slow decoding down (weight w);
//! - training scales with the tokens generated: `train = cons x mean / mean_fraction x N`,
//!   N log-normal noise; upward drift pushes training past the estimate, which is how a
//!   group that fit at admission can break an SLO later.
//!
//! The constants are assumptions, not published figures: the brief gives the shape, not the
//! numbers.

use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};
use weave_core::PhaseTimes;

/// How a job's response lengths change over its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Drift {
    #[default]
    None,
    /// Mean length grows by `extent` (0.5 = +50%) from the first to the last iteration.
    Increasing { extent: f64 },
    /// Mean length shrinks by `extent` (0.3 = -30%) from the first to the last iteration.
    Decreasing { extent: f64 },
}

impl Drift {
    /// Multiplier on the mean length at `progress` in [0, 1] of the job's life.
    pub fn factor(self, progress: f64) -> f64 {
        let p = progress.clamp(0.0, 1.0);
        match self {
            Drift::None => 1.0,
            Drift::Increasing { extent } => 1.0 + extent.max(0.0) * p,
            Drift::Decreasing { extent } => (1.0 - extent.clamp(0.0, 0.8) * p).max(0.2),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeModel {
    /// Mean response length as a fraction of the max, before drift.
    pub mean_fraction: f64,
    /// Median ratio of the longest response to the mean in one batch.
    pub longest_to_mean: f64,
    /// Log-space spread of that ratio.
    pub longest_sigma: f64,
    /// Share of rollout time that does not depend on length (prefill, engine overheads).
    pub prefill_share: f64,
    /// Log-space spread of training time around its token-proportional value.
    pub train_sigma: f64,
    /// How much of a drift in mean length shows in rollout time (more tokens per step:
    /// slower memory-bound decode); the longest response stays capped.
    pub rollout_drift_weight: f64,
}

impl Default for RuntimeModel {
    fn default() -> Self {
        RuntimeModel {
            mean_fraction: 0.5,
            longest_to_mean: 2.2,
            longest_sigma: 0.2,
            prefill_share: 0.15,
            train_sigma: 0.08,
            rollout_drift_weight: 0.5,
        }
    }
}

impl RuntimeModel {
    /// A deterministic model: every iteration takes exactly the conservative estimate.
    pub fn deterministic() -> Self {
        RuntimeModel {
            mean_fraction: 1.0,
            longest_to_mean: 1.0,
            longest_sigma: 0.0,
            prefill_share: 0.0,
            train_sigma: 0.0,
            rollout_drift_weight: 0.5,
        }
    }

    /// Draws one iteration's phase durations. `rng` must be the job's own named stream so every
    /// policy sees the same draws for the same job.
    pub fn sample<R: Rng + ?Sized>(
        &self,
        conservative: PhaseTimes,
        progress: f64,
        drift: Drift,
        rng: &mut R,
    ) -> PhaseTimes {
        let mean = self.mean_fraction * drift.factor(progress);
        let longest = (mean * lognormal(self.longest_to_mean, self.longest_sigma, rng)).min(1.0);
        let drifted = 1.0 + self.rollout_drift_weight * (drift.factor(progress) - 1.0);
        let roll_factor = (self.prefill_share + (1.0 - self.prefill_share) * longest) * drifted;
        let train_factor = mean / self.mean_fraction * lognormal(1.0, self.train_sigma, rng);
        PhaseTimes { rollout: conservative.rollout.scale(roll_factor), train: conservative.train.scale(train_factor) }
    }
}

fn lognormal<R: Rng + ?Sized>(median: f64, sigma: f64, rng: &mut R) -> f64 {
    if sigma <= 0.0 {
        return median;
    }
    match LogNormal::new(median.ln(), sigma) {
        Ok(d) => d.sample(rng),
        Err(_) => median,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;
    use weave_core::Micros;

    const CONS: PhaseTimes = PhaseTimes { rollout: Micros(100_000_000), train: Micros(80_000_000) };

    #[test]
    fn rollout_never_exceeds_the_conservative_estimate_without_drift() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let m = RuntimeModel::default();
        for i in 0..10_000 {
            let p = m.sample(CONS, i as f64 / 10_000.0, Drift::None, &mut rng);
            assert!(p.rollout <= CONS.rollout);
        }
    }

    #[test]
    fn upward_drift_lengthens_rollout_by_half_its_extent() {
        let m = RuntimeModel::deterministic();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let late = m.sample(CONS, 1.0, Drift::Increasing { extent: 0.4 }, &mut rng);
        // Deterministic model: factor 1 + 0.5 x 0.4 on rollout, 1.4 on training.
        assert_eq!(late.rollout, CONS.rollout.scale(1.2));
        assert_eq!(late.train, CONS.train.scale(1.4));
    }

    #[test]
    fn upward_drift_lengthens_training() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let m = RuntimeModel::default();
        let avg = |progress: f64, rng: &mut Xoshiro256PlusPlus| {
            (0..2_000)
                .map(|_| m.sample(CONS, progress, Drift::Increasing { extent: 0.5 }, rng).train.as_secs_f64())
                .sum::<f64>()
                / 2_000.0
        };
        let early = avg(0.0, &mut rng);
        let late = avg(1.0, &mut rng);
        assert!((early / 80.0 - 1.0).abs() < 0.05, "early {early}");
        assert!((late / early - 1.5).abs() < 0.05, "late/early {}", late / early);
    }

    #[test]
    fn deterministic_model_returns_the_estimate() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        assert_eq!(RuntimeModel::deterministic().sample(CONS, 0.3, Drift::None, &mut rng), CONS);
    }

    #[test]
    fn same_seed_same_draws() {
        let m = RuntimeModel::default();
        let run = || {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
            (0..100).map(|i| m.sample(CONS, i as f64 / 100.0, Drift::None, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
