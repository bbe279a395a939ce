//! Durable state as an append-only log of control-plane inputs in an embedded transactional
//! database (redb). A record is durable when [`Store::append`] returns: the caller
//! acknowledges a request only after that. Recovery replays the records, in order, through
//! the same deterministic core that handled them the first time.
//!
//! Every record carries a checksum over its sequence number and bytes (see `frame`), so a
//! changed byte, or a record moved to another position, is refused when read, with the
//! record's number; a panic inside the storage library on a damaged file is caught and
//! reported the same way. Nothing is ever repaired silently: [`verify`] says what is wrong and
//! [`truncate_after`] drops the damaged tail on request, keeping a copy of the file.
//!
//! Compaction: [`Store::compact_with`] stores a snapshot of the caller's state after the last
//! record, streamed into parts as the caller encodes it, and deletes the records it covers in
//! the one durable transaction that makes the parts the snapshot; recovery then loads the
//! snapshot and replays only the records after it ([`Store::load`]). Record numbers never
//! restart: the log continues at the snapshot's position. The snapshot carries its own
//! checksum over all its bytes.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Serialize};
use sha2::{Digest, Sha256};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

mod compact;
mod export;
mod snapshot;
pub use compact::{Compacted, Encode};
pub use export::{export, Exported};
use snapshot::{read_snapshot, SNAPSHOT};

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Written and removed again to find out whether the disk takes writes (see `Store::probe`).
const PROBE: TableDefinition<u64, &[u8]> = TableDefinition::new("probe");
/// The storage library's page cache.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("store {path}: {message}")]
    Open { path: String, message: String },
    #[error("store: {0}")]
    Db(String),
    #[error("store record {seq}: {message} (see `weave store verify`)")]
    Corrupt { seq: u64, message: String },
    #[error(
        "store {path} is damaged inside its storage engine ({message}); it was not changed: `weave store export` \
         copies the newest snapshot and every record it can still read into a new store, or restore the data \
         directory from a backup"
    )]
    Damaged { path: String, message: String },
}

/// First byte of a checksummed record (never the first byte of a JSON document).
const FRAMED: u8 = 1;
const SUM_LEN: usize = 16;

/// A record as stored: [`FRAMED`], the first 16 bytes of SHA-256(seq, payload), the payload.
fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + SUM_LEN + payload.len());
    v.push(FRAMED);
    v.extend_from_slice(&checksum(seq, payload));
    v.extend_from_slice(payload);
    v
}

fn checksum(seq: u64, payload: &[u8]) -> [u8; SUM_LEN] {
    let d = Sha256::new().chain_update(seq.to_be_bytes()).chain_update(payload).finalize();
    d[..SUM_LEN].try_into().expect("16 bytes")
}

/// The payload of stored record `seq` if its checksum holds. Records written before
/// checksums (plain JSON) are returned as they are, `checked = false`.
fn unframe(seq: u64, stored: &[u8]) -> Result<(&[u8], bool), StoreError> {
    match stored.split_first() {
        Some((&FRAMED, rest)) if rest.len() >= SUM_LEN => {
            let (sum, payload) = rest.split_at(SUM_LEN);
            if sum != checksum(seq, payload) {
                return Err(StoreError::Corrupt { seq, message: "checksum mismatch".into() });
            }
            Ok((payload, true))
        }
        Some((&FRAMED, _)) => Err(StoreError::Corrupt { seq, message: "record shorter than its checksum".into() }),
        Some((b'{' | b'"' | b'[', _)) => Ok((stored, false)),
        _ => Err(StoreError::Corrupt { seq, message: "not a record (unknown framing)".into() }),
    }
}

