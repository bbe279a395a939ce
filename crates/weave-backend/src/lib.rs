//! Weave's execution backends, the half they share. A backend launches the jobs the control
//! plane admitted on a cluster manager and feeds what that manager reports back as durable
//! records. The policy (what to launch, what to stop, when a node is lost or draining, when a
//! job has failed) is written once here: [`reconcile`] is pure, [`Backend`] is the loop that
//! gathers both views and carries the steps out. A cluster manager implements
//! [`ClusterDriver`] (`weave-ray`'s over Ray's HTTP APIs, `weave-slurm`'s over Slurm's
//! commands), exactly as the replay and the server share `queue::start_one` over
//! `QueueDriver`.

pub mod driver;
pub mod env;
pub mod reconcile;
pub mod run;

pub use driver::{pool_sizes, ClusterDriver, DriverError, LaunchRequest, LaunchStatus, Listed, NodeHealth};
pub use env::{job_env, job_nodes, launch_request};
pub use reconcile::{launch_id, parse_launch_id, reconcile, JobSnapshot, Seen, Step, World};
pub use run::{Backend, BackendConfig, DRAIN_NOTICE};
