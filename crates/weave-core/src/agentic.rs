//! What an agentic job declares about its rollout: trajectories of turns that alternate
//! generation on the rollout GPUs with environment steps in CPU sandboxes,
//! `reset (CPU) -> [generate_k (GPU) -> env_k (CPU)] x K -> reward`.
//! (`weave_model::agentic` turns a declaration into rollout times and resource use.)

use serde::{Deserialize, Serialize};

/// An agentic rollout's shape. Times are seconds, as declared; the model converts them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgenticSpec {
    pub turns: TurnsSpec,
    /// One turn's generation by one trajectory with the engine's full speed, seconds.
    pub gen_s_per_turn: f64,
    /// One environment step (a tool call, a shell action).
    pub env: LatencySpec,
    pub startup: StartupSpec,
    /// The reward, computed in the sandbox once the last turn's step returns, seconds.
    #[serde(default)]
    pub reward_s: f64,
    pub sandbox: SandboxSpec,
}

/// Turns per trajectory: bimodal in production (short, under 5; long, over 10), with a tail
/// capped at `max` (RollArt sections 2.1, 3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnsSpec {
    pub short_mean: f64,
    pub long_mean: f64,
    /// The share of trajectories in the long mode.
    pub long_share: f64,
    pub max: u32,
}

/// How long one environment step takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum LatencySpec {
    /// N(mean, sigma), cut at 0: the synthetic case papers inject (N(10 s, 1..10 s)).
    Normal { mean_s: f64, sigma_s: f64 },
    /// A heavy-tailed tool, given by its median and 99th percentile.
    LogNormal { p50_s: f64, p99_s: f64 },
}

/// A sandbox's start: from a cached image (`cached_share` of starts) or cold; a start fails
/// with `failure_rate`, is noticed after `timeout_s` and is retried cold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartupSpec {
    pub cold_s: f64,
    pub cached_s: f64,
    pub cached_share: f64,
    #[serde(default)]
    pub failure_rate: f64,
    #[serde(default)]
    pub timeout_s: f64,
}

/// What one sandbox holds for its trajectory's life (or, if `pausable`, only while it works).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    pub cores: f64,
    pub mem_gib: f64,
    #[serde(default)]
    pub pausable: bool,
}

/// What an agentic job measured of its environments (the medians of its drivers' reports).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvMeasured {
    pub turns_per_trajectory: f64,
    pub env_step_s: f64,
    pub startup_s_per_trajectory: f64,
}

