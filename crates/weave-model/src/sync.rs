//! Weight synchronisation across the inter-cluster link.
//!
//! Calibration [paper, Fig. 12], 8 H800 -> 8 H20, seconds: topology-aware 0.9 / 1.7 / 3.9 and
//! flat broadcast 7.5 / 13.8 / 30.7 for 7B / 14B / 32B (bf16 weights: 14 / 28 / 64 GB).
//! Both series are linear in bytes: the topology-aware plan moves 8 shards over 8 parallel
//! 20 Gb/s streams (~17 GB/s effective), the flat broadcast is bound by one stream
//! (~2.1 GB/s). Both imply ~85% of line rate per stream, plus a fixed start-up cost
//! (0.06 s topology-aware, 0.6 s flat: more bucket round-trips). The local broadcast over the
//! 400 Gb/s fabric hides under the slow-link transfer.

use weave_core::{Bytes, Micros, ModelSize, NetworkConfig};

pub use crate::syncplan::{SyncPlanKind, STREAM_EFFICIENCY};

/// Bytes synchronised per iteration: the bf16 weights (2 bytes per parameter).
pub fn sync_bytes(model: ModelSize) -> Bytes {
    Bytes((model.params() * 2.0).round() as u64)
}

/// Predicted sync time for a job with `train_gpus` senders and `rollout_gpus` receivers
/// (8 GPUs per node): the prediction of the explicit plan (see `syncplan`).
pub fn sync_time(
    model: ModelSize,
    plan: SyncPlanKind,
    train_gpus: u32,
    rollout_gpus: u32,
    net: &NetworkConfig,
) -> Micros {
    sync_time_of(sync_bytes(model), plan, train_gpus, rollout_gpus, net)
}

/// Predicted time to sync `bytes` (a LoRA job's adapter: its engine holds the base already).
pub fn sync_time_of(
    bytes: Bytes,
    plan: SyncPlanKind,
    train_gpus: u32,
    rollout_gpus: u32,
    net: &NetworkConfig,
) -> Micros {
    let topo = crate::syncplan::Topology::new(net, train_gpus, rollout_gpus, weave_core::GPUS_PER_NODE);
    crate::syncplan::predict(&crate::syncplan::plan(plan, bytes.0, &topo), &topo)
}
