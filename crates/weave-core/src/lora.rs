//! What a LoRA job declares: the base model it adapts and its adapter (rank, target modules),
//! so the adapter's bytes follow from the base's shapes. (`weave_model::lora` turns a
//! declaration into phase times, state and a shared engine's batch.)
//!
//! The bases are a catalogue of public architectures (their `config.json` on the Hugging Face
//! Hub): a job names one, and its `type`'s model size must be the base's.

use crate::hardware::{GpuKind, GPUS_PER_NODE};
use crate::units::Bytes;
use serde::{Deserialize, Serialize};

/// A base model's shapes, as its `config.json` gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseModel {
    pub name: &'static str,
    /// The size the job's `type` must name (the profile table's key).
    pub size_b: u32,
    pub layers: u32,
    pub hidden: u32,
    pub intermediate: u32,
    /// Attention heads x head dimension (`q_proj`'s output).
    pub q_dim: u32,
    /// Key-value heads x head dimension (`k_proj`'s and `v_proj`'s output).
    pub kv_dim: u32,
}

/// The bases a LoRA job may name (one per size of the profile table's families).
pub const BASES: &[BaseModel] = &[
    BaseModel {
        name: "qwen2.5-3b",
        size_b: 3,
        layers: 36,
        hidden: 2048,
        intermediate: 11008,
        q_dim: 2048,
        kv_dim: 256,
    },
    BaseModel { name: "qwen3-4b", size_b: 4, layers: 36, hidden: 2560, intermediate: 9728, q_dim: 4096, kv_dim: 1024 },
    BaseModel {
        name: "qwen2.5-7b",
        size_b: 7,
        layers: 28,
        hidden: 3584,
        intermediate: 18944,
        q_dim: 3584,
        kv_dim: 512,
    },
    BaseModel {
        name: "llama-3.1-8b",
        size_b: 8,
        layers: 32,
        hidden: 4096,
        intermediate: 14336,
        q_dim: 4096,
        kv_dim: 1024,
    },
    BaseModel {
        name: "qwen2.5-14b",
        size_b: 14,
        layers: 48,
        hidden: 5120,
        intermediate: 13824,
        q_dim: 5120,
        kv_dim: 1024,
    },
    BaseModel {
        name: "qwen2.5-32b",
        size_b: 32,
        layers: 64,
        hidden: 5120,
        intermediate: 27648,
        q_dim: 5120,
        kv_dim: 1024,
    },
];

/// The base named `name`, if the catalogue has it.
pub fn base(name: &str) -> Option<&'static BaseModel> {
    BASES.iter().find(|b| b.name == name)
}

/// The linear layers an adapter may target (peft's names), and `all-linear` for all of them.
pub const MODULES: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// The largest rank an engine serves adapters at (vLLM's largest `max_lora_rank`).
pub const MAX_RANK: u32 = 512;

/// The share of a rollout engine's GPU memory its adapters may hold: what vLLM-style engines
/// reserve for LoRA slots beside the base and the KV cache (ours, declared; adapters are
/// megabytes, so only many large ones reach it).
pub const ENGINE_ADAPTER_SHARE: f64 = 0.05;

/// Bytes per adapter parameter on the engine (bf16).
const ENGINE_BYTES_PER_PARAM: u64 = 2;

/// A job's LoRA adapter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSpec {
    /// A name from [`BASES`].
    pub base: String,
    pub rank: u32,
    /// Module names from [`MODULES`], or `["all-linear"]` (the default, as in the LoRA RL
    /// recipes: Thinking Machines' "LoRA Without Regret" and TRL's reproduction of it).
    #[serde(default = "all_linear")]
    pub targets: Vec<String>,
}

fn all_linear() -> Vec<String> {
    vec!["all-linear".to_string()]
}

impl BaseModel {
    /// A module's (input, output) dimensions.
    fn shape(&self, module: &str) -> Option<(u32, u32)> {
        Some(match module {
            "q_proj" => (self.hidden, self.q_dim),
            "k_proj" | "v_proj" => (self.hidden, self.kv_dim),
            "o_proj" => (self.q_dim, self.hidden),
            "gate_proj" | "up_proj" => (self.hidden, self.intermediate),
            "down_proj" => (self.intermediate, self.hidden),
            _ => return None,
        })
    }

    /// Parameters, as the profile table counts them (the size the job's `type` names).
    pub fn params(&self) -> f64 {
        f64::from(self.size_b) * 1e9
    }
}

