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

/// Fraction of line rate one inter-cluster stream achieves (fitted to Fig. 12).
pub const STREAM_EFFICIENCY: f64 = 0.85;
const TOPOLOGY_FIXED_S: f64 = 0.06;
const FLAT_FIXED_S: f64 = 0.6;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncPlanKind {
    /// One shard per training GPU crosses the slow link once, in parallel streams.
    TopologyAware,
    /// Trainer rank 0 broadcasts the whole model (veRL / OpenRLHF style).
    Flat,
}

/// Bytes synchronised per iteration: the bf16 weights (2 bytes per parameter).
pub fn sync_bytes(model: ModelSize) -> Bytes {
    Bytes((model.params() * 2.0).round() as u64)
}

/// Predicted sync time for a job with `train_gpus` senders and `rollout_gpus` receivers.
pub fn sync_time(
    model: ModelSize,
    plan: SyncPlanKind,
    train_gpus: u32,
    rollout_gpus: u32,
    net: &NetworkConfig,
) -> Micros {
    let bytes = sync_bytes(model).0 as f64;
    let stream = net.inter_cluster_per_stream().bytes_per_sec() * STREAM_EFFICIENCY;
    let (rate, fixed) = match plan {
        SyncPlanKind::TopologyAware => {
            let streams = train_gpus.min(rollout_gpus).max(1) as f64;
            let mut rate = stream * streams;
            if net.inter_cluster_aggregate_gbps > 0.0 {
                rate = rate.min(net.inter_cluster_aggregate_gbps * 1e9 / 8.0 * STREAM_EFFICIENCY);
            }
            (rate, TOPOLOGY_FIXED_S)
        }
        SyncPlanKind::Flat => (stream, FLAT_FIXED_S),
    };
    Micros::from_secs_f64(bytes / rate + fixed) + net.message_latency()
}
