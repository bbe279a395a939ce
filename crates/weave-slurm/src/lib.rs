//! Weave's Slurm backend, first part (issue #55): what Slurm reports, parsed ([`status`]), and
//! the commands that launch, list and cancel jobs ([`client`]). The reconcile loop that turns
//! these into Weave's node and job records is the Ray backend's (`weave-ray::reconcile`), to be
//! shared behind a driver trait; it is not wired to Slurm yet.

pub mod client;
pub mod status;

pub use client::{Launch, SlurmClient, SlurmError};
pub use status::{JobState, NodeState, SlurmJob, SlurmNode, StatusError};
