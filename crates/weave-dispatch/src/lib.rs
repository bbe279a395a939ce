//! Intra-group co-execution: the runtime heart of Weave.
//!
//! [`Dispatcher`] is a pure state machine (sans-IO): the simulator feeds it simulated time and
//! the control-plane server feeds it wall-clock time; both get the same decisions. It enforces
//! every member's on-policy barrier, serves each pool in cyclic round-robin order, and charges
//! warm or cold switch time whenever a pool changes hands.
//!
//! [`timing`] predicts a candidate group's steady state (closed form where the brief's theorem
//! applies, otherwise by driving the real dispatcher), [`memory`] checks host-DRAM residency,
//! and [`rollout`] models a rollout request by request, with long-tail migration.

mod dispatcher;
pub mod from_model;
pub mod memory;
pub mod rollout;
pub mod timing;

pub use dispatcher::{
    Action, DispatchError, Dispatcher, Fairness, Input, LogEntry, LogKind, MemberSpec, Phase, SwitchCosts,
};
pub use memory::{GroupLimits, MemoryUse};
pub use timing::{GroupTiming, MemberTiming, PoolUse, TimingMember};