impl LoraSpec {
    /// The base the job names (`None` if the catalogue lacks it: [`LoraSpec::validate`] refuses).
    pub fn base_model(&self) -> Option<&'static BaseModel> {
        base(&self.base)
    }

    /// The modules targeted, `all-linear` expanded.
    pub fn modules(&self) -> Vec<&str> {
        if self.targets.iter().any(|t| t == "all-linear") {
            MODULES.to_vec()
        } else {
            self.targets.iter().map(String::as_str).collect()
        }
    }

    /// Trainable parameters: `rank x (d_in + d_out)` per targeted module and layer.
    pub fn params(&self) -> u64 {
        let Some(b) = self.base_model() else { return 0 };
        let per_layer: u64 = self
            .modules()
            .iter()
            .filter_map(|m| b.shape(m))
            .map(|(i, o)| u64::from(self.rank) * u64::from(i + o))
            .sum();
        per_layer * u64::from(b.layers)
    }

    /// The adapter's weights on a rollout engine (bf16).
    pub fn engine_bytes(&self) -> Bytes {
        Bytes(self.params() * ENGINE_BYTES_PER_PARAM)
    }

    /// Refuses what no engine can serve, naming the field (`lora.rank`): an unknown base, a
    /// base of another size than the job's `type` (`model_b`, billions), unknown or repeated
    /// modules, a rank
    /// above [`MAX_RANK`] or above a targeted module's smaller side (no longer low-rank). (Whether
    /// adapters overflow an engine is a question of how many share it: [`engine_adapter_budget`].)
    pub fn validate(&self, model_b: f64) -> Result<(), (&'static str, String)> {
        let known: Vec<&str> = BASES.iter().map(|b| b.name).collect();
        let b = self
            .base_model()
            .ok_or_else(|| ("lora.base", format!("unknown base `{}` (known: {})", self.base, known.join(", "))))?;
        if f64::from(b.size_b) != model_b {
            return Err((
                "lora.base",
                format!("`{}` has {}B parameters; the job's type says {model_b}B", b.name, b.size_b),
            ));
        }
        if self.targets.is_empty() {
            return Err(("lora.targets", "name at least one module, or \"all-linear\"".into()));
        }
        for (i, t) in self.targets.iter().enumerate() {
            let ok = t == "all-linear" || MODULES.contains(&t.as_str());
            if !ok {
                return Err((
                    "lora.targets",
                    format!("unknown module `{t}` (known: all-linear, {})", MODULES.join(", ")),
                ));
            }
            if self.targets[..i].contains(t) {
                return Err(("lora.targets", format!("`{t}` is named twice")));
            }
        }
        let smallest = self.modules().iter().filter_map(|m| b.shape(m)).map(|(i, o)| i.min(o)).min().unwrap_or(0);
        let limit = MAX_RANK.min(smallest);
        if !(1..=limit).contains(&self.rank) {
            return Err((
                "lora.rank",
                format!("from 1 to {limit} for these modules of `{}`, got {}", b.name, self.rank),
            ));
        }
        Ok(())
    }
}

/// What an engine of `rollout_nodes` rollout nodes keeps for adapters.
pub fn engine_adapter_budget(rollout_nodes: u32) -> Bytes {
    let hbm_gb = GpuKind::H20.spec().hbm_gb * f64::from(GPUS_PER_NODE * rollout_nodes);
    Bytes::from_gb_f64(hbm_gb * ENGINE_ADAPTER_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(base: &str, rank: u32, targets: &[&str]) -> LoraSpec {
        LoraSpec { base: base.into(), rank, targets: targets.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn an_adapters_parameters_follow_the_bases_shapes() {
        // Qwen2.5-7B, rank 1, q and v: 28 layers x ((3584 + 3584) + (3584 + 512)).
        assert_eq!(spec("qwen2.5-7b", 1, &["q_proj", "v_proj"]).params(), 28 * (7168 + 4096));
        // all-linear at rank 32 on the 7B: 80.7M parameters (peft prints 80,740,352).
        assert_eq!(spec("qwen2.5-7b", 32, &["all-linear"]).params(), 80_740_352);
    }

    #[test]
    fn bad_declarations_are_refused_naming_the_field() {
        let seven = 7.0;
        let field = |s: LoraSpec, m| s.validate(m).unwrap_err().0;
        assert_eq!(field(spec("gpt-5", 8, &["all-linear"]), seven), "lora.base");
        assert_eq!(field(spec("qwen2.5-7b", 8, &["all-linear"]), 8.0), "lora.base");
        assert_eq!(field(spec("qwen2.5-7b", 8, &["lm_head"]), seven), "lora.targets");
        assert_eq!(field(spec("qwen2.5-7b", 8, &["q_proj", "q_proj"]), seven), "lora.targets");
        assert_eq!(field(spec("qwen2.5-7b", 8, &[]), seven), "lora.targets");
        assert_eq!(field(spec("qwen2.5-7b", 0, &["all-linear"]), seven), "lora.rank");
        // k_proj's output is 512 wide on the 7B: rank 513 is no longer low-rank.
        assert_eq!(field(spec("qwen2.5-7b", 513, &["k_proj"]), seven), "lora.rank");
        assert!(spec("qwen2.5-7b", 512, &["k_proj"]).validate(seven).is_ok());
        // 3B's kv side is 256 wide.
        assert_eq!(field(spec("qwen2.5-3b", 300, &["all-linear"]), 3.0), "lora.rank");
    }

    #[test]
    fn the_largest_single_adapter_takes_a_fifth_of_one_engines_adapter_share() {
        // 64 layers x 512 x (2 x 10240 + 2 x 6144 + 3 x 32768) = 4.29G parameters, 8.6 GB in
        // bf16, against 5% of one 8 x 96 GB node (38.4 GB): one job alone never overflows an
        // engine; several on one engine can (the shared engine counts them).
        let big = spec("qwen2.5-32b", 512, &["all-linear"]);
        assert!(big.validate(32.0).is_ok());
        assert_eq!(big.params(), 64 * 512 * 131_072);
        assert_eq!(engine_adapter_budget(1), Bytes::from_gb_f64(38.4));
        let share = big.engine_bytes().0 as f64 / engine_adapter_budget(1).0 as f64;
        assert!((0.2..0.25).contains(&share), "{share}");
    }
}
