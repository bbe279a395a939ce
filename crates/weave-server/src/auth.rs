//! Bearer tokens per tenant. The config file stores SHA-256 hashes of tokens, never tokens;
//! comparison is constant-time over every entry.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    pub name: String,
    pub token_sha256: [u8; 32],
    pub admin: bool,
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub tenant: String,
    pub admin: bool,
}

impl Caller {
    pub fn may_see(&self, owner: &str) -> bool {
        self.admin || self.tenant == owner
    }
}

#[derive(Debug, Error)]
pub enum TenantsError {
    #[error("tenants file: {0}")]
    Parse(String),
    #[error("tenants file: tenant #{index}: {reason}")]
    Invalid { index: usize, reason: String },
}

#[derive(Clone, Debug, Default)]
pub struct Tenants {
    entries: Vec<Tenant>,
    /// No authentication (a single implicit admin): only for local experiments.
    open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tenant: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: String,
    #[serde(default)]
    admin: bool,
}

pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(chunk).ok()?, 16).ok()?;
    }
    Some(out)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tenants {
    /// Parses `[[tenant]] name = "...", token_sha256 = "<hex>", admin = true|false`.
    pub fn from_toml(text: &str) -> Result<Tenants, TenantsError> {
        let file: File = toml::from_str(text).map_err(|e| TenantsError::Parse(e.to_string()))?;
        let mut entries = Vec::new();
        for (i, e) in file.tenant.into_iter().enumerate() {
            let invalid = |reason: &str| TenantsError::Invalid { index: i + 1, reason: reason.into() };
            if e.name.is_empty() {
                return Err(invalid("`name` is empty"));
            }
            let hash = unhex(&e.token_sha256)
                .ok_or_else(|| invalid("`token_sha256` must be 64 hex digits (see `weave token hash`)"))?;
            entries.push(Tenant { name: e.name, token_sha256: hash, admin: e.admin });
        }
        if entries.is_empty() {
            return Err(TenantsError::Parse("no [[tenant]] entries".into()));
        }
        Ok(Tenants { entries, open: false })
    }

    pub fn open_access() -> Tenants {
        Tenants { entries: Vec::new(), open: true }
    }

    /// The caller for an `Authorization` header value, if the token is known.
    pub fn authenticate(&self, header: Option<&str>) -> Option<Caller> {
        if self.open {
            return Some(Caller { tenant: "default".into(), admin: true });
        }
        let token = header?.strip_prefix("Bearer ")?.trim();
        let hash = sha256(token);
        // Compare against every entry, so timing does not reveal which one matched.
        let mut found = None;
        for t in &self.entries {
            if constant_time_eq(&t.token_sha256, &hash) && found.is_none() {
                found = Some(Caller { tenant: t.name.clone(), admin: t.admin });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_by_hash() {
        let text = format!(
            "[[tenant]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
            hex(&sha256("a-secret")),
            hex(&sha256("o-secret"))
        );
        let t = Tenants::from_toml(&text).unwrap();
        assert_eq!(t.authenticate(Some("Bearer a-secret")), Some(Caller { tenant: "alice".into(), admin: false }));
        assert!(t.authenticate(Some("Bearer o-secret")).unwrap().admin);
        assert_eq!(t.authenticate(Some("Bearer nope")), None);
        assert_eq!(t.authenticate(Some("a-secret")), None);
        assert_eq!(t.authenticate(None), None);
    }

    #[test]
    fn bad_files_name_the_problem() {
        assert!(Tenants::from_toml("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"xyz\"\n")
            .unwrap_err()
            .to_string()
            .contains("tenant #1"));
        assert!(Tenants::from_toml("[[tenant]]\nname = \"a\"\ntoken = \"x\"\n")
            .unwrap_err()
            .to_string()
            .contains("token"));
    }
}
