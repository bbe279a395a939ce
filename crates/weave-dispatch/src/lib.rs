//! Intra-group co-execution: the runtime heart of Weave.
//!
//! [`Dispatcher`] is a pure state machine (sans-IO): the simulator feeds it simulated time and
//! the control-plane server feeds it wall-clock time; both get the same decisions. It enforces
//! every member's on-policy barrier, serves each pool in cyclic round-robin order, and charges
//! warm or cold switch time whenever a pool changes hands.
//!
//! [`order`] chooses the cyclic order each resource serves a group's members in, and
//! [`cycle`] gives a fixed order's exact steady-state period (the maximum cycle mean of its
//! timed event graph); [`timing`] turns that into the group's prediction, the one admission
//! uses and the dispatcher runs. [`memory`] checks host-DRAM residency, and [`rollout`] models
//! a rollout request by request, with long-tail migration.

pub mod cycle;
mod dispatcher;
pub mod from_model;
mod load;
mod log;
pub mod memory;
pub mod order;
mod protocol;
pub mod rollout;
pub mod timing;

pub use dispatcher::{Dispatcher, RolloutHold};
pub use log::{EventRecord, LogEntry, LogKind};
pub use memory::{GroupLimits, MemoryUse};
pub use protocol::{Action, DispatchError, Fairness, Input, MemberSpec, Phase, SwitchCosts, MAX_STALENESS};
pub use timing::{GroupTiming, MemberTiming, PoolUse, TimingMember};