impl AgenticSpec {
    /// Refuses what no model can run, naming the field (`agentic.env.sigma_s`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let secs = |field: &'static str, v: f64| {
            (v.is_finite() && (0.0..=86_400.0).contains(&v))
                .then_some(())
                .ok_or_else(|| (field, format!("seconds in [0, 86400], got {v}")))
        };
        let share = |field: &'static str, v: f64| {
            (v.is_finite() && (0.0..=1.0).contains(&v))
                .then_some(())
                .ok_or_else(|| (field, format!("a share in [0, 1], got {v}")))
        };
        let t = &self.turns;
        if !(1..=1000).contains(&t.max) {
            return Err(("agentic.turns.max", format!("from 1 to 1000, got {}", t.max)));
        }
        for (field, v) in [("agentic.turns.short_mean", t.short_mean), ("agentic.turns.long_mean", t.long_mean)] {
            if !(v.is_finite() && v >= 1.0 && v <= t.max as f64) {
                return Err((field, format!("a mean from 1 to turns.max ({}), got {v}", t.max)));
            }
        }
        share("agentic.turns.long_share", t.long_share)?;
        secs("agentic.gen_s_per_turn", self.gen_s_per_turn)?;
        match self.env {
            LatencySpec::Normal { mean_s, sigma_s } => {
                secs("agentic.env.mean_s", mean_s)?;
                secs("agentic.env.sigma_s", sigma_s)?;
            }
            LatencySpec::LogNormal { p50_s, p99_s } => {
                secs("agentic.env.p50_s", p50_s)?;
                secs("agentic.env.p99_s", p99_s)?;
                if p99_s < p50_s {
                    return Err(("agentic.env.p99_s", format!("at least p50_s ({p50_s}), got {p99_s}")));
                }
            }
        }
        let s = &self.startup;
        secs("agentic.startup.cold_s", s.cold_s)?;
        secs("agentic.startup.cached_s", s.cached_s)?;
        secs("agentic.startup.timeout_s", s.timeout_s)?;
        share("agentic.startup.cached_share", s.cached_share)?;
        share("agentic.startup.failure_rate", s.failure_rate)?;
        if s.failure_rate >= 1.0 {
            return Err(("agentic.startup.failure_rate", "below 1 (every start would fail)".into()));
        }
        secs("agentic.reward_s", self.reward_s)?;
        let b = &self.sandbox;
        if !(b.cores.is_finite() && b.cores > 0.0 && b.cores <= 1024.0) {
            return Err(("agentic.sandbox.cores", format!("cores in (0, 1024], got {}", b.cores)));
        }
        if !(b.mem_gib.is_finite() && b.mem_gib >= 0.0 && b.mem_gib <= 65_536.0) {
            return Err(("agentic.sandbox.mem_gib", format!("GiB in [0, 65536], got {}", b.mem_gib)));
        }
        Ok(())
    }

    /// Turns per trajectory the declaration means, on average (each mode's mean, capped at
    /// `max`; the model's geometric draws around them are capped the same way, so this is an
    /// upper bound of the mean it samples).
    pub fn mean_turns(&self) -> f64 {
        let t = &self.turns;
        let cap = |m: f64| m.min(t.max as f64);
        (1.0 - t.long_share) * cap(t.short_mean) + t.long_share * cap(t.long_mean)
    }

    /// Sandboxes a job holds at most: one per trajectory of its batch. Those started during a
    /// training serve the next rollout, whose predecessor's have ended by then, so an
    /// on-policy job never holds two batches; with staleness a rollout runs beside the training
    /// that starts the next one's, so it may hold two.
    pub fn sandboxes_held(&self, batch: u32, staleness: u32) -> u32 {
        batch.saturating_mul(if staleness > 0 { 2 } else { 1 })
    }

    /// The environment cores those sandboxes hold (a sandbox that pauses still has its cores
    /// reserved: it resumes at once).
    pub fn cores_held(&self, batch: u32, staleness: u32) -> f64 {
        self.sandboxes_held(batch, staleness) as f64 * self.sandbox.cores
    }

    /// The median environment step the declaration means, seconds.
    pub fn env_step_median_s(&self) -> f64 {
        match self.env {
            LatencySpec::Normal { mean_s, .. } => mean_s,
            LatencySpec::LogNormal { p50_s, .. } => p50_s,
        }
    }

    /// The declaration rescaled to what the job measured of itself: each mode of the turns,
    /// the step latency and both start-up times scaled by measured over declared, so the
    /// shapes declared (bimodal turns, the tail, the cached share, failures) stay. A figure
    /// declared as zero, or measured as nonsense, is left as declared. Valid whenever `self` is.
    pub fn with_measured(&self, m: &EnvMeasured) -> AgenticSpec {
        let ratio = |measured: f64, declared: f64| {
            if declared > 0.0 && measured.is_finite() && measured >= 0.0 {
                measured / declared
            } else {
                1.0
            }
        };
        let mut out = self.clone();
        let t = &mut out.turns;
        let (k, max) = (ratio(m.turns_per_trajectory, self.mean_turns()), t.max as f64);
        (t.short_mean, t.long_mean) = ((t.short_mean * k).clamp(1.0, max), (t.long_mean * k).clamp(1.0, max));
        let k = ratio(m.env_step_s, self.env_step_median_s());
        let day = |v: f64| (v * k).min(86_400.0);
        out.env = match self.env {
            LatencySpec::Normal { mean_s, sigma_s } => {
                LatencySpec::Normal { mean_s: day(mean_s), sigma_s: day(sigma_s) }
            }
            LatencySpec::LogNormal { p50_s, p99_s } => LatencySpec::LogNormal { p50_s: day(p50_s), p99_s: day(p99_s) },
        };
        let s = &self.startup;
        let k = ratio(m.startup_s_per_trajectory, s.cached_share * s.cached_s + (1.0 - s.cached_share) * s.cold_s);
        (out.startup.cold_s, out.startup.cached_s) = ((s.cold_s * k).min(86_400.0), (s.cached_s * k).min(86_400.0));
        out
    }

    /// Refuses a job that `env` cannot host, naming the field: no environment pool at all, or
    /// one sandbox larger than an environment node.
    pub fn check_fits(&self, env: Option<&EnvPoolConfig>) -> Result<(), (&'static str, String)> {
        let Some(env) = env else {
            return Err((
                "agentic",
                "an agentic job needs an environment pool (the cluster's `env`), and this cluster has none".into(),
            ));
        };
        if self.sandbox.cores > env.cores_per_node as f64 {
            return Err((
                "agentic.sandbox.cores",
                format!("{} cores, above an environment node's {}", self.sandbox.cores, env.cores_per_node),
            ));
        }
        if self.sandbox.mem_gib > env.mem_gib_per_node {
            return Err((
                "agentic.sandbox.mem_gib",
                format!("{} GiB, above an environment node's {}", self.sandbox.mem_gib, env.mem_gib_per_node),
            ));
        }
        Ok(())
    }
}

