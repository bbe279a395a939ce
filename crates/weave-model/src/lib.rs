//! Calibrated models of an RL post-training job: what each phase costs in time on each kind of
//! hardware, how much host memory its cached state takes, how long switching and weight sync
//! take, and how runtime durations vary around the admission estimate.
//!
//! Pure functions of their inputs: no I/O, no clock. Every random draw takes its generator as
//! an argument.

mod interp;
pub mod profile;
pub mod runtime;
pub mod state;
pub mod switch;
pub mod sync;

pub use profile::{Deployment, Estimate, EstimateSource, ProfileError, ProfileModel, REFERENCE_BATCH};
pub use runtime::{Drift, RuntimeModel};
pub use state::{rollout_state_per_node, training_state_per_node};
pub use switch::{switch_time, SwitchKind};
pub use sync::{sync_bytes, sync_time, SyncPlanKind};
