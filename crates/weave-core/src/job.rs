//! Jobs: what an RL post-training job asks for.

use crate::units::Micros;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Dense job index, assigned in trace order. External names live in [`JobSpec::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u32);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum JobSpecError {
    #[error("model size `{0}`: expected a parameter count such as 7B or 1.5B")]
    BadModel(String),
    #[error("job type `{0}`: expected <model>_<max length>, such as 7B_8k")]
    BadType(String),
    #[error("algorithm `{0}`: expected one of ppo, grpo, dapo")]
    BadAlgorithm(String),
    #[error("slo {0}: the allowed slowdown must be a finite number >= 1.0")]
    BadSlo(f64),
    #[error("`{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Model size in millions of parameters (integer, so types compare and hash exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ModelSize(pub u32);

impl ModelSize {
    pub const fn billions(b: u32) -> Self {
        ModelSize(b * 1_000)
    }

    pub fn params_b(self) -> f64 {
        self.0 as f64 / 1_000.0
    }

    pub fn params(self) -> f64 {
        self.0 as f64 * 1e6
    }
}

impl fmt::Display for ModelSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1_000) {
            write!(f, "{}B", self.0 / 1_000)
        } else {
            let s = format!("{:.3}", self.params_b());
            write!(f, "{}B", s.trim_end_matches('0').trim_end_matches('.'))
        }
    }
}

impl FromStr for ModelSize {
    type Err = JobSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || JobSpecError::BadModel(s.to_string());
        let t = s.trim();
        let num = t.strip_suffix(['B', 'b']).ok_or_else(bad)?;
        let b: f64 = num.parse().map_err(|_| bad())?;
        if !(b.is_finite() && b > 0.0 && b <= 10_000.0) {
            return Err(bad());
        }
        let m = (b * 1_000.0).round() as u32;
        if m == 0 {
            return Err(bad());
        }
        Ok(ModelSize(m))
    }
}

/// A model size and a max response length: the key of the measured profile table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobType {
    pub model: ModelSize,
    /// Max response length in tokens (8k = 8192).
    pub max_tokens: u32,
}

impl JobType {
    pub const fn new(model_b: u32, max_tokens_k: u32) -> Self {
        JobType { model: ModelSize::billions(model_b), max_tokens: max_tokens_k * 1024 }
    }
}

impl fmt::Display for JobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.max_tokens.is_multiple_of(1024) {
            write!(f, "{}_{}k", self.model, self.max_tokens / 1024)
        } else {
            write!(f, "{}_{}", self.model, self.max_tokens)
        }
    }
}

impl FromStr for JobType {
    type Err = JobSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || JobSpecError::BadType(s.to_string());
        let (m, l) = s.trim().split_once('_').ok_or_else(bad)?;
        let model: ModelSize = m.parse().map_err(|_| bad())?;
        let max_tokens = parse_tokens(l).ok_or_else(bad)?;
        Ok(JobType { model, max_tokens })
    }
}

/// "8k" -> 8192, "8192" -> 8192.
pub fn parse_tokens(s: &str) -> Option<u32> {
    let s = s.trim();
    let (num, mult) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1024u64),
        None => (s, 1u64),
    };
    let v: u64 = num.parse().ok()?;
    let t = v.checked_mul(mult)?;
    (t > 0 && t <= 4 * 1024 * 1024).then_some(t as u32)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Ppo,
    #[default]
    Grpo,
    Dapo,
}

impl FromStr for Algorithm {
    type Err = JobSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ppo" => Ok(Algorithm::Ppo),
            "grpo" => Ok(Algorithm::Grpo),
            "dapo" => Ok(Algorithm::Dapo),
            _ => Err(JobSpecError::BadAlgorithm(s.to_string())),
        }
    }
}

/// A job's priority class within its tenant (`weave experiment tenants`, quotas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

impl FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Ok(Priority::Low),
            "normal" => Ok(Priority::Normal),
            "high" => Ok(Priority::High),
            _ => Err(format!("unknown priority `{s}` (expected low, normal or high)")),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        })
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Ppo => "ppo",
            Algorithm::Grpo => "grpo",
            Algorithm::Dapo => "dapo",
        })
    }
}

/// The allowed slowdown: 1.3 means a co-executed iteration may take 30% longer than solo.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Slo(f64);

