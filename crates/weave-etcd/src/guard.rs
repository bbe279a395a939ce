//! The leadership's key and what writes conditional on it need (shared by the log and the
//! snapshots).

use crate::{Compare, Etcd, EtcdError};

/// What an append may meet besides etcd's own errors.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("this server is no longer the leader ({holder}): the record was not written")]
    Deposed { holder: String },
}

/// Where record `n` lives.
pub(crate) fn record_key(prefix: &str, n: u64) -> Vec<u8> {
    format!("{prefix}/log/{n:020}").into_bytes()
}

/// What a write needs to be conditional on a campaign's leadership (it may go to another
/// thread: the snapshot writer's).
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    pub(crate) key: Vec<u8>,
    pub(crate) campaign: Vec<u8>,
    pub(crate) prefix: String,
}

impl LeaderGuard {
    pub(crate) fn holds(&self) -> Compare {
        Compare::ValueIs(self.key.clone(), self.campaign.clone())
    }

    /// The error of a write refused because this campaign no longer leads.
    pub(crate) fn deposed(&self, etcd: &Etcd) -> AppendError {
        AppendError::Deposed { holder: leader_now(etcd, &self.prefix) }
    }
}

pub(crate) fn leader_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}/leader").into_bytes()
}

/// Who leads now (the campaign's id), if anyone.
pub fn leader(etcd: &Etcd, prefix: &str) -> Result<Option<String>, EtcdError> {
    let kv = etcd.get(&leader_key(prefix))?;
    Ok(kv.map(|kv| campaign_id(&kv.value)))
}

/// The id part of a campaign's value (`id#lease`).
fn campaign_id(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    text.rsplit_once('#').map_or(text.to_string(), |(id, _)| id.to_string())
}

pub(crate) fn leader_now(etcd: &Etcd, prefix: &str) -> String {
    match leader(etcd, prefix) {
        Ok(Some(id)) => format!("the leader is {id}"),
        Ok(None) => "nobody leads now".into(),
        Err(e) => format!("the leader is unknown: {e}"),
    }
}
