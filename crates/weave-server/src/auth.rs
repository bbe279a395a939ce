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
    /// Nominal quota (rollout nodes, training nodes) and borrowing limit, with fixed pools.
    pub quota: Option<(f64, f64)>,
    pub borrow_limit: Option<f64>,
    /// Environment cores its agentic jobs may hold at once (part of a quota).
    pub env_cores: Option<f64>,
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub tenant: String,
    pub admin: bool,
    /// A job token: the caller may only see and drive this one job.
    pub job: Option<String>,
}

impl Caller {
    pub fn tenant(tenant: &str, admin: bool) -> Caller {
        Caller { tenant: tenant.into(), admin, job: None }
    }

    /// Whether the caller may see and drive job `name` of tenant `owner`.
    pub fn may_see(&self, owner: &str, name: &str) -> bool {
        (self.admin || self.tenant == owner) && self.job.as_deref().is_none_or(|j| j == name)
    }
}

/// Job tokens: what a launched job (on Ray) authenticates with. A token names its job and
/// admission and carries `SHA-256(secret, tenant, job, admission)`; it lets that admission of
/// the job drive itself and nothing else. The
/// secret stays with the server (a file in its data directory); tokens are never stored.
#[derive(Clone)]
pub struct JobTokens {
    secret: [u8; 32],
}

const JOB_TOKEN_PREFIX: &str = "wj1.";

impl JobTokens {
    pub fn new(secret: [u8; 32]) -> JobTokens {
        JobTokens { secret }
    }

    /// Reads the secret from `path`, creating it (from the OS's random source, mode 0600)
    /// when missing.
    pub fn load_or_create(path: &std::path::Path) -> std::io::Result<JobTokens> {
        use std::io::{Read, Write};
        if let Ok(bytes) = std::fs::read(path) {
            let secret: [u8; 32] = bytes.try_into().map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: expected 32 bytes", path.display()))
            })?;
            return Ok(JobTokens { secret });
        }
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
        let tmp = path.with_extension("tmp");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(&secret)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        Ok(JobTokens { secret })
    }

    /// A short public name for this server's store (8 hex digits): tells its launches apart
    /// from another Weave's on the same cluster.
    pub fn instance_id(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(b"instance-id");
        hex(&h.finalize()[..4])
    }

    fn mac(&self, tenant: &str, job: &str, admission: u32) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(tenant.as_bytes());
        h.update([0u8]);
        h.update(job.as_bytes());
        h.update([0u8]);
        h.update(admission.to_le_bytes());
        h.finalize().into()
    }

    /// The token of one admission of a job: a re-admitted job gets a new one, and the old
    /// one (held by a driver that may still be winding down) stops working.
    pub fn token(&self, tenant: &str, job: &str, admission: u32) -> String {
        format!("{JOB_TOKEN_PREFIX}{job}.{admission}.{}", hex(&self.mac(tenant, job, admission)))
    }

    /// The caller for a job token; `current` gives a job's tenant and current admission by name.
    pub fn authenticate(
        &self,
        header: Option<&str>,
        current: impl Fn(&str) -> Option<(String, u32)>,
    ) -> Option<Caller> {
        let token = header?.strip_prefix("Bearer ")?.trim().strip_prefix(JOB_TOKEN_PREFIX)?;
        let (rest, mac) = token.rsplit_once('.')?;
        let (job, admission) = rest.rsplit_once('.')?;
        let admission: u32 = admission.parse().ok()?;
        let given = unhex(mac)?;
        let (tenant, now) = current(job)?;
        let valid = constant_time_eq(&self.mac(&tenant, job, admission), &given);
        (valid && admission == now).then(|| Caller { tenant, admin: false, job: Some(job.to_string()) })
    }
}

#[derive(Debug, Error)]
pub enum TenantsError {
    #[error("tenants file: {0}")]
    Parse(String),
    #[error("tenants file: tenant #{index} `{name}`: {reason}")]
    Invalid { index: usize, name: String, reason: String },
}

#[derive(Clone, Debug, Default)]
pub struct Tenants {
    entries: Vec<Tenant>,
    /// The `[sharing]` table: whether a waiting job may preempt, and the minimum run.
    sharing: Sharing,
    /// No authentication (a single implicit admin): only for local experiments.
    open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tenant: Vec<Entry>,
    #[serde(default)]
    sharing: Option<Sharing>,
}