/// A node of the environment pool, named `e0`, `e1`, ... No job is bound to one: the pool is
/// reserved by cores, and a job's sandboxes land on whichever nodes are in service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EnvNodeId(pub u32);

impl std::fmt::Display for EnvNodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e{}", self.0)
    }
}

impl std::str::FromStr for EnvNodeId {
    type Err = String;

    /// `e3` is environment node 3 (the form `Display` prints).
    fn from_str(s: &str) -> Result<EnvNodeId, String> {
        let bad = || format!("`{s}`: expected an environment node name such as e0");
        let digits = s.strip_prefix('e').ok_or_else(bad)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        digits.parse().map(EnvNodeId).map_err(|_| bad())
    }
}

/// The environment tier: CPU nodes that host sandboxes, priced per vCPU-hour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvPoolConfig {
    pub nodes: u32,
    pub cores_per_node: u32,
    pub mem_gib_per_node: f64,
    /// About $0.05 per vCPU-hour (the brief, section 7).
    pub price_per_vcpu_hour: f64,
}

impl EnvPoolConfig {
    /// Nodes of 64 cores and 256 GiB at $0.05 per vCPU-hour (the brief, section 7).
    pub fn of_nodes(nodes: u32) -> EnvPoolConfig {
        EnvPoolConfig { nodes, cores_per_node: 64, mem_gib_per_node: 256.0, price_per_vcpu_hour: 0.05 }
    }

