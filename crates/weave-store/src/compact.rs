//! Compaction: a snapshot of the caller's state replaces the records it covers, written
//! either on the caller's thread ([`Store::compact_with`]) or on a thread of its own while the
//! caller goes on appending ([`Store::compact_in_background`]: the caller hands over a frozen
//! copy of its state, as of every record so far, and it is encoded there).
//!
//! The newest snapshot is read back and checked before anything older is let go, and the
//! snapshot before it stays, with every record after that one: a newest snapshot found
//! damaged later is passed over and the state rebuilt from the older one (see
//! `snapshot::read_snapshot`). So compaction at position `at`, with the previous snapshot at
//! `p`, keeps the snapshots at `p` and `at` and the records from `p` on.
//!
//! The part that holds the database's writer is short: the snapshot's bytes go to a file of
//! their own (never through the database), the manifest in one small durable transaction, and
//! what is let go in batches, so appends from another thread are never held up for long.

use crate::snapshot::{file_position, snapshot_dir, verify_manifest, FileWriter, Manifest, PARTS, SNAPSHOT};
use crate::{db_err, guarded, Store, StoreError, LOG};
use redb::{Database, ReadableDatabase, ReadableTable};
use std::path::Path;
use std::time::Instant;

/// Encodes the caller's state as of the snapshot's position (a frozen copy it owns: the
/// caller goes on changing its own meanwhile).
pub type Encode = Box<dyn FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send>;

/// Records, and snapshot parts (a megabyte each), let go per transaction, so that no
/// transaction holds the database's writer long.
const RECORDS_BATCH: usize = 2_000;
const PARTS_BATCH: usize = 8;

/// A snapshot being written on a thread of its own.
pub(crate) struct InFlight {
    at: u64,
    started: Instant,
    done: std::thread::JoinHandle<(Result<u64, StoreError>, Instant)>,
}

/// A snapshot written in the background: when it started and ended (on the monotonic clock,
/// for operators and benchmarks; never part of any decision), and what came of it.
#[derive(Debug)]
pub struct Compacted {
    pub started: Instant,
    pub ended: Instant,
    /// Records let go, or why it failed (the store is then not ready until a write works).
    pub outcome: Result<u64, StoreError>,
}

impl Store {
    /// Stores `snapshot` as the state after every record so far (see [`Store::compact_with`]).
    pub fn compact(&mut self, snapshot: &[u8]) -> Result<u64, StoreError> {
        self.compact_with(|w| w.write_all(snapshot))
    }

