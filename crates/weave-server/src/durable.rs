//! Where acknowledged records go: the embedded store on this machine (the default), or an etcd
//! cluster that several replicas share (`weave serve --etcd`), written only by the active one.

use crate::plane::Record;
use std::time::{Duration, Instant};
use weave_etcd::log::{AppendError, Leadership, RecordLog};
use weave_etcd::Etcd;
use weave_store::Store;
use weave_store::{Compacted, Encode};

/// A write that was not made durable (nothing was acknowledged).
#[derive(Debug, thiserror::Error)]
pub enum NotWritten {
    #[error(transparent)]
    Store(#[from] weave_store::StoreError),
    /// etcd refused or could not take it (no quorum), or this replica no longer leads.
    #[error("the replicated log: {0}")]
    Replicated(String),
}

pub enum Durable {
    Local(Store),
    Etcd(Replicated),
}

/// The record log in etcd and this replica's leadership of it.
pub struct Replicated {
    pub(crate) etcd: Etcd,
    pub(crate) log: RecordLog,
    pub(crate) leader: Leadership,
    /// Renewed every third of the lease (see [`Replicated::renew_if_due`]).
    pub(crate) renew_every: Duration,
    pub(crate) renewed: Instant,
    /// Why the last write failed, until one works again (`/readyz`).
    pub(crate) failed: Option<String>,
}

impl Replicated {
    /// Renews the leadership's lease when a third of it has passed; false once it is lost
    /// (the lease expired: another replica may lead, and this one can no longer write).
    pub fn renew_if_due(&mut self) -> bool {
        if self.renewed.elapsed() < self.renew_every {
            return true;
        }
        match self.leader.renew() {
            Ok(true) => {
                self.renewed = Instant::now();
                true
            }
            Ok(false) => false,
            // etcd unreachable for now: the lease may still hold; writes tell.
            Err(e) => {
                self.failed = Some(e.to_string());
                true
            }
        }
    }
}

impl Durable {
    /// Makes `record` durable: on the local disk, or committed by etcd's quorum while this
    /// replica leads. Its number in the log.
    pub fn append(&mut self, record: &Record) -> Result<u64, NotWritten> {
        match self {
            Durable::Local(s) => Ok(s.append(record)?),
            Durable::Etcd(r) => {
                let bytes = serde_json::to_vec(record).map_err(|e| NotWritten::Replicated(e.to_string()))?;
                let written = r.log.append(&r.leader, &bytes);
                r.failed = written.as_ref().err().map(AppendError::to_string);
                written.map_err(|e| NotWritten::Replicated(e.to_string()))
            }
        }
    }

    /// Keeps this replica's leadership (see [`Replicated::renew_if_due`]); false once lost.
    /// The embedded store has no leadership to lose.
    pub fn keep_leading(&mut self) -> bool {
        match self {
            Durable::Local(_) => true,
            Durable::Etcd(r) => r.renew_if_due(),
        }
    }

    /// The etcd client and the log's prefix, to read the cluster without this lock (`None`:
    /// the embedded store).
    pub fn etcd(&self) -> Option<(Etcd, String)> {
        match self {
            Durable::Local(_) => None,
            Durable::Etcd(r) => Some((r.etcd.clone(), r.log.prefix().to_string())),
        }
    }

    /// Records in the replicated log (`None`: the embedded store).
    pub fn replicated_records(&self) -> Option<u64> {
        match self {
            Durable::Local(_) => None,
            Durable::Etcd(r) => Some(r.log.len()),
        }
    }

    pub fn compacting(&self) -> bool {
        match self {
            Durable::Local(s) => s.compacting(),
            Durable::Etcd(_) => false,
        }
    }

    /// Records after the newest snapshot (etcd: none are taken yet, so every record).
    pub fn records_since_snapshot(&self) -> u64 {
        match self {
            Durable::Local(s) => s.records_since_snapshot(),
            Durable::Etcd(_) => 0,
        }
    }

    pub fn appended_bytes(&self) -> u64 {
        match self {
            Durable::Local(s) => s.appended_bytes(),
            Durable::Etcd(_) => 0,
        }
    }

    pub fn finish_compaction(&mut self, wait: bool) -> Option<Compacted> {
        match self {
            Durable::Local(s) => s.finish_compaction(wait),
            Durable::Etcd(_) => None,
        }
    }

    /// Starts a snapshot (etcd: not yet; the log keeps every record).
    pub fn compact_in_background(&mut self, encode: Encode) -> bool {
        match self {
            Durable::Local(s) => s.compact_in_background(encode),
            Durable::Etcd(_) => false,
        }
    }

    /// Whether the next write can work: the disk's probe, or etcd answering with a quorum
    /// after a failed write.
    pub fn probe(&mut self) -> Result<(), String> {
        match self {
            Durable::Local(s) => s.probe(),
            Durable::Etcd(r) => {
                if r.failed.is_some() {
                    r.etcd.check().map_err(|e| e.to_string())?;
                    r.failed = None;
                }
                Ok(())
            }
        }
    }
}
