//! What one client may leave in durable records and held events: the bounds checked where a
//! request is accepted.

/// Bounds on what a client's request may leave in durable records and held events, checked
/// where a request is accepted (never at replay: a store written before a bound still opens).
/// With every kept field bounded, one token at its request rate adds at most a bounded number
/// of bytes per second, and the history's byte retention bounds what stays in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// A reason (a restart's, a node's, a notice's): characters, no control characters.
    pub reason_chars: usize,
    /// A phase finish's `meta`, as compact JSON.
    pub meta_bytes: usize,
    /// A submission's `launch.env`: names and values together.
    pub env_bytes: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        // A reason is a sentence; the reference jobs' meta is under 400 bytes (versions,
        // digests, counts); an environment of a few dozen settings fits 4 KiB.
        InputLimits { reason_chars: 200, meta_bytes: 4096, env_bytes: 4096 }
    }
}

impl InputLimits {
    /// `reason` if it is within [`InputLimits::reason_chars`] and has no control characters.
    pub fn check_reason(&self, reason: &str) -> Result<(), String> {
        if reason.chars().count() > self.reason_chars || reason.chars().any(char::is_control) {
            return Err(format!("`reason`: at most {} characters, no control characters", self.reason_chars));
        }
        Ok(())
    }

    /// A finish's `meta`: a JSON object of at most [`InputLimits::meta_bytes`] as compact JSON.
    pub fn check_meta(&self, meta: &serde_json::Value) -> Result<(), String> {
        if !meta.is_object() {
            return Err("`meta`: expected a JSON object".into());
        }
        let bytes = serde_json::to_vec(meta).map_or(usize::MAX, |v| v.len());
        if bytes > self.meta_bytes {
            return Err(format!("`meta`: {bytes} bytes as JSON, at most {}", self.meta_bytes));
        }
        Ok(())
    }

    /// A launch environment: names and values together within [`InputLimits::env_bytes`], no
    /// NUL in a value (a process environment cannot hold one).
    pub fn check_env(&self, env: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
        let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > self.env_bytes {
            return Err(format!("`launch.env`: {bytes} bytes of names and values, at most {}", self.env_bytes));
        }
        if let Some((k, _)) = env.iter().find(|(_, v)| v.contains('\0')) {
            return Err(format!("`launch.env.{k}`: a value may not contain NUL"));
        }
        Ok(())
    }
}