/// How tenants share fixed pools beyond quotas.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sharing {
    /// A waiting job may preempt capacity another tenant borrowed from its tenant's quota,
    /// and lower-priority jobs of its own tenant (see `preempts_own`).
    #[serde(default)]
    pub preemption: bool,
    /// Backfill: behind jobs that cannot start, a later one may if it leaves the projected
    /// start of each of the first blocked ones where it was (`weave_place::queue`). Needs
    /// `preemption`.
    #[serde(default)]
    pub backfill: bool,
    /// A job is never preempted before it has run this long since its admission.
    #[serde(default = "default_min_run_s")]
    pub min_run_s: f64,
    /// Fair share with decay: order tenants by their use over the last hours (this half-life)
    /// instead of their use right now.
    #[serde(default)]
    pub half_life_h: Option<f64>,
    /// The lowest priority that may preempt lower-priority jobs of its own tenant: `high`
    /// (the default) or `normal` (`weave_place::share::SharePolicy::preempts_own`).
    #[serde(default = "default_preempts_own")]
    pub preempts_own: weave_core::Priority,
}

fn default_min_run_s() -> f64 {
    600.0
}

fn default_preempts_own() -> weave_core::Priority {
    weave_core::Priority::High
}

impl Default for Sharing {
    fn default() -> Self {
        Sharing {
            preemption: false,
            backfill: false,
            min_run_s: default_min_run_s(),
            half_life_h: None,
            preempts_own: default_preempts_own(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    /// Required by the server; `weave experiment tenants` reads quotas only.
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    admin: bool,
    /// Quota with fixed pools: nodes of each pool the tenant is entitled to.
    #[serde(default)]
    rollout_nodes: Option<f64>,
    #[serde(default)]
    training_nodes: Option<f64>,
    #[serde(default)]
    borrow_limit: Option<f64>,
    #[serde(default)]
    env_cores: Option<f64>,
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

impl Entry {
    /// Its quota, nodes of each pool (rollout, training): both or neither ([`parse`] checks).
    fn quota(&self) -> Option<(f64, f64)> {
        self.rollout_nodes.zip(self.training_nodes)
    }
}

/// The file, checked: names well formed and unique, node counts non-negative, both pools'
/// quotas or neither, at least one tenant. Shared by the server and `weave experiment
/// tenants`, so one file serves both.
fn parse(text: &str) -> Result<File, TenantsError> {
    let file: File = toml::from_str(text).map_err(|e| TenantsError::Parse(e.to_string()))?;
    if file.tenant.is_empty() {
        return Err(TenantsError::Parse("no [[tenant]] entries".into()));
    }
    for (i, e) in file.tenant.iter().enumerate() {
        let invalid =
            |reason: &str| TenantsError::Invalid { index: i + 1, name: e.name.clone(), reason: reason.into() };
        let charset = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        if e.name.is_empty() || e.name.len() > 64 || !e.name.chars().all(charset) {
            return Err(invalid("`name` must be 1 to 64 letters, digits, `.`, `_` or `-`"));
        }
        if file.tenant[..i].iter().any(|o| o.name == e.name) {
            return Err(invalid("the name is taken by an earlier tenant"));
        }
        let nodes = |v: Option<f64>| v.is_none_or(|n| n.is_finite() && n >= 0.0);
        if !(nodes(e.rollout_nodes) && nodes(e.training_nodes) && nodes(e.borrow_limit)) {
            return Err(invalid(
                "`rollout_nodes`, `training_nodes` and `borrow_limit` must be non-negative numbers of nodes",
            ));
        }
        if !nodes(e.env_cores) {
            return Err(invalid("`env_cores` must be a non-negative number of environment cores"));
        }
        if e.env_cores.is_some() && e.rollout_nodes.is_none() {
            return Err(invalid("`env_cores` is part of a quota: give `rollout_nodes` and `training_nodes` too"));
        }
        if e.rollout_nodes.is_some() != e.training_nodes.is_some() {
            return Err(invalid("give both `rollout_nodes` and `training_nodes` (a quota), or neither"));
        }
    }
    Ok(file)
}

/// The quotas of a tenants file, tokens not needed (`weave experiment tenants` reads the
/// server's file, or one with quotas only); every tenant needs one.
pub fn quotas_from_toml(text: &str) -> Result<Vec<weave_place::share::TenantQuota>, TenantsError> {
    parse(text)?
        .tenant
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let (rollout_nodes, training_nodes) = e.quota().ok_or_else(|| TenantsError::Invalid {
                index: i + 1,
                name: e.name.clone(),
                reason: "the experiment needs a quota: give `rollout_nodes` and `training_nodes`".into(),
            })?;
            Ok(weave_place::share::TenantQuota {
                name: e.name,
                rollout_nodes,
                training_nodes,
                borrow_limit: e.borrow_limit,
                env_cores: e.env_cores,
            })
        })
        .collect()
}

impl Tenants {
    /// Parses `[[tenant]] name = "...", token_sha256 = "<hex>", admin = true|false`.
    pub fn from_toml(text: &str) -> Result<Tenants, TenantsError> {
        let file = parse(text)?;
        let mut entries = Vec::new();
        for (i, e) in file.tenant.into_iter().enumerate() {
            let invalid =
                |reason: &str| TenantsError::Invalid { index: i + 1, name: e.name.clone(), reason: reason.into() };
            let hash = e
                .token_sha256
                .as_deref()
                .and_then(unhex)
                .ok_or_else(|| invalid("`token_sha256` must be 64 hex digits (see `weave token hash`)"))?;
            // Two tenants with one token: the first would always answer, the second be locked out.
            if entries.iter().any(|t: &Tenant| t.token_sha256 == hash) {
                return Err(invalid("`token_sha256` is an earlier tenant's: every tenant needs its own token"));
            }
            entries.push(Tenant {
                quota: e.quota(),
                name: e.name,
                token_sha256: hash,
                admin: e.admin,
                borrow_limit: e.borrow_limit,
                env_cores: e.env_cores,
            });
        }
        let sharing = file.sharing.unwrap_or_default();
        if !(sharing.min_run_s.is_finite() && (0.0..=1e9).contains(&sharing.min_run_s)) {
            return Err(TenantsError::Parse("[sharing] `min_run_s` must be seconds in [0, 1e9]".into()));
        }
        if sharing.half_life_h.is_some_and(|h| !(h.is_finite() && (0.01..=1e6).contains(&h))) {
            return Err(TenantsError::Parse("[sharing] `half_life_h` must be hours in [0.01, 1e6]".into()));
        }
        if sharing.backfill && !sharing.preemption {
            return Err(TenantsError::Parse(
                "[sharing] `backfill` comes with `preemption` (the modes build on each other): set both".into(),
            ));
        }
        if sharing.preemption && entries.iter().all(|t| t.quota.is_none()) {
            return Err(TenantsError::Parse(
                "[sharing] `preemption` needs quotas: give tenants `rollout_nodes` and `training_nodes`".into(),
            ));
        }
        Ok(Tenants { entries, sharing, open: false })
    }

    /// Quotas mean something only with fixed pools (`pools`: their sizes, rollout and
    /// training; `None` for elastic pools), and no tenant's may exceed a pool.
    pub fn check_pools(&self, pools: Option<(u32, u32)>) -> Result<(), TenantsError> {
        for (i, t) in self.entries.iter().enumerate() {
            let Some((r, tr)) = t.quota else { continue };
            let invalid = |reason: String| TenantsError::Invalid { index: i + 1, name: t.name.clone(), reason };
            let Some((rp, tp)) = pools else {
                return Err(invalid(
                    "a quota needs fixed pools (--fixed-capacity, or --backend ray): elastic pools would ignore it"
                        .into(),
                ));
            };
            if r > rp as f64 || tr > tp as f64 {
                return Err(invalid(format!(
                    "its quota ({r} rollout, {tr} training nodes) exceeds the pools ({rp} rollout, {tp} training nodes)"
                )));
            }
        }
        Ok(())
    }

    /// Quotas, when some tenant has one: every tenant takes part (one without a quota may
    /// only borrow).
    pub fn share_policy(&self) -> Option<weave_place::share::SharePolicy> {
        use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
        self.entries.iter().any(|t| t.quota.is_some()).then(|| SharePolicy {
            mode: match (self.sharing.preemption, self.sharing.backfill) {
                (_, true) => ShareMode::Backfill,
                (true, false) => ShareMode::Preemption,
                (false, false) => ShareMode::Quotas,
            },
            tenants: self
                .entries
                .iter()
                .map(|t| TenantQuota {
                    name: t.name.clone(),
                    rollout_nodes: t.quota.map_or(0.0, |q| q.0),
                    training_nodes: t.quota.map_or(0.0, |q| q.1),
                    borrow_limit: t.borrow_limit,
                    env_cores: t.env_cores,
                })
                .collect(),
            min_run: weave_core::Micros::from_secs_f64(self.sharing.min_run_s),
            half_life: self.sharing.half_life_h.map(|h| weave_core::Micros::from_secs_f64(h * 3600.0)),
            // The server's checkpoint is the last completed iteration (drivers resume there).
            checkpoint_every: 1,
            preempts_own: self.sharing.preempts_own,
            // Victims stop at once: a driver loses at most its in-flight iteration.
            grace: weave_core::Micros::ZERO,
        })
    }

    pub fn open_access() -> Tenants {
        Tenants { entries: Vec::new(), sharing: Sharing::default(), open: true }
    }

    /// The caller for an `Authorization` header value, if the token is known.
    pub fn authenticate(&self, header: Option<&str>) -> Option<Caller> {
        if self.open {
            return Some(Caller::tenant("default", true));
        }
        let token = header?.strip_prefix("Bearer ")?.trim();
        let hash = sha256(token);
        // Compare against every entry, so timing does not reveal which one matched.
        let mut found = None;
        for t in &self.entries {
            if constant_time_eq(&t.token_sha256, &hash) && found.is_none() {
                found = Some(Caller::tenant(&t.name, t.admin));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_file_names_each_tenant_once_with_its_own_token() {
        let entry = |name: &str, token: &str| {
            let name = toml::Value::String(name.into());
            format!("[[tenant]]\nname = {name}\ntoken_sha256 = \"{}\"\n", hex(&sha256(token)))
        };
        let err = |text: String| Tenants::from_toml(&text).unwrap_err().to_string();
        let twice = err(entry("a", "x") + &entry("a", "y"));
        assert!(twice.contains("tenant #2 `a`") && twice.contains("taken"), "{twice}");
        let shared = err(entry("a", "x") + &entry("b", "x"));
        assert!(shared.contains("tenant #2 `b`") && shared.contains("own token"), "{shared}");
        for bad in ["", "a\"b", "line\nbreak", "nul\u{0}", &"n".repeat(65), "spa ce"] {
            let e = err(entry(bad, "x"));
            assert!(e.contains("1 to 64 letters"), "{bad:?}: {e}");
        }
        assert!(Tenants::from_toml(&(entry("team-a.1_x", "x") + &entry("ops", "y"))).is_ok());
        // Quotas only with fixed pools, and within them.
        let with_quota = Tenants::from_toml(&(entry("a", "x") + "rollout_nodes = 2\ntraining_nodes = 3\n")).unwrap();
        assert!(with_quota.check_pools(None).unwrap_err().to_string().contains("fixed pools"));
        assert!(with_quota.check_pools(Some((2, 2))).unwrap_err().to_string().contains("exceeds the pools"));
        assert!(with_quota.check_pools(Some((2, 3))).is_ok());
        assert!(Tenants::from_toml(&entry("a", "x")).unwrap().check_pools(None).is_ok(), "no quota, no pools needed");
        // An environment cap is part of a quota, and a number of cores.
        let env_alone = err(entry("a", "x") + "env_cores = 64\n");
        assert!(env_alone.contains("`env_cores` is part of a quota"), "{env_alone}");
        let negative = err(entry("a", "x") + "rollout_nodes = 2\ntraining_nodes = 3\nenv_cores = -1\n");
        assert!(negative.contains("`env_cores` must be a non-negative"), "{negative}");
        let capped = Tenants::from_toml(&(entry("a", "x") + "rollout_nodes = 2\ntraining_nodes = 3\nenv_cores = 64\n"));
        assert_eq!(capped.unwrap().share_policy().unwrap().tenants[0].env_cores, Some(64.0));
        // The experiment reads the same file for quotas; tokens are optional there.
        let quotas = quotas_from_toml("[[tenant]]\nname = \"a\"\nrollout_nodes = 2\ntraining_nodes = 1\n").unwrap();
        assert_eq!((quotas[0].rollout_nodes, quotas[0].training_nodes), (2.0, 1.0));
        assert!(Tenants::from_toml("[[tenant]]\nname = \"a\"\n").unwrap_err().to_string().contains("token_sha256"));
    }

    #[test]
    fn tokens_authenticate_by_hash() {
        let text = format!(
            "[[tenant]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
            hex(&sha256("a-secret")),
            hex(&sha256("o-secret"))
        );
        let t = Tenants::from_toml(&text).unwrap();
        assert_eq!(t.authenticate(Some("Bearer a-secret")), Some(Caller::tenant("alice", false)));
        assert!(t.authenticate(Some("Bearer o-secret")).unwrap().admin);
        assert_eq!(t.authenticate(Some("Bearer nope")), None);
        assert_eq!(t.authenticate(Some("a-secret")), None);
        assert_eq!(t.authenticate(None), None);
    }

    #[test]
    fn job_tokens_drive_only_their_own_job_and_admission() {
        let tokens = JobTokens::new([7; 32]);
        let current = |job: &str| match job {
            "a.1" => Some(("alice".to_string(), 3)),
            "b" => Some(("alice".to_string(), 0)),
            _ => None,
        };
        let bearer = |t: &str| format!("Bearer {t}");
        let t = tokens.token("alice", "a.1", 3);
        let c = tokens.authenticate(Some(&bearer(&t)), current).unwrap();
        assert_eq!(c, Caller { tenant: "alice".into(), admin: false, job: Some("a.1".into()) });
        assert!(c.may_see("alice", "a.1"));
        assert!(!c.may_see("alice", "b"), "another job of the same tenant");
        // A token for one job does not open another, an earlier admission's token no longer
        // works, nor does a token under another secret or a garbled one.
        let forged = t.replace("wj1.a.1.3.", "wj1.b.0.");
        assert_eq!(tokens.authenticate(Some(&bearer(&forged)), current), None);
        assert_eq!(tokens.authenticate(Some(&bearer(&tokens.token("alice", "a.1", 2))), current), None);
        assert_eq!(JobTokens::new([8; 32]).authenticate(Some(&bearer(&t)), current), None);
        assert_eq!(tokens.authenticate(Some("Bearer wj1.a.1.3.zz"), current), None);
        assert_eq!(tokens.authenticate(Some(&bearer(&tokens.token("alice", "gone", 0))), current), None);
    }

    #[test]
    fn the_sharing_table_turns_preemption_on() {
        use weave_place::share::ShareMode;
        let tenant = |name: &str| format!("[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n", hex(&sha256(name)));
        let quotas = format!("{}rollout_nodes = 1\ntraining_nodes = 1\n", tenant("a"));
        let policy = Tenants::from_toml(&quotas).unwrap().share_policy().unwrap();
        assert_eq!((policy.mode, policy.min_run), (ShareMode::Quotas, weave_core::Micros::from_secs(600)));
        let on = format!("{quotas}[sharing]\npreemption = true\nmin_run_s = 30\n");
        let policy = Tenants::from_toml(&on).unwrap().share_policy().unwrap();
        assert_eq!((policy.mode, policy.min_run), (ShareMode::Preemption, weave_core::Micros::from_secs(30)));
        let backfill = format!("{quotas}[sharing]\npreemption = true\nbackfill = true\n");
        assert_eq!(Tenants::from_toml(&backfill).unwrap().share_policy().unwrap().mode, ShareMode::Backfill);
        let alone = format!("{quotas}[sharing]\nbackfill = true\n");
        assert!(Tenants::from_toml(&alone).unwrap_err().to_string().contains("set both"));
        let no_quotas = format!("{}[sharing]\npreemption = true\n", tenant("a"));
        assert!(Tenants::from_toml(&no_quotas).unwrap_err().to_string().contains("needs quotas"));
        let negative = format!("{quotas}[sharing]\nmin_run_s = -1\n");
        assert!(Tenants::from_toml(&negative).unwrap_err().to_string().contains("min_run_s"));
        // Who may displace its own tenant's jobs: high by default, normal when asked.
        assert_eq!(policy.preempts_own, weave_core::Priority::High);
        let lower = format!(
            "{quotas}[sharing]
preemption = true
preempts_own = \"normal\"\n"
        );
        let policy = Tenants::from_toml(&lower).unwrap().share_policy().unwrap();
        assert_eq!(policy.preempts_own, weave_core::Priority::Normal);
        let bad = format!(
            "{quotas}[sharing]
preemption = true
preempts_own = \"urgent\"\n"
        );
        let e = Tenants::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("preempts_own") || e.contains("urgent"), "{e}");
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
