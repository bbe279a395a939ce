//! Calibrated models of an RL post-training job: what each phase costs in time on each kind of
//! hardware, how much host memory its cached state takes, how long switching and weight sync
//! take, and how runtime durations vary around the admission estimate.
//!
//! Pure functions of their inputs: no I/O, no clock. Every random draw takes its generator as
//! an argument.

pub mod agentic;
mod interp;
pub mod lora;
pub mod profile;
pub mod rng;
pub mod runtime;
pub mod shared_engine;
pub mod spot;
pub mod state;
pub mod switch;
pub mod sync;
pub mod syncplan;

pub use profile::{Deployment, Estimate, EstimateSource, ProfileError, ProfileModel, REFERENCE_BATCH};
pub use rng::{named_stream, Stream};
pub use runtime::{Drift, RuntimeModel};
pub use spot::{Recovered, Recovery, SpotModel};
pub use state::{
    job_rollout_state, job_training_state, lora_training_state_per_node, rollout_state_per_node,
    training_state_per_node,
};
pub use switch::{switch_time, SwitchKind};
pub use sync::{sync_bytes, sync_time, sync_time_of, SyncPlanKind};

use weave_core::{JobSpec, Lifetime, Micros};

/// Iterations a job runs: given, or for the authors' traces its solo lifetime divided by its
/// solo iteration time (at least one).
pub fn iterations(job: &JobSpec, solo_iteration: Micros) -> u64 {
    match job.lifetime {
        Lifetime::Iterations(n) => n,
        Lifetime::SoloUntil(end) => {
            let life = end.saturating_sub(job.arrival).0;
            (life / solo_iteration.0.max(1)).max(1)
        }
    }
}
