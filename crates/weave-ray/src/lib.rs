//! Weave's Ray execution backend. Each Weave node is a Ray node labelled
//! `weave.io/node=<name>` and `weave.io/pool=<pool>` that carries the custom resource
//! `weave_node_<name>`; `weave serve --backend ray` builds its fixed inventory from Ray's
//! State API and runs `weave-backend`'s loop over [`RayDriver`]: admitted jobs launched
//! through Ray's Job Submission API (with their pinned nodes and a job token in the
//! environment), Ray's node and job status fed back into the plane, what Weave ended stopped
//! in Ray. Scheduling stays in the plane; the reconcile policy is `weave-backend`'s.

pub mod client;
pub mod driver;
pub mod inventory;
pub mod launch;

pub use client::{RayClient, RayError};
pub use driver::{Connected, RayDriver};
pub use inventory::{Inventory, InventoryError};
