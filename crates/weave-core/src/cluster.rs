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
    /// Fraction of line rate one stream carries as payload (headers, pacing, the transport's
    /// own stalls). 0.85 is fitted to the paper's Fig. 12; a link of one's own is measured
    /// (the mini cluster probes its shaped link before it predicts a sync).
    #[serde(default = "default_stream_efficiency")]
    pub stream_efficiency: f64,
}

/// The fraction of line rate one inter-cluster stream achieves in the paper's Fig. 12.
pub const DEFAULT_STREAM_EFFICIENCY: f64 = 0.85;

fn default_stream_efficiency() -> f64 {
    DEFAULT_STREAM_EFFICIENCY
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
        if !(self.stream_efficiency > 0.0 && self.stream_efficiency <= 1.0) {
            return Err(ConfigError::Invalid {
                key: "network.stream_efficiency".into(),
                reason: format!("must be a fraction of line rate in (0, 1], got {}", self.stream_efficiency),
            });
        }
        Ok(())
    }
}

/// A preemptible (spot) tier of the rollout pool: the same nodes at a lower price, each taken
/// back now and then after a notice. Either a rate (preemptions arrive at random, each held
/// node at `preemptions_per_node_hour`) or a replayed trace of preemptions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpotConfig {
    /// Dollars per GPU-hour of a preemptible rollout node (required).
    pub price_per_gpu_hour: f64,
    /// The spot price Weave's choices assume, when it differs from the billed price (by
    /// default the billed one). Planning as at a shallower discount is how `weave sweep spot`
    /// keeps a deeper discount from ever costing more: the choices made at the shallower
    /// price stay open at the deeper one, and only the bill changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_price_per_gpu_hour: Option<f64>,
    /// Mean preemptions per node-hour held (0 with a trace).
    #[serde(default)]
    pub preemptions_per_node_hour: f64,
    /// Warning before a node is taken, seconds (clouds give 30 s to 2 minutes).
    #[serde(default = "default_notice_s")]
    pub notice_s: u64,
    /// How long a replacement node takes to arrive once asked for (at the notice), seconds.
    #[serde(default = "default_replacement_s")]
    pub replacement_s: u64,
    /// What moving a preempted node's in-flight rollout requests to other nodes costs: their
    /// prompts and generated tokens re-prefilled there, seconds.
    #[serde(default = "default_resume_s")]
    pub resume_s: u64,
    /// A file of preemptions to replay instead of the rate: one `node seconds` per line
    /// (rollout node number, time from the start), `#` comments. Read by the tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_trace: Option<String>,
    /// The trace's preemptions once read, in time order.
    #[serde(skip)]
    pub trace: Vec<Preemption>,
}

/// One replayed preemption: rollout node `node` is taken at `at` (its notice came earlier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preemption {
    pub node: u32,
    pub at: Micros,
}

fn default_notice_s() -> u64 {
    120
}

fn default_replacement_s() -> u64 {
    300
}

fn default_resume_s() -> u64 {
    20
}

impl SpotConfig {
    pub fn price(&self) -> Price {
        Price::per_gpu_hour(self.price_per_gpu_hour)
    }

    /// The price Weave's placement and tier choices assume (the billed price by default).
    pub fn plan_price(&self) -> Price {
        Price::per_gpu_hour(self.plan_price_per_gpu_hour.unwrap_or(self.price_per_gpu_hour))
    }

