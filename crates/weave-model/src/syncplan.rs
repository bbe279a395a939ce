//! Weight-sync plans: who sends which byte ranges to whom, over which tier, in which stage,
//! and what that takes on a topology.
//!
//! - Flat (veRL / OpenRLHF style): trainer rank 0 sends the whole model to the first GPU of
//!   every rollout node over the slow link (one full copy per rollout node), which forwards it
//!   to the other GPUs of its node over the fast fabric.
//! - Topology-aware: the model is cut into one shard per training GPU; shard i crosses the
//!   slow link once, to rollout GPU i mod M, over parallel streams; the receivers then
//!   exchange shards over the fast fabric so every rollout GPU ends with every byte.
//!
//! Prediction: a stage's time is its busiest endpoint's bytes over its rate (one stream per
//! NIC pair on the slow link, capped by the aggregate; the fabric per GPU on the fast tier),
//! and the two stages are pipelined chunk by chunk, so a plan takes the longer stage plus a
//! fixed start-up cost and the message latency. With 8 -> 8 GPUs this is exactly the
//! calibrated `sync_time` (Fig. 12).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weave_core::{Micros, NetworkConfig};

/// Fraction of line rate one inter-cluster stream achieves (fitted to Fig. 12); a cluster
/// file may state its own link's (`network.stream_efficiency`).
pub const STREAM_EFFICIENCY: f64 = weave_core::cluster::DEFAULT_STREAM_EFFICIENCY;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncPlanKind {
    /// One shard per training GPU crosses the slow link once, in parallel streams.
    TopologyAware,
    /// Trainer rank 0 broadcasts the whole model (veRL / OpenRLHF style).
    Flat,
}

/// Fixed start-up costs fitted to Fig. 12 (see `sync`).
const TOPOLOGY_FIXED_S: f64 = 0.06;
const FLAT_FIXED_S: f64 = 0.6;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "side", content = "gpu")]
pub enum Endpoint {
    Train(u32),
    Rollout(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The inter-cluster link.
    Slow,
    /// The fabric inside the rollout cluster.
    Fast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub stage: u8,
    pub from: Endpoint,
    pub to: Endpoint,
    pub offset: u64,
    pub len: u64,
    pub tier: Tier,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub kind: SyncPlanKind,
    pub model_bytes: u64,
    pub train_gpus: u32,
    pub rollout_gpus: u32,
    pub transfers: Vec<Transfer>,
}

/// GPUs and link rates, in bytes per second of payload.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    pub train_gpus: u32,
    pub rollout_gpus: u32,
    pub gpus_per_node: u32,
    /// One stream (NIC pair) across the slow link.
    pub slow_stream_bps: f64,
    /// Aggregate cap of the slow link (infinite when uncapped).
    pub slow_aggregate_bps: f64,
    /// Per-GPU rate on the fast fabric.
    pub fast_bps: f64,
    pub latency: Micros,
}

impl Topology {
    /// From the cluster's network figures, at its links' stream efficiency.
    pub fn new(net: &NetworkConfig, train_gpus: u32, rollout_gpus: u32, gpus_per_node: u32) -> Topology {
        let efficiency = net.stream_efficiency;
        let agg = if net.inter_cluster_aggregate_gbps > 0.0 {
            net.inter_cluster_aggregate_gbps * 1e9 / 8.0 * efficiency
        } else {
            f64::INFINITY
        };
        Topology {
            train_gpus: train_gpus.max(1),
            rollout_gpus: rollout_gpus.max(1),
            gpus_per_node: gpus_per_node.max(1),
            slow_stream_bps: net.inter_cluster_per_stream().bytes_per_sec() * efficiency,
            slow_aggregate_bps: agg,
            fast_bps: net.intra_cluster().bytes_per_sec() * efficiency,
            latency: net.message_latency(),
        }
    }

    pub fn rollout_nodes(&self) -> u32 {
        self.rollout_gpus.div_ceil(self.gpus_per_node)
    }
}

