//! A job's fields, declared once. The trace format ([`crate::JsonlJob`]), a submission to
//! `weave serve` (`SubmitSpec`) and the server's OpenAPI schema all read them from
//! [`JobFields`]: a new field is one edit here (the struct and its [`JobFields::schema`]
//! entry, which a test holds together).
//!
//! Why `#[serde(flatten)]` plus [`NoUnknownFields`], not `deny_unknown_fields`: serde cannot
//! refuse unknown fields on a struct that flattens another, and a declarative macro that pastes
//! the fields into each struct would hide them from rustdoc and rust-analyzer. Flattening
//! keeps each format a plain struct, and the catch-all refuses any key no struct took, naming
//! it, while the input is read (as `deny_unknown_fields` did).

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// The fields a job has wherever it is described (besides its `id`, its arrival and its
/// owner, which each door gives its own way).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct JobFields {
    /// `7B_8k`: model size and generation length (or `model` and `max_tokens`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A token count, 8192 or "8k".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<f64>,
    /// Iterations to run (a trace gives this or `departure_s`; a submission without it runs
    /// until cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Measured per-iteration durations, seconds: both or neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_s: Option<f64>,
    /// `low`, `normal` (default) or `high`: the order among a tenant's waiting jobs when the
    /// pools have quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Bounded staleness k, a whole number 0..=MAX_STALENESS (absent: 0, on-policy). Read as
    /// any JSON value so a negative, fractional or huge one is refused naming this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<Value>,
    /// An agentic rollout: turns, environment steps, sandboxes (see
    /// `weave_core::agentic::AgenticSpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentic: Option<weave_core::agentic::AgenticSpec>,
    /// A LoRA adapter of a named base (see `weave_core::lora::LoraSpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<weave_core::lora::LoraSpec>,
}

impl JobFields {
    /// JSON Schema of each field (OpenAPI 3.0 dialect), by its name on the wire.
    pub fn schema() -> Map<String, Value> {
        let max_staleness = weave_core::MAX_STALENESS;
        let props = json!({
            "type": { "type": "string", "example": "7B_8k", "description": "Model size and generation length (or `model` and `max_tokens`)." },
            "model": { "type": "string", "example": "7B" },
            "max_tokens": { "oneOf": [{ "type": "integer" }, { "type": "string" }], "example": "8k" },
            "batch": { "type": "integer", "minimum": 1 },
            "algorithm": { "type": "string", "enum": ["ppo", "grpo", "dapo"] },
            "rollout_nodes": { "type": "integer", "minimum": 1 },
            "train_nodes": { "type": "integer", "minimum": 1 },
            "slo": { "type": "number", "minimum": 1, "description": "Allowed slowdown against running alone." },
            "iterations": { "type": "integer", "minimum": 1 },
            "rollout_s": { "type": "number", "description": "Measured rollout per iteration, seconds (give train_s too)." },
            "train_s": { "type": "number", "description": "Measured training per iteration, seconds (give rollout_s too)." },
            "priority": { "type": "string", "enum": ["low", "normal", "high"],
                          "description": "Order among the tenant's own waiting jobs when the pools have quotas." },
            "staleness": { "type": "integer", "minimum": 0, "maximum": max_staleness,
                           "description": "Bounded staleness k: rollout n may run beside trainings n-k .. n-1 (a server admits at most its --max-staleness; 0, on-policy, by default)." },
            "agentic": { "type": "object",
                         "required": ["turns", "gen_s_per_turn", "env", "startup", "sandbox"],
                         "description": "An agentic rollout: trajectories of turns, each generated on the rollout GPUs and followed by an environment step in a CPU sandbox (turns: short_mean, long_mean, long_share, max; gen_s_per_turn; env: {dist: normal, mean_s, sigma_s} or {dist: log_normal, p50_s, p99_s}; startup: cold_s, cached_s, cached_share, failure_rate, timeout_s; reward_s; sandbox: cores, mem_gib, pausable)." },
            "lora": { "type": "object", "required": ["base", "rank"],
                      "properties": {
                          "base": { "type": "string", "enum": weave_core::lora::BASES.iter().map(|b| b.name).collect::<Vec<_>>() },
                          "rank": { "type": "integer", "minimum": 1, "maximum": weave_core::lora::MAX_RANK },
                          "targets": { "type": "array", "items": { "type": "string" }, "example": ["all-linear"] } },
                      "additionalProperties": false,
                      "description": "A LoRA adapter of a named base (its size must be the type's): the job trains only the adapter, and jobs on one base may share its rollout engine and trainer." },
        });
        match props {
            Value::Object(m) => m,
            _ => unreachable!("a JSON object literal"),
        }
    }
}

/// Refuses, naming it, any field that no other part of the struct it is flattened into
/// took. Declare it last, as `#[serde(flatten, skip_serializing)]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NoUnknownFields;

impl<'de> Deserialize<'de> for NoUnknownFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Refuse;
        impl<'de> Visitor<'de> for Refuse {
            type Value = NoUnknownFields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("no further fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoUnknownFields, A::Error> {
                match map.next_key::<String>()? {
                    Some(key) => Err(de::Error::custom(format_args!("unknown field `{key}`"))),
                    None => Ok(NoUnknownFields),
                }
            }
        }
        d.deserialize_map(Refuse)
    }
}

/// The wire names of a plain (not flattening) struct's fields, as serde reads them.
pub fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Names<'_> {
        type Error = de::value::Error;
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("only the names were asked for"))
        }
        fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut names));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_names_every_field_and_nothing_else() {
        let mut declared: Vec<&str> = field_names::<JobFields>().to_vec();
        let mut documented: Vec<String> = JobFields::schema().keys().cloned().collect();
        declared.sort_unstable();
        documented.sort_unstable();
        assert_eq!(declared, documented);
        assert!(declared.contains(&"type"), "wire names, not Rust names");
    }

    #[test]
    fn an_unknown_field_is_refused_by_name_and_known_ones_pass() {
        #[derive(serde::Deserialize, Debug)]
        struct Door {
            #[allow(dead_code)]
            id: String,
            #[serde(flatten)]
            job: JobFields,
            #[serde(flatten)]
            _strict: NoUnknownFields,
        }
        let ok: Door = serde_json::from_str(r#"{"id":"a","type":"7B_8k","staleness":2}"#).unwrap();
        assert_eq!(ok.job.job_type.as_deref(), Some("7B_8k"));
        let e = serde_json::from_str::<Door>(r#"{"id":"a","type":"7B_8k","colour":1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `colour`"), "{e}");
    }
}
