//! Cluster configuration: the two pools and the network, with a built-in default equal to the
//! paper's testbed. Parsed from TOML; unknown keys and impossible values are errors naming the
//! key.

use crate::hardware::{GpuKind, GPUS_PER_NODE};
use crate::units::{Bandwidth, Bytes, Micros, Price};
use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("{0}")]
    Parse(String),
    #[error("`{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

/// One pool of identical nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub gpu: GpuKind,
    /// Nodes in the pool. In `fixed` capacity mode this is all there is; in `elastic` mode it
    /// is ignored for capacity (nodes are rented on demand) but still reported.
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Host DRAM per node, GB. Bounds the cached states of the jobs pinned to the node.
    pub host_dram_gb: f64,
    /// Dollars per GPU-hour.
    pub price_per_gpu_hour: f64,
}

impl PoolConfig {
    pub fn price(&self) -> Price {
        Price::per_gpu_hour(self.price_per_gpu_hour)
    }

    pub fn host_dram(&self) -> Bytes {
        Bytes::from_gb_f64(self.host_dram_gb)
    }

    fn validate(&self, pool: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: String| ConfigError::Invalid { key: format!("{pool}.{field}"), reason };
        if self.nodes == 0 {
            return Err(bad("nodes", "must be at least 1".into()));
        }
        if self.gpus_per_node == 0 {
            return Err(bad("gpus_per_node", "must be at least 1".into()));
        }
        if !(self.host_dram_gb.is_finite() && self.host_dram_gb > 0.0) {
            return Err(bad("host_dram_gb", format!("must be a positive number of GB, got {}", self.host_dram_gb)));
        }
        if !(self.price_per_gpu_hour.is_finite() && self.price_per_gpu_hour >= 0.0) {
            return Err(bad(
                "price_per_gpu_hour",
                format!("must be a non-negative dollar amount, got {}", self.price_per_gpu_hour),
            ));
        }
        Ok(())
    }
}

/// Network tiers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Fast fabric inside each cluster (InfiniBand), Gb/s per NIC.
    pub intra_cluster_gbps: f64,
    /// Slow inter-cluster link, Gb/s per stream (one NIC pair). The brief's sync figures imply
    /// the 20 Gb/s is per stream rather than for the whole link.
    pub inter_cluster_gbps_per_stream: f64,
    /// Aggregate cap of the inter-cluster link, Gb/s (0 = no cap beyond per-stream rates).
    pub inter_cluster_aggregate_gbps: f64,
    /// Per-message latency, microseconds.
    pub message_latency_us: u64,
}

impl NetworkConfig {
    pub fn intra_cluster(&self) -> Bandwidth {
        Bandwidth((self.intra_cluster_gbps * 1e9).round() as u64)
    }

    pub fn inter_cluster_per_stream(&self) -> Bandwidth {
        Bandwidth((self.inter_cluster_gbps_per_stream * 1e9).round() as u64)
    }

    pub fn message_latency(&self) -> Micros {
        Micros(self.message_latency_us)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::Invalid {
                    key: format!("network.{key}"),
                    reason: format!("must be a positive rate in Gb/s, got {v}"),
                })
            }
        };
        positive("intra_cluster_gbps", self.intra_cluster_gbps)?;
        positive("inter_cluster_gbps_per_stream", self.inter_cluster_gbps_per_stream)?;
        if !(self.inter_cluster_aggregate_gbps.is_finite() && self.inter_cluster_aggregate_gbps >= 0.0) {
            return Err(ConfigError::Invalid {
                key: "network.inter_cluster_aggregate_gbps".into(),
                reason: format!("must be >= 0 (0 = uncapped), got {}", self.inter_cluster_aggregate_gbps),
            });
        }
        Ok(())
    }
}

/// The whole cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Inference pool (rollout).
    pub rollout: PoolConfig,
    /// Training pool.
    pub training: PoolConfig,
    pub network: NetworkConfig,
}

impl Default for ClusterConfig {
    /// The paper's testbed: 41 H20 + 41 H800 nodes of 8 GPUs, $1.85 and $5.28 per GPU-hour
    /// [paper, Table 1], 400 Gb/s InfiniBand inside each cluster, 20 Gb/s Ethernet between
    /// them, 2 TB host DRAM per node (the brief: 1 to 2 TB).
    fn default() -> Self {
        ClusterConfig {
            rollout: PoolConfig {
                gpu: GpuKind::H20,
                nodes: 41,
                gpus_per_node: GPUS_PER_NODE,
                host_dram_gb: 2_000.0,
                price_per_gpu_hour: 1.85,
            },
            training: PoolConfig {
                gpu: GpuKind::H800,
                nodes: 41,
                gpus_per_node: GPUS_PER_NODE,
                host_dram_gb: 2_000.0,
                price_per_gpu_hour: 5.28,
            },
            network: NetworkConfig {
                intra_cluster_gbps: 400.0,
                inter_cluster_gbps_per_stream: 20.0,
                inter_cluster_aggregate_gbps: 0.0,
                message_latency_us: 50,
            },
        }
    }
}

impl ClusterConfig {
    /// Parses a TOML document. Every section is required so that a typo cannot silently fall
    /// back to a default; use `weave config show` to get a complete file to edit.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.rollout.validate("rollout")?;
        self.training.validate("training")?;
        self.network.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_round_trips_through_toml() {
        let cfg = ClusterConfig::default();
        let text = cfg.to_toml();
        assert_eq!(ClusterConfig::from_toml(&text).unwrap(), cfg);
    }

    #[test]
    fn unknown_key_is_named() {
        let text = ClusterConfig::default().to_toml().replace("nodes = 41", "nodez = 41");
        let err = ClusterConfig::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("nodez"), "{err}");
    }

    #[test]
    fn zero_nodes_is_named() {
        let mut cfg = ClusterConfig::default();
        cfg.training.nodes = 0;
        let err = ClusterConfig::from_toml(&cfg.to_toml()).unwrap_err();
        assert_eq!(err, ConfigError::Invalid { key: "training.nodes".into(), reason: "must be at least 1".into() });
    }

    #[test]
    fn negative_price_is_named() {
        let text = ClusterConfig::default().to_toml().replace("price_per_gpu_hour = 1.85", "price_per_gpu_hour = -1.0");
        let err = ClusterConfig::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("rollout.price_per_gpu_hour"), "{err}");
    }
}