thread_local! {
    /// Set while this thread runs a guarded storage-library call.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps the panic hook quiet for panics inside guarded calls (they become a `Damaged` error
/// that says what to do; the default hook would print a message and a backtrace first), and
/// passes every other panic to the hook that was installed before.
fn quiet_guarded_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f` catching a panic, which the panic hook does not print.
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    quiet_guarded_panics();
    let outer = GUARDED.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(outer));
    result
}

/// Runs a storage-library call on a possibly damaged file: a panic becomes an error.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    quietly(f).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("the storage library panicked");
        Err(StoreError::Damaged { path: path.display().to_string(), message: message.to_string() })
    })
}

/// What [`verify`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// A snapshot covers the records before this one (they were compacted away).
    pub snapshot_at: Option<u64>,
    /// Records after the snapshot (all of them without one).
    pub records: u64,
    /// Records without a checksum (written before checksums): readable, not verifiable.
    pub unchecked: u64,
    /// Why the newest snapshot was passed over (damaged): the state is the older snapshot's
    /// (or the first record's) and the records after it, all kept for this.
    pub passed_over: Option<String>,
    /// The first record that fails, and why; `None`: all good.
    pub first_bad: Option<(u64, String)>,
}

/// Reads every record of the store at `path` and checks its checksum and that it parses as
/// `T`; stops at the first bad one. Never writes.
pub fn verify<T: DeserializeOwned>(path: &Path) -> Result<Verification, StoreError> {
    let db = open_existing(path)?;
    let found = guarded(path, || {
        let rtx = db.begin_read().map_err(db_err)?;
        let mut v = Verification::default();
        let base = match read_snapshot(&rtx, &snapshot::snapshot_dir(path)) {
            Ok(chosen) => {
                v.passed_over = chosen.passed_over.map(|e| e.to_string());
                chosen.snapshot.map_or(0, |(at, _)| at)
            }
            Err(e) => {
                v.first_bad = Some((0, e.to_string()));
                return Ok(v);
            }
        };
        v.snapshot_at = (base > 0).then_some(base);
        let t = rtx.open_table(LOG).map_err(db_err)?;
        for (i, row) in t.range(base..).map_err(db_err)?.enumerate() {
            let expected = base + i as u64;
            let (k, stored) = match row {
                Ok(r) => r,
                Err(e) => {
                    v.first_bad = Some((expected, e.to_string()));
                    break;
                }
            };
            let seq = k.value();
            let checked = match check::<T>(seq, expected, stored.value()) {
                Ok(c) => c,
                Err(e) => {
                    // Where the sequence breaks, not the key found there: a damaged key may
                    // read as any number, and everything before this position is good.
                    v.first_bad = Some((expected, e.to_string()));
                    break;
                }
            };
            v.records += 1;
            v.unchecked += u64::from(!checked);
        }
        Ok(v)
    });
    close(db);
    found
}

fn check<T: DeserializeOwned>(seq: u64, expected: u64, stored: &[u8]) -> Result<bool, StoreError> {
    if seq != expected {
        return Err(StoreError::Corrupt { seq, message: format!("out of sequence: expected record {expected}") });
    }
    let (payload, checked) = unframe(seq, stored)?;
    serde_json::from_slice::<T>(payload).map_err(|e| StoreError::Corrupt { seq, message: e.to_string() })?;
    Ok(checked)
}

/// Drops every record after `last` (keeps 0..=last), after copying the file to
/// `<file>.before-truncate-<n>`; returns how many were dropped and the copy's path.
pub fn truncate_after(path: &Path, last: u64) -> Result<(u64, PathBuf), StoreError> {
    let open_err =
        |e: &dyn std::fmt::Display| StoreError::Open { path: path.display().to_string(), message: e.to_string() };
    let mut n = 0;
    let backup = loop {
        let b = path.with_extension(format!("redb.before-truncate-{n}"));
        if !b.exists() {
            break b;
        }
        n += 1;
    };
    let db = open_existing(path)?;
    let base = guarded(path, || {
        let rtx = db.begin_read().map_err(db_err)?;
        let base = read_snapshot(&rtx, &snapshot::snapshot_dir(path))?.snapshot.map_or(0, |(at, _)| at);
        let end = match rtx.open_table(LOG) {
            Ok(t) => t.last().map_err(db_err)?.map(|(k, _)| k.value()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(db_err(e)),
        };
        Ok((base, end))
    });
    match base {
        Ok((base, _)) if last.saturating_add(1) < base => {
            close(db);
            return Err(StoreError::Db(format!(
                "records before {base} are compacted into the snapshot: keep at least 0..={}",
                base - 1
            )));
        }
        // Past the end nothing would be dropped: saying "recovered" would mislead.
        Ok((_, end)) if end.is_none_or(|e| e <= last) => {
            close(db);
            let held = end.map_or("holds no records after its snapshot".to_string(), |e| format!("ends at record {e}"));
            return Err(StoreError::Db(format!(
                "the store {held}: --truncate-after {last} would drop nothing (see `weave store verify`)"
            )));
        }
        Ok(_) => {}
        Err(e) => {
            close(db);
            return Err(e);
        }
    }
    std::fs::copy(path, &backup).map_err(|e| open_err(&e))?;
    let dropped = guarded(path, || {
        let tx = db.begin_write().map_err(db_err)?;
        let dropped = {
            let mut t = tx.open_table(LOG).map_err(db_err)?;
            let keys: Vec<u64> = t
                .range(last.saturating_add(1)..)
                .map_err(db_err)?
                .map(|r| r.map(|(k, _)| k.value()).map_err(db_err))
                .collect::<Result<_, _>>()?;
            for k in &keys {
                t.remove(k).map_err(db_err)?;
            }
            keys.len() as u64
        };
        tx.commit().map_err(db_err)?;
        Ok(dropped)
    });
    close(db);
    Ok((dropped?, backup))
}

/// Closes a database; closing one on a damaged file may panic inside the library.
fn close(db: Database) {
    let _ = quietly(move || drop(db));
}

/// [`close`] for the store's shared handle (closed when its last holder lets go).
fn close_shared(db: Arc<Database>) {
    let _ = quietly(move || drop(db));
}

impl Drop for Store {
    fn drop(&mut self) {
        // A snapshot being written is finished first: the file is then closed whole, and can
        // be opened again at once.
        self.finish_compaction(true);
        if let Some(db) = self.db.take() {
            close_shared(db);
        }
    }
}

/// Opens an existing store file (never creates one).
fn open_existing(path: &Path) -> Result<Database, StoreError> {
    if !path.exists() {
        return Err(StoreError::Open { path: path.display().to_string(), message: "no such store file".into() });
    }
    guarded(path, || {
        Database::open(path)
            .map_err(|e| StoreError::Damaged { path: path.display().to_string(), message: e.to_string() })
    })
}

/// What [`Store::load_reporting`] read.
#[derive(Debug)]
pub struct Loaded<T> {
    /// The snapshot's position (the first record it does not cover) and bytes.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Every record after it, in append order.
    pub records: Vec<T>,
    /// A newer snapshot passed over as damaged: the state above is rebuilt without it.
    pub passed_over: Option<StoreError>,
}

pub struct Store {
    path: PathBuf,
    /// `None` after a failed write until the store is opened again. Shared with a snapshot
    /// being written in the background.
    db: Option<Arc<Database>>,
    next: u64,
    /// The first record the snapshot does not cover (0: no snapshot).
    base: u64,
    /// Why the last write failed, while the store has not recovered.
    failed: Option<String>,
    /// A snapshot being written on a thread of its own.
    in_flight: Option<compact::InFlight>,
    /// Bytes of records appended since this store was opened (what a byte-based compaction
    /// trigger counts from).
    appended: u64,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let (db, next, base) = Self::open_db(path)?;
        let path = path.to_path_buf();
        Ok(Store { path, db: Some(Arc::new(db)), next, base, failed: None, in_flight: None, appended: 0 })
    }

    /// The database, the next record's number and the snapshot's position (0: none).
    fn open_db(path: &Path) -> Result<(Database, u64, u64), StoreError> {
        let open_err =
            |e: &dyn std::fmt::Display| StoreError::Open { path: path.display().to_string(), message: e.to_string() };
        // The store holds submissions and launch environments: only its owner reads it. A new
        // file is created 0600 before redb fills it; an older store is narrowed to 0600.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(|e| open_err(&e))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| open_err(&e))?;
        }
        guarded(path, || {
            // redb caches up to 1 GiB of pages by default: with months of appends and
            // compactions that is memory the server never gives back. The log is read once,
            // at start; appends need little.
            let db = Database::builder().set_cache_size(CACHE_BYTES).create(path).map_err(|e| open_err(&e))?;
            let tx = db.begin_write().map_err(db_err)?;
            tx.open_table(LOG).map_err(db_err)?;
            tx.commit().map_err(db_err)?;
            let next = {
                let rtx = db.begin_read().map_err(db_err)?;
                let t = rtx.open_table(LOG).map_err(db_err)?;
                let last = t.last().map_err(db_err)?;
                let snapshot_at = match rtx.open_table(SNAPSHOT) {
                    Ok(s) => s.last().map_err(db_err)?.map_or(0, |(k, _)| k.value()),
                    Err(redb::TableError::TableDoesNotExist(_)) => 0,
                    Err(e) => return Err(db_err(e)),
                };
                (last.map(|(k, _)| k.value() + 1).unwrap_or(0).max(snapshot_at), snapshot_at)
            };
            Ok((db, next.0, next.1))
        })
    }

    /// Whether the last write succeeded (a failed one leaves the store not ready until a
    /// later write finds it working again).
    pub fn ready(&self) -> Result<(), String> {
        match &self.failed {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// After a failed write the database may refuse every later one (redb remembers the I/O
    /// error): open it again. Nothing acknowledged is lost: a failed write was never
    /// acknowledged, and the log must end where the caller believes it does.
    fn recover(&mut self) -> Result<(), StoreError> {
        if self.db.is_some() && self.failed.is_none() {
            return Ok(());
        }
        // The database is opened again below, which it cannot be while a snapshot writer
        // holds it.
        self.finish_compaction(true);
        if let Some(old) = self.db.take() {
            close_shared(old);
        }
        let (db, next, _) = Self::open_db(&self.path)?;
        // A write reported failed can still have reached the disk (the commit's last step
        // failed after its data did). It was refused to the caller, so it must not stay: the
        // record after the acknowledged ones is removed before anything else is written.
        if next == self.next + 1 {
            let removed = guarded(&self.path, || {
                let tx = db.begin_write().map_err(db_err)?;
                tx.open_table(LOG).map_err(db_err)?.remove(self.next).map_err(db_err)?;
                tx.commit().map_err(db_err)
            });
            if let Err(e) = removed {
                close(db);
                return Err(e);
            }
        } else if next != self.next {
            close(db);
            return Err(StoreError::Db(format!(
                "after a failed write the log ends at record {next}, not {}: restart to replay it",
                self.next
            )));
        }
        self.db = Some(Arc::new(db));
        Ok(())
    }

    /// After a failed write, whether the store takes writes again, found out without a record
    /// of the caller's: the database is reopened (a refused write that reached the disk is
    /// removed) and a probe is written and removed. `/readyz` asks this, so it turns ready when
    /// the disk does, with nobody writing.
    pub fn probe(&mut self) -> Result<(), String> {
        if self.failed.is_none() {
            return Ok(());
        }
        let probed = self.recover().and_then(|()| {
            let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
            guarded(&self.path, || {
                for put in [true, false] {
                    let tx = db.begin_write().map_err(db_err)?;
                    {
                        let mut t = tx.open_table(PROBE).map_err(db_err)?;
                        if put {
                            t.insert(0, &[0u8; 4096][..]).map_err(db_err)?;
                        } else {
                            t.remove(0).map_err(db_err)?;
                        }
                    }
                    tx.commit().map_err(db_err)?;
                }
                Ok(())
            })
        });
        match probed {
            Ok(()) => {
                self.failed = None;
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e.to_string())
            }
        }
    }

    /// Appends one record; durable when this returns `Ok`. Returns its sequence number.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<u64, StoreError> {
        let bytes = frame(self.next, &serde_json::to_vec(record).map_err(db_err)?);
        let written = self.recover().and_then(|()| self.write(&bytes));
        match &written {
            Ok(_) => {
                self.failed = None;
                self.appended += bytes.len() as u64;
            }
            Err(e) => self.failed = Some(e.to_string()),
        }
        written
    }

    fn write(&mut self, bytes: &[u8]) -> Result<u64, StoreError> {
        let seq = self.next;
        let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
        let tx = db.begin_write().map_err(db_err)?;
        {
            let mut t = tx.open_table(LOG).map_err(db_err)?;
            t.insert(seq, bytes).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        self.next += 1;
        Ok(seq)
    }

    /// Every record, in append order (only with no snapshot: see [`Store::load`]).
    pub fn records<T: DeserializeOwned>(&self) -> Result<Vec<T>, StoreError> {
        let (snapshot, records) = self.load()?;
        if let Some((at, _)) = snapshot {
            return Err(StoreError::Db(format!("records before {at} are compacted into a snapshot: use load")));
        }
        Ok(records)
    }

    /// The snapshot (its position and bytes), if any, and every record after it in append
    /// order (see [`Store::load_reporting`], which also says what it passed over).
    #[allow(clippy::type_complexity)]
    pub fn load<T: DeserializeOwned>(&self) -> Result<(Option<(u64, Vec<u8>)>, Vec<T>), StoreError> {
        self.load_reporting().map(|l| (l.snapshot, l.records))
    }

    /// The newest intact snapshot, if any, and every record after it in append order; a
    /// record whose checksum fails, that is out of sequence or does not parse stops the read
    /// with its number. A damaged newest snapshot is passed over for the one before it (or
    /// record 0) when the records after that are kept, and the damage reported.
    pub fn load_reporting<T: DeserializeOwned>(&self) -> Result<Loaded<T>, StoreError> {
        let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
        load_all(db, &self.path)
    }

    pub fn len(&self) -> u64 {
        self.next
    }

    /// Bytes of records appended since the store was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.appended
    }

    /// Records appended after the snapshot (all of them without one).
    pub fn records_since_snapshot(&self) -> u64 {
        self.next - self.base
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }
}

/// [`Store::load_reporting`]: the newest intact snapshot and every record after it (one read
/// transaction: what is appended meanwhile is not seen).
fn load_all<T: DeserializeOwned>(db: &Database, path: &Path) -> Result<Loaded<T>, StoreError> {
    guarded(path, || {
        let rtx = db.begin_read().map_err(db_err)?;
        let chosen = read_snapshot(&rtx, &snapshot::snapshot_dir(path))?;
        let base = chosen.snapshot.as_ref().map_or(0, |(at, _)| *at);
        let t = rtx.open_table(LOG).map_err(db_err)?;
        let mut records = Vec::new();
        for (i, row) in t.range(base..).map_err(db_err)?.enumerate() {
            let expected = base + i as u64;
            let (k, v) = row.map_err(|e| StoreError::Corrupt { seq: expected, message: e.to_string() })?;
            let seq = k.value();
            if seq != expected {
                return Err(StoreError::Corrupt {
                    seq,
                    message: format!("out of sequence: expected record {expected}"),
                });
            }
            let (payload, _) = unframe(seq, v.value())?;
            let rec =
                serde_json::from_slice(payload).map_err(|e| StoreError::Corrupt { seq, message: e.to_string() })?;
            records.push(rec);
        }
        Ok(Loaded { snapshot: chosen.snapshot, records, passed_over: chosen.passed_over })
    })
}

fn db_err<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Db(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_in_order() {
        let dir = std::env::temp_dir().join(format!("weave-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.redb");
        let _ = std::fs::remove_file(&path);
        {
            let mut s = Store::open(&path).unwrap();
            assert!(s.is_empty());
            for i in 0..5u32 {
                assert_eq!(s.append(&format!("r{i}")).unwrap(), i as u64);
            }
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.len(), 5);
        s.append(&"r5".to_string()).unwrap();
        let recs: Vec<String> = s.records().unwrap();
        assert_eq!(recs, ["r0", "r1", "r2", "r3", "r4", "r5"]);
        let bad: Result<Vec<u32>, _> = s.records();
        assert!(matches!(bad, Err(StoreError::Corrupt { seq: 0, .. })));
    }

    /// A write reported failed that reached the disk anyway (simulated: the record is put in
    /// behind the store's back and the failure recorded) is removed when the store recovers:
    /// the caller was told it failed. The probe turns the store ready without a caller's write.
    #[test]
    fn a_refused_write_that_reached_the_disk_is_removed_on_recovery() {
        let dir = std::env::temp_dir().join(format!("weave-store-landed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.redb");
        let _ = std::fs::remove_file(&path);
        let mut s = Store::open(&path).unwrap();
        s.append(&"kept".to_string()).unwrap();
        let landed = frame(1, &serde_json::to_vec(&"refused").unwrap());
        {
            let tx = s.db.as_ref().unwrap().begin_write().unwrap();
            tx.open_table(LOG).unwrap().insert(1, &landed[..]).unwrap();
            tx.commit().unwrap();
        }
        s.failed = Some("disk full".into());
        assert_eq!(s.ready(), Err("disk full".into()));
        s.probe().unwrap();
        assert_eq!(s.ready(), Ok(()));
        assert_eq!(s.records::<String>().unwrap(), ["kept"], "the refused record is gone");
        assert_eq!(s.append(&"next".to_string()).unwrap(), 1, "the log goes on where it was acknowledged");
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.records::<String>().unwrap(), ["kept", "next"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod permission_tests {
    use super::Store;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_store_file_is_readable_by_its_owner_only() {
        let dir = std::env::temp_dir().join(format!("weave-store-perm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weave.redb");
        Store::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // An older store made 0644 is narrowed when opened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Store::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
