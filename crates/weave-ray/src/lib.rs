//! Weave's Ray execution backend. Each Weave node is a Ray node labelled
//! `weave.io/node=<name>` and `weave.io/pool=<pool>` that carries the custom resource
//! `weave_node_<name>`; `weave serve --backend ray` builds its fixed inventory from Ray's
//! State API, launches admitted jobs through Ray's Job Submission API (with their pinned nodes
//! and a job token in the environment), feeds Ray's node and job status back into the plane
//! as durable records, and stops in Ray what Weave ended. Scheduling stays in the plane: this
//! crate only reconciles.

pub mod backend;
pub mod client;
pub mod inventory;
pub mod launch;
pub mod reconcile;

pub use backend::{BackendConfig, RayBackend};
pub use client::{RayClient, RayError};
pub use inventory::{Inventory, InventoryError};
