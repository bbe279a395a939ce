//! Weave's pure domain model.
//!
//! Everything here is plain data plus arithmetic: no I/O, no clock, no async. The simulator
//! and the control-plane server both build on these types.

pub mod agentic;
pub mod cluster;
pub mod events;
pub mod hardware;
pub mod job;
pub mod lora;
pub mod placement;
pub mod units;

pub use cluster::{
    parse_preemption_trace, ClusterConfig, ConfigError, NetworkConfig, PoolConfig, Preemption, SpotConfig,
};
pub use events::EventQueue;
pub use hardware::{GpuKind, GpuSpec, GPUS_PER_NODE};
pub use job::{
    parse_tokens, Algorithm, JobId, JobSpec, JobSpecError, JobType, Lifetime, ModelSize, PhaseTimes, Priority, Slo,
    MAX_STALENESS,
};
pub use placement::{GroupId, NodeId, Placement, Pool};
pub use units::{Bandwidth, Bytes, Micros, Money, Price};