pub fn flat(model_bytes: u64, t: &Topology) -> Plan {
    let mut transfers = Vec::new();
    for node in 0..t.rollout_nodes() {
        let leader = node * t.gpus_per_node;
        transfers.push(Transfer {
            stage: 1,
            from: Endpoint::Train(0),
            to: Endpoint::Rollout(leader),
            offset: 0,
            len: model_bytes,
            tier: Tier::Slow,
        });
        for g in leader + 1..(leader + t.gpus_per_node).min(t.rollout_gpus) {
            transfers.push(Transfer {
                stage: 2,
                from: Endpoint::Rollout(leader),
                to: Endpoint::Rollout(g),
                offset: 0,
                len: model_bytes,
                tier: Tier::Fast,
            });
        }
    }
    Plan { kind: SyncPlanKind::Flat, model_bytes, train_gpus: t.train_gpus, rollout_gpus: t.rollout_gpus, transfers }
}

/// Shard `i` of `n` of a model of `bytes`: (offset, len).
pub fn shard(bytes: u64, n: u32, i: u32) -> (u64, u64) {
    let size = bytes.div_ceil(n as u64);
    let start = (i as u64 * size).min(bytes);
    (start, size.min(bytes - start))
}

pub fn topology_aware(model_bytes: u64, t: &Topology) -> Plan {
    let (n, m) = (t.train_gpus, t.rollout_gpus);
    let mut transfers = Vec::new();
    for i in 0..n {
        let (offset, len) = shard(model_bytes, n, i);
        if len == 0 {
            continue;
        }
        let holder = i % m;
        transfers.push(Transfer {
            stage: 1,
            from: Endpoint::Train(i),
            to: Endpoint::Rollout(holder),
            offset,
            len,
            tier: Tier::Slow,
        });
        for j in (0..m).filter(|j| *j != holder) {
            transfers.push(Transfer {
                stage: 2,
                from: Endpoint::Rollout(holder),
                to: Endpoint::Rollout(j),
                offset,
                len,
                tier: Tier::Fast,
            });
        }
    }
    Plan { kind: SyncPlanKind::TopologyAware, model_bytes, train_gpus: n, rollout_gpus: m, transfers }
}

/// A plan's figures as `weave sync plan` shows them (fields in the order its JSON prints them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub plan: SyncPlanKind,
    pub predicted_s: f64,
    pub slow_link_bytes: u64,
    pub slow_link_copies: f64,
    pub transfers: usize,
}

/// The `kind` plan for `model_bytes` on `t`, checked ([`verify`]), with its summary.
pub fn checked_plan(kind: SyncPlanKind, model_bytes: u64, t: &Topology) -> Result<(Plan, Summary), String> {
    let p = plan(kind, model_bytes, t);
    verify(&p)?;
    let slow = slow_bytes(&p);
    let summary = Summary {
        plan: kind,
        predicted_s: predict(&p, t).as_secs_f64(),
        slow_link_bytes: slow,
        slow_link_copies: slow as f64 / model_bytes.max(1) as f64,
        transfers: p.transfers.len(),
    };
    Ok((p, summary))
}

pub fn plan(kind: SyncPlanKind, model_bytes: u64, t: &Topology) -> Plan {
    match kind {
        SyncPlanKind::Flat => flat(model_bytes, t),
        SyncPlanKind::TopologyAware => topology_aware(model_bytes, t),
    }
}

/// Seconds a stage takes: its busiest sender or receiver, and the slow link's aggregate.
fn stage_seconds(plan: &Plan, stage: u8, t: &Topology) -> f64 {
    let mut out: BTreeMap<Endpoint, u64> = BTreeMap::new();
    let mut inn: BTreeMap<Endpoint, u64> = BTreeMap::new();
    let mut slow_total = 0u64;
    let mut tier = Tier::Fast;
    for x in plan.transfers.iter().filter(|x| x.stage == stage) {
        *out.entry(x.from).or_default() += x.len;
        *inn.entry(x.to).or_default() += x.len;
        if x.tier == Tier::Slow {
            slow_total += x.len;
            tier = Tier::Slow;
        }
    }
    let busiest = out.values().chain(inn.values()).copied().max().unwrap_or(0) as f64;
    match tier {
        Tier::Slow => (busiest / t.slow_stream_bps).max(slow_total as f64 / t.slow_aggregate_bps),
        Tier::Fast => busiest / t.fast_bps,
    }
}

