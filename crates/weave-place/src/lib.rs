//! Inter-group placement: where each arriving job runs.
//!
//! [`Placer`] admits jobs online (direct packing, rollout scaling, isolated provisioning,
//! under residency and per-member SLOs from the group timing model), handles departures, and
//! hosts the baseline policies. [`optimal`] finds the cheapest feasible grouping of a small
//! set of jobs exactly. Pure: no I/O, no clock.

pub mod consolidate;
pub mod group;
pub mod job;
pub mod lending;
pub mod lora;
pub mod optimal;
pub mod placer;
pub mod queue;
pub mod share;

pub use group::{Block, Group, Member, Prediction, Residency};
pub use job::{PlaceJob, Variation};

/// Default allowed risk that a job's life slowdown exceeds its SLO under run-time variation.
pub const DEFAULT_SLO_EPSILON: f64 = 0.01;
pub use placer::{
    Decision, DecisionKind, Departure, OptionCost, PlaceError, PlacePolicy, Placer, PlacerConfig, Target,
};
