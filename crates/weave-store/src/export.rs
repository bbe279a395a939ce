//! `export`: the way out of a store damaged inside its storage engine. The newest intact
//! snapshot and every record after it that can still be read, in order, are copied into a new
//! store; copying stops at the first record that cannot be read (a state with a hole in its
//! history would not be the state any client was told about). The damaged store is read from
//! a copy and never changed.

use crate::snapshot::{newest_file_snapshot, read_snapshot, snapshot_dir};
use crate::{db_err, guarded, quietly, unframe, Store, StoreError, LOG};
use redb::{Database, ReadableDatabase};
use std::path::Path;

/// What [`export`] copied.
#[derive(Debug, PartialEq, Eq)]
pub struct Exported {
    /// The snapshot copied (the records before this position), if any.
    pub snapshot_at: Option<u64>,
    /// Records copied after it.
    pub records: u64,
    /// The first record that could not be read, and why; `None`: every record was copied.
    pub stopped_at: Option<(u64, String)>,
    /// A newer snapshot passed over as damaged.
    pub passed_over: Option<String>,
}

/// Copies what can be read of the store at `from` into a new store at `to` (which must not
/// exist yet).
pub fn export(from: &Path, to: &Path) -> Result<Exported, StoreError> {
    let open_err = |p: &Path, e: &dyn std::fmt::Display| StoreError::Open {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    if to.exists() {
        return Err(open_err(to, &"already exists: export writes a new store"));
    }
    if !from.exists() {
        return Err(open_err(from, &"no such store file"));
    }
    // Read from a copy (opening a file may repair it; the damaged one stays as it was), first
    // as it is, then, unless that read everything, with the library's repair forced: repair
    // rebuilds damaged free-page state but refuses a file whose data pages fail their
    // checksums, which a plain read gets through up to the damaged record. The better wins.
    let copy = to.with_extension("export-source");
    let attempt = |repair: bool| {
        std::fs::copy(from, &copy).map_err(|e| open_err(from, &e))?;
        if repair {
            ask_for_repair(&copy).map_err(|e| open_err(&copy, &e))?;
        }
        let read = read_what_can_be_read(&copy, &snapshot_dir(from));
        let _ = std::fs::remove_file(&copy);
        read
    };
    let read = match attempt(false) {
        Ok(r) if r.stopped_at.is_none() => Ok(r),
        plain => match (plain, attempt(true)) {
            (Ok(p), Ok(r)) => Ok(if r.frames.len() > p.frames.len() { r } else { p }),
            (Ok(p), Err(_)) => Ok(p),
            (Err(_), Ok(r)) => Ok(r),
            (Err(_), Err(e)) => from_snapshot_files(from, e),
        },
    };
    let Readable { snapshot, frames, stopped_at, passed_over } = read?;
    let mut out = Store::open(to)?;
    if let Some((at, bytes)) = &snapshot {
        out.import_snapshot(*at, bytes)?;
    }
    out.import_frames(&frames)?;
    Ok(Exported { snapshot_at: snapshot.map(|(at, _)| at), records: frames.len() as u64, stopped_at, passed_over })
}

/// The way out when the store file cannot be opened at all (a damaged header, a file cut
/// short): the newest snapshot file its manifest beside it says is whole. The records after it
/// are lost (they were only in the store file); the error that stopped the store is kept.
fn from_snapshot_files(from: &Path, e: StoreError) -> Result<Readable, StoreError> {
    let Some((at, bytes)) = newest_file_snapshot(&snapshot_dir(from)) else { return Err(e) };
    let why = format!("the store file cannot be read ({e}): the records after the snapshot are lost");
    Ok(Readable { snapshot: Some((at, bytes)), frames: Vec::new(), stopped_at: Some((at, why)), passed_over: None })
}

/// Marks the copy as needing the storage library's repair, as after a crash: opening it then
/// rebuilds the library's derived state (which pages are free) from its trees, checking them
/// as it goes, instead of trusting the stored one, which is what damage most often hits.
/// (redb's file header: the flags byte after the 9-byte magic number; 2 = recovery required,
/// 4 = two-phase commit, cleared so that the full repair runs.)
fn ask_for_repair(copy: &Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    const FLAGS_OFFSET: u64 = 9;
    const RECOVERY_REQUIRED: u8 = 2;
    const TWO_PHASE_COMMIT: u8 = 4;
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(copy)?;
    let mut magic = [0u8; 10];
    if f.read_exact(&mut magic).is_err() || &magic[..4] != b"redb" {
        return Ok(()); // not a file the library would open anyway: its own error says so
    }
    let flags = (magic[FLAGS_OFFSET as usize] | RECOVERY_REQUIRED) & !TWO_PHASE_COMMIT;
    f.seek(SeekFrom::Start(FLAGS_OFFSET))?;
    f.write_all(&[flags])
}

/// What one read of a damaged store got: the snapshot, the records after it as stored (with
/// their numbers), where it stopped, and a newer snapshot passed over.
struct Readable {
    snapshot: Option<(u64, Vec<u8>)>,
    frames: Vec<(u64, Vec<u8>)>,
    stopped_at: Option<(u64, String)>,
    passed_over: Option<String>,
}

/// The newest intact snapshot and the records after it, as stored, up to the first that cannot
/// be read (each step of the storage engine guarded: a panic there ends the copy, not the run).
fn read_what_can_be_read(path: &Path, snapshots: &Path) -> Result<Readable, StoreError> {
    let db = guarded(path, || {
        Database::open(path)
            .map_err(|e| StoreError::Damaged { path: path.display().to_string(), message: e.to_string() })
    })?;
    let rtx = guarded(path, || db.begin_read().map_err(db_err))?;
    let chosen = guarded(path, || read_snapshot(&rtx, snapshots))?;
    let base = chosen.snapshot.as_ref().map_or(0, |(at, _)| *at);
    let mut frames = Vec::new();
    let mut stopped_at = None;
    let mut rows = guarded(path, || rtx.open_table(LOG).map_err(db_err)?.range(base..).map_err(db_err))?;
    loop {
        let expected = base + frames.len() as u64;
        let row = match quietly(|| rows.next()) {
            Ok(None) => break,
            Ok(Some(Ok((k, v)))) => (k.value(), v.value().to_vec()),
            Ok(Some(Err(e))) => {
                stopped_at = Some((expected, e.to_string()));
                break;
            }
            Err(_) => {
                stopped_at = Some((expected, "the storage engine cannot read it".into()));
                break;
            }
        };
        let (seq, stored) = row;
        if seq != expected {
            stopped_at = Some((expected, format!("missing (the next record read is {seq})")));
            break;
        }
        if let Err(e) = unframe(seq, &stored) {
            stopped_at = Some((seq, e.to_string()));
            break;
        }
        frames.push((seq, stored));
    }
    drop(rows);
    let _ = quietly(move || drop((rtx, db)));
    Ok(Readable {
        snapshot: chosen.snapshot,
        frames,
        stopped_at,
        passed_over: chosen.passed_over.map(|e| e.to_string()),
    })
}

impl Store {
    /// Stores `bytes` as the snapshot at `at` in a store that holds nothing yet.
    fn import_snapshot(&mut self, at: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.next = at;
        self.compact(bytes).map(drop)
    }

    /// Appends records exactly as another store held them (framed, checksummed with their
    /// numbers), in one transaction; they must continue this store's log.
    fn import_frames(&mut self, frames: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
        let tx = db.begin_write().map_err(db_err)?;
        {
            let mut t = tx.open_table(LOG).map_err(db_err)?;
            for (i, (seq, stored)) in frames.iter().enumerate() {
                let expected = self.next + i as u64;
                if *seq != expected {
                    return Err(StoreError::Db(format!("record {seq} where record {expected} belongs")));
                }
                t.insert(seq, stored.as_slice()).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)?;
        self.next += frames.len() as u64;
        Ok(())
    }
}