/// Predicted time of a plan on a topology.
pub fn predict(plan: &Plan, t: &Topology) -> Micros {
    let fixed = match plan.kind {
        SyncPlanKind::Flat => FLAT_FIXED_S,
        SyncPlanKind::TopologyAware => TOPOLOGY_FIXED_S,
    };
    Micros::from_secs_f64(transfer_seconds(plan, t) + fixed) + t.latency
}

/// The part of the prediction that is bytes over rates: the longer of the two pipelined
/// stages, without the start-up cost fitted to the paper's engine or the message latency.
pub fn transfer_seconds(plan: &Plan, t: &Topology) -> f64 {
    stage_seconds(plan, 1, t).max(stage_seconds(plan, 2, t))
}

/// Bytes the slow link carries.
pub fn slow_bytes(plan: &Plan) -> u64 {
    plan.transfers.iter().filter(|x| x.tier == Tier::Slow).map(|x| x.len).sum()
}

/// Checks a plan: every rollout GPU receives every byte exactly once, and every sender holds
/// what it sends when it sends it (training GPUs hold the whole model).
pub fn verify(plan: &Plan) -> Result<(), String> {
    let mut held: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for stage in [1u8, 2] {
        let before = held.clone();
        for x in plan.transfers.iter().filter(|x| x.stage == stage) {
            if let Endpoint::Rollout(g) = x.from {
                let has =
                    before.get(&g).is_some_and(|r| r.iter().any(|(o, l)| *o <= x.offset && x.offset + x.len <= o + l));
                if !has {
                    return Err(format!(
                        "stage {stage}: rollout GPU {g} forwards [{}, +{}) it does not hold yet",
                        x.offset, x.len
                    ));
                }
            }
            let Endpoint::Rollout(to) = x.to else { return Err("a transfer goes to a training GPU".into()) };
            held.entry(to).or_default().push((x.offset, x.len));
        }
    }
    for g in 0..plan.rollout_gpus {
        let mut r = held.remove(&g).unwrap_or_default();
        r.sort_unstable();
        let mut at = 0u64;
        for (o, l) in r {
            if o != at {
                return Err(format!(
                    "rollout GPU {g}: bytes from {at} {} (next range starts at {o})",
                    if o > at { "missing" } else { "received twice" }
                ));
            }
            at = o + l;
        }
        if at != plan.model_bytes {
            return Err(format!("rollout GPU {g}: bytes missing, has {at} of {}", plan.model_bytes));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weave_core::ClusterConfig;

    fn topo(n: u32, m: u32) -> Topology {
        Topology::new(&ClusterConfig::default().network, n, m, 8)
    }

    #[test]
    fn every_byte_exactly_once_under_both_plans() {
        for (n, m) in [(8, 8), (16, 16), (8, 16), (16, 8), (3, 5), (5, 3), (1, 8), (8, 1), (7, 13)] {
            for kind in [SyncPlanKind::Flat, SyncPlanKind::TopologyAware] {
                for bytes in [1u64, 1_000, 14_000_000_007] {
                    let p = plan(kind, bytes, &topo(n, m));
                    verify(&p).unwrap_or_else(|e| panic!("{kind:?} {n}->{m} {bytes}: {e}"));
                }
            }
        }
    }

    #[test]
    fn the_slow_link_carries_one_copy_topology_aware_and_one_per_node_flat() {
        let bytes = 14_000_000_000;
        for (n, m) in [(8, 8), (16, 16), (8, 24)] {
            assert_eq!(slow_bytes(&topology_aware(bytes, &topo(n, m))), bytes);
            assert_eq!(slow_bytes(&flat(bytes, &topo(n, m))), bytes * m.div_ceil(8) as u64);
        }
    }

    #[test]
    fn verify_catches_broken_plans() {
        let mut p = topology_aware(1000, &topo(4, 4));
        p.transfers.pop();
        assert!(verify(&p).unwrap_err().contains("missing"));
        let mut p = topology_aware(1000, &topo(4, 4));
        let dup = p.transfers[0];
        p.transfers.push(dup);
        assert!(verify(&p).unwrap_err().contains("twice"));
        let mut p = flat(1000, &topo(1, 8));
        p.transfers[1].stage = 1;
        assert!(verify(&p).unwrap_err().contains("does not hold"));
    }
}
