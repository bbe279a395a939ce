//! An agentic job as placement sees it: its declared trajectories, not the profile's
//! single-turn rollout, with sandboxes started during the previous training (the replay's
//! three-tier planning, from the same model).

use weave_core::agentic::AgenticSpec;
use weave_core::PhaseTimes;
use weave_place::PlaceJob;

/// Sampled rollouts behind an agentic job's plan (computed once per declaration: see
/// `weave_model::agentic::planned_rollouts`).
const PLAN_SAMPLES: u32 = 8;

/// Puts the model's rollouts in `place` (disaggregated and co-located), its training as the
/// profile gave it.
pub(super) fn plan(place: &mut PlaceJob, spec: &AgenticSpec, batch: u32) {
    let colo = place.colo.unwrap_or(place.times);
    let speed = colo.rollout.0 as f64 / place.times.rollout.0.max(1) as f64;
    let (rollout, colo_rollout) =
        weave_model::agentic::planned_rollouts(spec, batch, place.times.train, speed, (0, PLAN_SAMPLES));
    place.times.rollout = rollout;
    place.colo = place.colo.map(|c| PhaseTimes { rollout: colo_rollout, ..c });
}