    pub fn cores(&self) -> f64 {
        self.nodes as f64 * self.cores_per_node as f64
    }

    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        let bad = |key: &str, reason: String| crate::ConfigError::Invalid { key: format!("env.{key}"), reason };
        if self.nodes == 0 || self.nodes > 100_000 {
            return Err(bad("nodes", format!("from 1 to 100000, got {}", self.nodes)));
        }
        if self.cores_per_node == 0 || self.cores_per_node > 4096 {
            return Err(bad("cores_per_node", format!("from 1 to 4096, got {}", self.cores_per_node)));
        }
        if !(self.mem_gib_per_node.is_finite() && self.mem_gib_per_node > 0.0) {
            return Err(bad("mem_gib_per_node", format!("a positive size, got {}", self.mem_gib_per_node)));
        }
        if !(self.price_per_vcpu_hour.is_finite() && self.price_per_vcpu_hour >= 0.0) {
            return Err(bad("price_per_vcpu_hour", format!("a price of 0 or more, got {}", self.price_per_vcpu_hour)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn environment_node_names_round_trip_and_nothing_else_parses() {
        use super::EnvNodeId;
        assert_eq!("e12".parse::<EnvNodeId>(), Ok(EnvNodeId(12)));
        assert_eq!(EnvNodeId(12).to_string(), "e12");
        for bad in ["e", "r0", "e-1", "e1x", "", "e99999999999"] {
            assert!(bad.parse::<EnvNodeId>().is_err(), "{bad}");
        }
    }

    use super::*;

    fn swe_like() -> AgenticSpec {
        AgenticSpec {
            turns: TurnsSpec { short_mean: 4.0, long_mean: 30.0, long_share: 0.5, max: 100 },
            gen_s_per_turn: 3.0,
            env: LatencySpec::LogNormal { p50_s: 1.0, p99_s: 3.0 },
            startup: StartupSpec {
                cold_s: 60.0,
                cached_s: 0.6,
                cached_share: 0.8,
                failure_rate: 0.01,
                timeout_s: 120.0,
            },
            reward_s: 20.0,
            sandbox: SandboxSpec { cores: 2.0, mem_gib: 8.0, pausable: false },
        }
    }

    #[test]
    fn a_declaration_reads_and_bad_values_name_their_field() {
        let text = r#"{"turns":{"short_mean":3,"long_mean":20,"long_share":0.3,"max":40},"gen_s_per_turn":2,
            "env":{"dist":"normal","mean_s":10,"sigma_s":1},"startup":{"cold_s":30,"cached_s":0.5,"cached_share":0.9},
            "sandbox":{"cores":1,"mem_gib":8}}"#;
        let spec: AgenticSpec = serde_json::from_str(text).unwrap();
        assert_eq!(spec.validate(), Ok(()));
        assert!(swe_like().validate().is_ok());
        let mut bad = swe_like();
        bad.env = LatencySpec::Normal { mean_s: -1.0, sigma_s: 1.0 };
        assert_eq!(bad.validate().unwrap_err().0, "agentic.env.mean_s");
        let mut bad = swe_like();
        bad.sandbox.cores = 0.0;
        assert_eq!(bad.validate().unwrap_err().0, "agentic.sandbox.cores");
        let mut bad = swe_like();
        bad.turns.long_mean = 500.0;
        assert_eq!(bad.validate().unwrap_err().0, "agentic.turns.long_mean");
        let mut bad = swe_like();
        bad.startup.failure_rate = 1.0;
        assert_eq!(bad.validate().unwrap_err().0, "agentic.startup.failure_rate");
        assert!(serde_json::from_str::<AgenticSpec>(&text.replace("\"max\":40", "\"max\":40,\"colour\":1")).is_err());
    }

    #[test]
    fn measured_figures_rescale_the_declaration_and_keep_its_shape() {
        let d = swe_like();
        let declared_startup = 0.8 * 0.6 + 0.2 * 60.0;
        let measured = |turns, env_step_s, startup| EnvMeasured {
            turns_per_trajectory: turns,
            env_step_s,
            startup_s_per_trajectory: startup,
        };
        let m = d.with_measured(&measured(2.0 * d.mean_turns(), 3.0, 2.0 * declared_startup));
        assert!((m.mean_turns() - 2.0 * d.mean_turns()).abs() < 1e-9, "{m:?}");
        assert_eq!((m.turns.long_share, m.turns.max), (0.5, 100));
        assert_eq!(m.env, LatencySpec::LogNormal { p50_s: 3.0, p99_s: 9.0 });
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(m.startup.cold_s, 120.0) && close(m.startup.cached_s, 1.2), "{:?}", m.startup);
        assert_eq!(m.startup.cached_share, 0.8);
        assert!(m.validate().is_ok());
        // Turns stay within the declared cap; nonsense measured is left as declared.
        let capped = d.with_measured(&measured(1e6, f64::NAN, -1.0));
        assert_eq!((capped.turns.short_mean, capped.turns.long_mean), (100.0, 100.0));
        assert_eq!((capped.env.clone(), capped.startup.cold_s), (d.env.clone(), 60.0));
        assert!(capped.validate().is_ok());
    }

    #[test]
    fn a_job_the_environment_pool_cannot_host_is_refused_naming_the_field() {
        let pool = EnvPoolConfig { nodes: 4, cores_per_node: 64, mem_gib_per_node: 256.0, price_per_vcpu_hour: 0.05 };
        assert_eq!(swe_like().check_fits(Some(&pool)), Ok(()));
        assert_eq!(swe_like().check_fits(None).unwrap_err().0, "agentic");
        let mut big = swe_like();
        big.sandbox.mem_gib = 512.0;
        assert_eq!(big.check_fits(Some(&pool)).unwrap_err().0, "agentic.sandbox.mem_gib");
        big.sandbox = SandboxSpec { cores: 65.0, mem_gib: 8.0, pausable: false };
        assert_eq!(big.check_fits(Some(&pool)).unwrap_err().0, "agentic.sandbox.cores");
    }
}
