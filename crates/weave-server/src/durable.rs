//! Where acknowledged records go: the embedded store on this machine (the default), or an etcd
//! cluster that several replicas share (`weave serve --etcd`), written only by the active one.

use crate::plane::Record;
use std::thread::JoinHandle;
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
    Etcd(Box<Replicated>),
}

/// The thread writing a snapshot into etcd: records let go (or why not), and when it ended.
type SnapshotWriter = JoinHandle<(Result<u64, String>, Instant)>;

/// The record log in etcd and this replica's leadership of it.
pub struct Replicated {
    etcd: Etcd,
    log: RecordLog,
    leader: Leadership,
    /// Renewed every third of the lease (see [`Replicated::renew_if_due`]).
    renew_every: Duration,
    renewed: Instant,
    /// Why the last write failed, until one works again (`/readyz`).
    failed: Option<String>,
    /// Bytes of records appended since this replica began to lead.
    appended_bytes: u64,
    /// The snapshot being written on a thread of its own: of the state after how many records,
    /// since when, and its outcome (records let go).
    in_flight: Option<(u64, Instant, SnapshotWriter)>,
}

impl Replicated {
    /// Leading `log` (read to its end) under `leader`, whose lease lasts `lease_ttl_s`.
    pub(crate) fn new(etcd: Etcd, log: RecordLog, leader: Leadership, lease_ttl_s: i64) -> Replicated {
        let renew_every = Duration::from_secs_f64(lease_ttl_s as f64 / 3.0);
        let renewed = Instant::now();
        Replicated { etcd, log, leader, renew_every, renewed, failed: None, appended_bytes: 0, in_flight: None }
    }

    /// Writes the state `encode` writes as the snapshot after every record so far, on a
    /// thread of its own, while this replica still leads (see `weave_etcd::snapshot`).
    fn snapshot_in_background(&mut self, encode: Encode) -> bool {
        if self.in_flight.is_some() || self.failed.is_some() {
            return false;
        }
        let (etcd, prefix, guard, at) =
            (self.etcd.clone(), self.log.prefix().to_string(), self.leader.guard(), self.log.len());
        let started = Instant::now();
        let spawned = std::thread::Builder::new().name("weave-snapshot".into()).spawn(move || {
            let mut state = Vec::new();
            let written = encode(&mut state).map_err(|e| format!("encoding the snapshot: {e}")).and_then(|()| {
                weave_etcd::snapshot::write(&etcd, &prefix, &guard, at, &state).map_err(|e| e.to_string())
            });
            (written, Instant::now())
        });
        match spawned {
            Ok(done) => {
                self.in_flight = Some((at, started, done));
                true
            }
            Err(_) => false,
        }
    }

    fn finish_snapshot(&mut self, wait: bool) -> Option<Compacted> {
        if !wait && self.in_flight.as_ref().is_some_and(|(_, _, done)| !done.is_finished()) {
            return None;
        }
        let (at, started, done) = self.in_flight.take()?;
        let (outcome, ended) =
            done.join().unwrap_or_else(|_| (Err("the snapshot writer panicked".into()), Instant::now()));
        match &outcome {
            Ok(_) => self.log.snapshot_written(at),
            // As a failed write: not ready until a write works again (a deposed replica's
            // snapshot fails too, and its next write tells it).
            Err(e) => self.failed = Some(format!("snapshot at record {at}: {e}")),
        }
        let outcome = outcome.map_err(|e| weave_store::StoreError::Db(format!("etcd snapshot at record {at}: {e}")));
        Some(Compacted { started, ended, outcome })
    }

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
                r.appended_bytes += bytes.len() as u64 * u64::from(written.is_ok());
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

    /// Records in the replicated log, and how many of them its newest snapshot covers (`None`:
    /// the embedded store).
    pub fn replicated_records(&self) -> Option<(u64, u64)> {
        match self {
            Durable::Local(_) => None,
            Durable::Etcd(r) => Some((r.log.len(), r.log.base())),
        }
    }

    pub fn compacting(&self) -> bool {
        match self {
            Durable::Local(s) => s.compacting(),
            Durable::Etcd(r) => r.in_flight.is_some(),
        }
    }

    /// Records after the newest snapshot.
    pub fn records_since_snapshot(&self) -> u64 {
        match self {
            Durable::Local(s) => s.records_since_snapshot(),
            Durable::Etcd(r) => r.log.len() - r.log.base(),
        }
    }

    pub fn appended_bytes(&self) -> u64 {
        match self {
            Durable::Local(s) => s.appended_bytes(),
            Durable::Etcd(r) => r.appended_bytes,
        }
    }

    pub fn finish_compaction(&mut self, wait: bool) -> Option<Compacted> {
        match self {
            Durable::Local(s) => s.finish_compaction(wait),
            Durable::Etcd(r) => r.finish_snapshot(wait),
        }
    }

    /// Starts a snapshot of the state after every record so far on a thread of its own, where
    /// `encode` writes it (into the store's file, or into etcd in parts).
    pub fn compact_in_background(&mut self, encode: Encode) -> bool {
        match self {
            Durable::Local(s) => s.compact_in_background(encode),
            Durable::Etcd(r) => r.snapshot_in_background(encode),
        }
    }

    /// Gives up the leadership at once (a replica that stops on purpose: another takes over
    /// without waiting for the lease). Waits for a snapshot in flight first.
    pub fn resign(&mut self) {
        if let Durable::Etcd(r) = self {
            r.finish_snapshot(true);
            let _ = r.etcd.revoke(r.leader.lease());
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
