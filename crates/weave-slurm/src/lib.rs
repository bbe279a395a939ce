//! Weave's Slurm execution backend: what Slurm reports, parsed ([`status`]), the commands that
//! launch, list and cancel jobs ([`client`]), and Slurm as a driver of `weave-backend`'s
//! reconcile loop ([`driver`]), which `weave serve --backend slurm` runs.

pub mod client;
pub mod driver;
pub mod status;

pub use client::{Launch, SlurmClient, SlurmError};
pub use driver::SlurmDriver;
pub use status::{JobState, NodeState, SlurmJob, SlurmNode, StatusError};