    /// Stores what `encode` writes as the snapshot of the state after every record so far and
    /// lets go of what no snapshot needs any more (see the module's documentation). A crash
    /// leaves either the old snapshots and log or the new ones, never neither. Returns how
    /// many records were let go.
    pub fn compact_with(
        &mut self,
        encode: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<u64, StoreError> {
        self.finish_compaction(true);
        let at = self.next;
        let done = self.recover().and_then(|()| {
            let db = self.db.clone().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
            guarded(&self.path, || write_snapshot(&db, &self.path, at, encode))
        });
        // A write that worked here (after `recover`) shows the store takes writes again.
        if done.is_ok() {
            self.failed = None;
        }
        self.compaction_done(at, done)
    }

    /// Starts a snapshot of the state after every record so far on a thread of its own, where
    /// `encode` writes it (it must own a copy of that state; the caller goes on appending
    /// meanwhile). `false` when one is still in flight (its outcome not yet collected by
    /// [`Store::finish_compaction`]) or the store has failed (nothing started). A failure is
    /// reported by [`Store::ready`] like a failed write, and loses nothing.
    pub fn compact_in_background(&mut self, encode: Encode) -> bool {
        if self.in_flight.is_some() || self.failed.is_some() {
            return false;
        }
        let Some(db) = self.db.clone() else { return false };
        let (at, path) = (self.next, self.path.clone());
        let started = Instant::now();
        let spawned = std::thread::Builder::new().name("weave-snapshot".into()).spawn(move || {
            let written = guarded(&path, || write_snapshot(&db, &path, at, encode));
            (written, Instant::now())
        });
        match spawned {
            Ok(done) => {
                self.in_flight = Some(InFlight { at, started, done });
                true
            }
            Err(_) => false,
        }
    }

    /// Whether a snapshot is being written in the background.
    pub fn compacting(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Collects the background snapshot's outcome once it is written (`wait`: waits for it).
    /// `None`: none was in flight, or it is still being written.
    pub fn finish_compaction(&mut self, wait: bool) -> Option<Compacted> {
        if !wait && self.in_flight.as_ref().is_some_and(|f| !f.done.is_finished()) {
            return None;
        }
        let InFlight { at, started, done } = self.in_flight.take()?;
        let (outcome, ended) = done
            .join()
            .unwrap_or_else(|_| (Err(StoreError::Db("the snapshot writer panicked".into())), Instant::now()));
        Some(Compacted { started, ended, outcome: self.compaction_done(at, outcome) })
    }

    /// Takes a snapshot's outcome in. Success never clears a failure: an append may have
    /// failed while a background snapshot was written, and only a write of the caller's (or
    /// the probe) shows the store works again.
    fn compaction_done(&mut self, at: u64, done: Result<u64, StoreError>) -> Result<u64, StoreError> {
        match &done {
            Ok(_) => self.base = at,
            Err(e) => self.failed = Some(e.to_string()),
        }
        done
    }
}

/// Writes the snapshot at `at` to its file, reads it back, makes it the newest and lets go
/// of what it makes unneeded; returns how many records were let go.
fn write_snapshot(
    db: &Database,
    store: &Path,
    at: u64,
    encode: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<u64, StoreError> {
    let dir = snapshot_dir(store);
    let mut file = FileWriter::create(&dir, at)?;
    encode(&mut file).map_err(|e| StoreError::Db(format!("snapshot: {e}")))?;
    let manifest = file.finish()?;
    // Checked as stored before anything older is let go.
    verify_manifest(&db.begin_read().map_err(db_err)?, &dir, at, &manifest)?;
    let previous = commit_manifest(db, at, &manifest)?;
    let kept = |pos| pos == at || Some(pos) == previous;
    let_go_files(&dir, kept)?;
    let_go(db, previous.unwrap_or(0), |pos, _| kept(pos))
}

/// Removes the snapshot files (and partly written ones) of positions not `kept`.
fn let_go_files(dir: &Path, kept: impl Fn(u64) -> bool) -> Result<(), StoreError> {
    let err = |e: std::io::Error| StoreError::Db(format!("snapshot files in {}: {e}", dir.display()));
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name();
        let stray = name.to_str().and_then(file_position).is_some_and(|pos| !kept(pos))
            || name.to_str().is_some_and(|n| n.ends_with(".partial"));
        if stray {
            std::fs::remove_file(entry.path()).map_err(err)?;
        }
    }
    Ok(())
}

/// Makes the snapshot at `at` the newest in one durable transaction, keeping the one before it;
/// returns that one's position.
fn commit_manifest(db: &Database, at: u64, manifest: &Manifest) -> Result<Option<u64>, StoreError> {
    let tx = db.begin_write().map_err(db_err)?;
    let previous = {
        let mut snap = tx.open_table(SNAPSHOT).map_err(db_err)?;
        let previous =
            snap.range(..at).map_err(db_err)?.next_back().transpose().map_err(db_err)?.map(|(k, _)| k.value());
        snap.retain(|pos, _| Some(pos) == previous).map_err(db_err)?;
        snap.insert(at, manifest.encode().as_slice()).map_err(db_err)?;
        previous
    };
    tx.commit().map_err(db_err)?;
    Ok(previous)
}

/// Deletes the records before `keep_from` and every snapshot part `keep` does not keep, a
/// batch per transaction. Not durable by itself (the next durable commit makes it so): what a
/// crash leaves is let go by the next compaction.
fn let_go(db: &Database, keep_from: u64, keep: impl Fn(u64, u32) -> bool) -> Result<u64, StoreError> {
    // Found in a read transaction: reading a part's megabyte never holds the writer.
    let stray: Vec<(u64, u32)> = {
        let rtx = db.begin_read().map_err(db_err)?;
        match rtx.open_table(PARTS) {
            Ok(t) => t
                .iter()
                .map_err(db_err)?
                .map(|r| r.map(|(k, _)| k.value()).map_err(db_err))
                .filter(|k| k.as_ref().map_or(true, |&(pos, part)| !keep(pos, part)))
                .collect::<Result<_, _>>()?,
            Err(redb::TableError::TableDoesNotExist(_)) => Vec::new(),
            Err(e) => return Err(db_err(e)),
        }
    };
    for batch in stray.chunks(PARTS_BATCH) {
        write_quietly(db, |tx| {
            let mut parts = tx.open_table(PARTS).map_err(db_err)?;
            batch.iter().try_for_each(|k| parts.remove(k).map(drop).map_err(db_err))
        })?;
    }
    let mut let_go = 0;
    loop {
        let mut n = 0;
        write_quietly(db, |tx| {
            let mut log = tx.open_table(LOG).map_err(db_err)?;
            let keys: Vec<u64> = log
                .range(..keep_from)
                .map_err(db_err)?
                .take(RECORDS_BATCH)
                .map(|r| r.map(|(k, _)| k.value()).map_err(db_err))
                .collect::<Result<_, _>>()?;
            n = keys.len();
            keys.iter().try_for_each(|k| log.remove(k).map(drop).map_err(db_err))
        })?;
        let_go += n as u64;
        if n == 0 {
            return Ok(let_go);
        }
    }
}

/// One non-durable write transaction.
fn write_quietly(
    db: &Database,
    f: impl FnOnce(&redb::WriteTransaction) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut tx = db.begin_write().map_err(db_err)?;
    tx.set_durability(redb::Durability::None).map_err(db_err)?;
    f(&tx)?;
    tx.commit().map_err(db_err)
}