impl Slo {
    pub fn new(v: f64) -> Result<Self, JobSpecError> {
        if v.is_finite() && (1.0..=1_000.0).contains(&v) {
            Ok(Slo(v))
        } else {
            Err(JobSpecError::BadSlo(v))
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// Measured or given phase durations of one iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub rollout: Micros,
    pub train: Micros,
}

impl PhaseTimes {
    pub fn solo(&self) -> Micros {
        self.rollout + self.train
    }

    /// Re-estimation's rule, for the replay and the server alike: per phase, the upper median
    /// of recent measurements (robust to a straggler); `None` without a measurement of each.
    pub fn median_of(
        rollouts: impl IntoIterator<Item = Micros>,
        trains: impl IntoIterator<Item = Micros>,
    ) -> Option<PhaseTimes> {
        fn upper_median(v: impl IntoIterator<Item = Micros>) -> Option<Micros> {
            let mut v: Vec<Micros> = v.into_iter().collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied()
        }
        Some(PhaseTimes { rollout: upper_median(rollouts)?, train: upper_median(trains)? })
    }
}

/// How long a job lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    /// A fixed number of iterations; slowdown lengthens the job's life.
    Iterations(u64),
    /// The authors' traces record when a job's solo run ended. Iterations are derived from
    /// the solo iteration time; prototype mode keeps the departure time itself.
    SoloUntil(Micros),
}

/// One job as a trace or a client describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: JobId,
    /// The external name (e.g. `job17`), unique within a trace.
    pub name: String,
    pub arrival: Micros,
    pub job_type: JobType,
    /// Prompts per iteration (the profile table's reference batch unless given).
    pub batch: u32,
    pub algorithm: Algorithm,
    /// Rollout width: 8-GPU H20 nodes used by one rollout phase.
    pub rollout_nodes: u32,
    /// Training width: 8-GPU H800 nodes used by one training phase.
    pub train_nodes: u32,
    /// Allowed slowdown; `None` means the replay draws it (uniform in [1, 2] by default).
    pub slo: Option<Slo>,
    pub lifetime: Lifetime,
    /// Explicit per-iteration phase durations; overrides the profile model when present.
    pub phase_times: Option<PhaseTimes>,
    /// The team the job belongs to (`None`: the one default tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default)]
    pub priority: Priority,
    /// Bounded staleness k: rollout n may use weights up to k versions old (0, the default,
    /// is on-policy). At most [`MAX_STALENESS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub staleness: u32,
    /// An agentic job's rollout: trajectories of turns that alternate generation with
    /// environment steps in CPU sandboxes (`None`: an ordinary single-turn rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentic: Option<crate::agentic::AgenticSpec>,
    /// A LoRA adapter of a named base (`None`: the job trains the whole model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<crate::lora::LoraSpec>,
}

/// The largest bounded staleness a job may declare.
pub const MAX_STALENESS: u32 = 8;

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl JobSpec {
    /// A GRPO job of `batch` prompts at the default width, arriving at 0, one iteration long,
    /// with no SLO and none of the optional declarations: what builders start from (with
    /// struct update syntax), so a new optional field is one edit here.
    pub fn new(id: JobId, name: String, job_type: JobType, batch: u32) -> JobSpec {
        let width = JobSpec::default_width(job_type.model);
        JobSpec {
            id,
            name,
            arrival: Micros::ZERO,
            job_type,
            batch,
            algorithm: Algorithm::Grpo,
            rollout_nodes: width,
            train_nodes: width,
            slo: None,
            lifetime: Lifetime::Iterations(1),
            phase_times: None,
            tenant: None,
            priority: Default::default(),
            staleness: 0,
            agentic: None,
            lora: None,
        }
    }

    /// Default width: 32B and larger models use two nodes per phase, as in the authors' trace.
    pub fn default_width(model: ModelSize) -> u32 {
        if model >= ModelSize::billions(32) {
            2
        } else {
            1
        }
    }

    /// Checks the invariants readers and clients must uphold.
    pub fn validate(&self) -> Result<(), JobSpecError> {
        let invalid = |field, reason: &str| Err(JobSpecError::Invalid { field, reason: reason.into() });
        if self.name.trim().is_empty() {
            return invalid("id", "must not be empty");
        }
        if self.batch == 0 {
            return invalid("batch", "must be at least 1");
        }
        if self.rollout_nodes == 0 || self.rollout_nodes > 64 {
            return invalid("rollout_nodes", "must be between 1 and 64");
        }
        if self.train_nodes == 0 || self.train_nodes > 64 {
            return invalid("train_nodes", "must be between 1 and 64");
        }
        match self.lifetime {
            Lifetime::Iterations(0) => return invalid("iterations", "must be at least 1"),
            Lifetime::SoloUntil(t) if t <= self.arrival => return invalid("departure", "must be after the arrival"),
            _ => {}
        }
        if let Some(p) = self.phase_times {
            if p.rollout == Micros::ZERO || p.train == Micros::ZERO {
                return invalid("phase_times", "rollout and training durations must be positive");
            }
        }
        if self.staleness > MAX_STALENESS {
            return invalid("staleness", "must be at most 8 (versions a rollout may lag the trainer)");
        }
        if let Some(a) = &self.agentic {
            a.validate().map_err(|(field, reason)| JobSpecError::Invalid { field, reason })?;
        }
        if let Some(l) = &self.lora {
            if self.agentic.is_some() {
                return invalid("lora", "an agentic job cannot declare a LoRA adapter yet (no model covers both)");
            }
            l.validate(self.job_type.model.params_b())
                .map_err(|(field, reason)| JobSpecError::Invalid { field, reason })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_type_round_trips() {
        for s in ["7B_8k", "32B_4k", "1.5B_16k", "70B_32k"] {
            let t: JobType = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
        assert_eq!("7B_8k".parse::<JobType>().unwrap(), JobType::new(7, 8));
    }

    #[test]
    fn bad_types_are_rejected() {
        for s in ["", "7B", "7_8k", "B_8k", "7B_0k", "7B_xk", "-3B_8k", "nanB_8k"] {
            assert!(s.parse::<JobType>().is_err(), "{s}");
        }
    }

    #[test]
    fn slo_bounds() {
        assert!(Slo::new(1.0).is_ok());
        assert!(Slo::new(0.99).is_err());
        assert!(Slo::new(f64::NAN).is_err());
    }
}