    /// Spot at `discount` (0 to 1) off the on-demand rollout price, preempted at `rate` per
    /// node-hour, with the default notice, replacement and resume times.
    pub fn at_discount(rollout: &PoolConfig, discount: f64, rate: f64) -> SpotConfig {
        SpotConfig {
            price_per_gpu_hour: rollout.price_per_gpu_hour * (1.0 - discount),
            plan_price_per_gpu_hour: None,
            preemptions_per_node_hour: rate,
            notice_s: default_notice_s(),
            replacement_s: default_replacement_s(),
            resume_s: default_resume_s(),
            preemption_trace: None,
            trace: Vec::new(),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: String| ConfigError::Invalid { key: format!("rollout_spot.{field}"), reason };
        if !(self.price_per_gpu_hour.is_finite() && self.price_per_gpu_hour >= 0.0) {
            return Err(bad(
                "price_per_gpu_hour",
                format!("must be a non-negative dollar amount, got {}", self.price_per_gpu_hour),
            ));
        }
        if let Some(p) = self.plan_price_per_gpu_hour.filter(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(bad("plan_price_per_gpu_hour", format!("must be a non-negative dollar amount, got {p}")));
        }
        let rate = self.preemptions_per_node_hour;
        if !(rate.is_finite() && rate >= 0.0) {
            return Err(bad("preemptions_per_node_hour", format!("must be a rate >= 0, got {rate}")));
        }
        if rate > 0.0 && self.preemption_trace.is_some() {
            return Err(bad(
                "preemptions_per_node_hour",
                "must be 0 with a `preemption_trace` (the trace says when nodes are taken)".into(),
            ));
        }
        Ok(())
    }
}

/// Reads a preemption trace: one `node seconds` per line, `#` starts a comment. Every node
/// must be one of the rollout pool's `nodes`; errors name the line.
pub fn parse_preemption_trace(text: &str, nodes: u32) -> Result<Vec<Preemption>, ConfigError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |reason: String| ConfigError::Invalid { key: format!("line {}", i + 1), reason };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [node, secs] = fields[..] else {
            return Err(bad(format!("expected `node seconds`, got `{line}`")));
        };
        let node: u32 = node.parse().map_err(|_| bad(format!("`{node}` is not a node number")))?;
        if node >= nodes {
            return Err(bad(format!("unknown node {node}: the rollout pool has nodes 0 to {}", nodes - 1)));
        }
        let secs: f64 = secs.parse().map_err(|_| bad(format!("`{secs}` is not a number of seconds")))?;
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(bad(format!("the time must be >= 0 seconds, got {secs}")));
        }
        out.push(Preemption { node, at: Micros::from_secs_f64(secs) });
    }
    out.sort_by_key(|p| (p.at, p.node));
    Ok(out)
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
    /// A preemptible tier of the rollout pool; `None`: every rollout node is on demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_spot: Option<SpotConfig>,
    /// The environment tier (CPU nodes for agentic jobs' sandboxes); `None`: no agentic job
    /// can run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<crate::agentic::EnvPoolConfig>,
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
                stream_efficiency: DEFAULT_STREAM_EFFICIENCY,
            },
            rollout_spot: None,
            env: None,
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
        if let Some(spot) = &self.rollout_spot {
            spot.validate()?;
        }
        if let Some(env) = &self.env {
            env.validate()?;
        }
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
    fn a_spot_tier_without_a_price_or_with_a_negative_rate_is_refused_naming_it() {
        let base = ClusterConfig::default().to_toml();
        let spot = ClusterConfig::from_toml(&format!(
            "{base}\n[rollout_spot]\nprice_per_gpu_hour = 0.74\npreemptions_per_node_hour = 0.125\n"
        ))
        .unwrap()
        .rollout_spot
        .expect("declared");
        assert_eq!((spot.notice_s, spot.replacement_s, spot.resume_s), (120, 300, 20));
        let err = ClusterConfig::from_toml(&format!("{base}\n[rollout_spot]\npreemptions_per_node_hour = 1\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("price_per_gpu_hour") && err.contains("line"), "{err}");
        let err = ClusterConfig::from_toml(&format!(
            "{base}\n[rollout_spot]\nprice_per_gpu_hour = 0.7\npreemptions_per_node_hour = -1\n"
        ))
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "rollout_spot.preemptions_per_node_hour"),
            "{err}"
        );
        let err = ClusterConfig::from_toml(&format!(
            "{base}\n[rollout_spot]\nprice_per_gpu_hour = 0.7\nplan_price_per_gpu_hour = -0.1\n"
        ))
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "rollout_spot.plan_price_per_gpu_hour"),
            "{err}"
        );
    }

    #[test]
    fn a_preemption_trace_naming_an_unknown_node_is_refused_naming_the_line() {
        let ok = parse_preemption_trace("# node seconds\n3 7200\n\n0 60.5 # early\n", 41).unwrap();
        assert_eq!(
            ok,
            [Preemption { node: 0, at: Micros(60_500_000) }, Preemption { node: 3, at: Micros(7_200_000_000) }]
        );
        let cases = [
            ("1 10\n41 20\n", "line 2", "unknown node 41"),
            ("x 1\n", "line 1", "not a node"),
            ("1 -3\n", "line 1", ">= 0"),
            ("1\n", "line 1", "node seconds"),
        ];
        for (text, line, why) in cases {
            let err = parse_preemption_trace(text, 41).unwrap_err().to_string();
            assert!(err.contains(line) && err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_stream_efficiency_outside_a_fraction_is_named_and_an_older_file_gets_fig_12s() {
        let text = ClusterConfig::default().to_toml();
        let older = text.replace("stream_efficiency = 0.85\n", "");
        assert_ne!(older, text);
        assert_eq!(ClusterConfig::from_toml(&older).unwrap().network.stream_efficiency, 0.85);
        for bad in ["0.0", "1.2", "-0.5"] {
            let err = ClusterConfig::from_toml(
                &text.replace("stream_efficiency = 0.85", &format!("stream_efficiency = {bad}")),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("network.stream_efficiency"), "{bad}: {err}");
        }
    }

    #[test]
    fn negative_price_is_named() {
        let text = ClusterConfig::default().to_toml().replace("price_per_gpu_hour = 1.85", "price_per_gpu_hour = -1.0");
        let err = ClusterConfig::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("rollout.price_per_gpu_hour"), "{err}");
    }
}
