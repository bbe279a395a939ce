//! Context-switch times on one 8-GPU node [paper, Fig. 4], seconds. Cold = load from disk and
//! initialise; warm = from host DRAM with processes and communicators kept alive.
//!
//! | model         | 3B   | 7B   | 14B  | 32B  | 70B   |
//! | rollout cold  | 25.3 | 38.8 | 60.4 | 81.7 | 135.8 |
//! | rollout warm  | 0.8  | 0.9  | 1.8  | 1.7  |       |
//! | training cold | 26.7 | 32.7 | 59.0 | 81.2 | 116   |
//! | training warm | 1.9  | 4.1  | 4.7  | 5.9  |       |
//!
//! Nodes of a multi-node job load in parallel, so the time does not depend on width.
//! Between points we interpolate linearly in model size.

use crate::interp::piecewise;
use weave_core::{Micros, ModelSize, Pool};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwitchKind {
    /// The incoming job's state is resident in the node's host DRAM.
    Warm,
    /// The incoming job's state must be loaded from storage.
    Cold,
}

const ROLLOUT_COLD: &[(f64, f64)] = &[(3.0, 25.3), (7.0, 38.8), (14.0, 60.4), (32.0, 81.7), (70.0, 135.8)];
const ROLLOUT_WARM: &[(f64, f64)] = &[(3.0, 0.8), (7.0, 0.9), (14.0, 1.8), (32.0, 1.7)];
const TRAINING_COLD: &[(f64, f64)] = &[(3.0, 26.7), (7.0, 32.7), (14.0, 59.0), (32.0, 81.2), (70.0, 116.0)];
const TRAINING_WARM: &[(f64, f64)] = &[(3.0, 1.9), (7.0, 4.1), (14.0, 4.7), (32.0, 5.9)];

/// Time to switch a node of `pool` to a job of `model`.
pub fn switch_time(model: ModelSize, pool: Pool, kind: SwitchKind) -> Micros {
    let points = match (pool, kind) {
        (Pool::Rollout, SwitchKind::Cold) => ROLLOUT_COLD,
        (Pool::Rollout, SwitchKind::Warm) => ROLLOUT_WARM,
        (Pool::Training, SwitchKind::Cold) => TRAINING_COLD,
        (Pool::Training, SwitchKind::Warm) => TRAINING_WARM,
    };
    // Below the smallest measured model, keep the 3B figure: start-up overheads dominate.
    let x = model.params_b().max(points[0].0);
    Micros::from_secs_f64(piecewise(points, x))
}
