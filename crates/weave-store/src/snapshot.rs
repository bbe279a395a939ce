//! Snapshots: the snapshot row in the store (a manifest, or the whole snapshot in the form
//! written first) and where a manifest's bytes are: a file of their own beside the store (how
//! snapshots are written now), or parts in the store (as written before; still read).
//!
//! A snapshot's bytes are kept out of the store's own file so that writing them never rides
//! on the store's commits: in the store, each durable append would flush whatever snapshot
//! pages were written since the last one, and appends would wait for it.

use crate::{db_err, StoreError, SUM_LEN};
use redb::{ReadableTable, TableDefinition};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The snapshot of the state after every record before its key: the newest and the one before
/// it (kept until a newer one has been read back). Either the whole snapshot
/// ([`frame_snapshot`], as written first) or a [`Manifest`].
pub(crate) const SNAPSHOT: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshot");

/// A snapshot's bytes in parts, keyed by (its position, part number), as written before
/// snapshots had files of their own (still read; let go once no kept snapshot names them).
pub(crate) const PARTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("snapshot-parts");
#[cfg(test)]
const PART_BYTES: usize = 1 << 20;

/// A stored snapshot: its checksum (over a domain tag, its position and bytes) and bytes. The
/// form written before snapshots were stored in parts (still read).
#[cfg(test)]
fn frame_snapshot(at: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(SUM_LEN + payload.len());
    v.extend_from_slice(&snapshot_checksum(at, payload));
    v.extend_from_slice(payload);
    v
}

/// The snapshot checksum's hash before the bytes: a domain tag and the snapshot's position.
fn snapshot_hasher(at: u64) -> Sha256 {
    Sha256::new().chain_update(b"weave-snapshot").chain_update(at.to_be_bytes())
}

fn snapshot_checksum(at: u64, payload: &[u8]) -> [u8; SUM_LEN] {
    sum_of(snapshot_hasher(at).chain_update(payload))
}

fn sum_of(hash: Sha256) -> [u8; SUM_LEN] {
    hash.finalize()[..SUM_LEN].try_into().expect("16 bytes")
}

/// The error for a damaged snapshot at `at`.
fn corrupt(at: u64, message: &str) -> StoreError {
    StoreError::Corrupt { seq: at, message: format!("snapshot before record {at}: {message}") }
}

/// Where the snapshots of the store at `store` keep their files.
pub(crate) fn snapshot_dir(store: &Path) -> PathBuf {
    store.with_extension("snapshots")
}

/// The file of the snapshot at `at`.
pub(crate) fn snapshot_file(dir: &Path, at: u64) -> PathBuf {
    dir.join(format!("{at:020}.snap"))
}

/// The position a snapshot file (or a partly written one, or its manifest beside it) is for.
pub(crate) fn file_position(name: &str) -> Option<u64> {
    [".snap", ".snap.partial", ".snap.manifest", ".snap.manifest.partial"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))?
        .parse()
        .ok()
}

/// The copy of a snapshot file's manifest kept beside it: the store's own row is the one read,
/// this one is for when the store file itself cannot be opened ([`newest_file_snapshot`]).
fn manifest_file(dir: &Path, at: u64) -> PathBuf {
    dir.join(format!("{at:020}.snap.manifest"))
}

/// The newest snapshot file in `dir` that its manifest beside it says is whole, with its
/// bytes; for a store whose own file cannot be opened at all. Older ones are tried in turn.
pub(crate) fn newest_file_snapshot(dir: &Path) -> Option<(u64, Vec<u8>)> {
    let mut positions: Vec<u64> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".snap.manifest")?.parse().ok())
        .collect();
    positions.sort_unstable();
    positions.into_iter().rev().find_map(|at| {
        let m = Manifest::decode(&std::fs::read(manifest_file(dir, at)).ok()?)?;
        if m.bytes != Bytes::File {
            return None;
        }
        let bytes = read_file(dir, at, m.len).ok()?;
        m.check(at, &bytes).ok()?;
        Some((at, bytes))
    })
}

/// The snapshot row of a snapshot whose bytes are elsewhere: a tag no checksum starts with in
/// practice (so the first, whole form is told apart), the checksum over all its bytes, where
/// they are, and how many.
pub(crate) struct Manifest {
    sum: [u8; SUM_LEN],
    pub(crate) bytes: Bytes,
    len: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bytes {
    /// In [`PARTS`], this many.
    Parts(u32),
    /// In the snapshot's file ([`snapshot_file`]).
    File,
}

const PARTS_TAG: &[u8] = b"weave-snapshot-parts-v1";
const FILE_TAG: &[u8] = b"weave-snapshot-file-v1";

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = match self.bytes {
            Bytes::Parts(_) => PARTS_TAG.to_vec(),
            Bytes::File => FILE_TAG.to_vec(),
        };
        v.extend_from_slice(&self.sum);
        if let Bytes::Parts(n) = self.bytes {
            v.extend_from_slice(&n.to_be_bytes());
        }
        v.extend_from_slice(&self.len.to_be_bytes());
        v
    }

    /// `None`: not a manifest (a whole snapshot).
    fn decode(stored: &[u8]) -> Option<Manifest> {
        let (rest, parts) = match stored.strip_prefix(FILE_TAG) {
            Some(rest) => (rest, false),
            None => (stored.strip_prefix(PARTS_TAG)?, true),
        };
        let sum = rest.get(..SUM_LEN)?.try_into().ok()?;
        let (bytes, rest) = if parts {
            (Bytes::Parts(u32::from_be_bytes(rest.get(SUM_LEN..SUM_LEN + 4)?.try_into().ok()?)), &rest[SUM_LEN + 4..])
        } else {
            (Bytes::File, &rest[SUM_LEN..])
        };
        Some(Manifest { sum, bytes, len: u64::from_be_bytes(rest.try_into().ok()?) })
    }

    /// Whether `bytes` are the snapshot at `at` this manifest describes.
    fn check(&self, at: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_sum(at, bytes.len() as u64, snapshot_checksum(at, bytes))
    }

    /// Whether bytes of length `len` and checksum `sum` are the snapshot at `at`.
    fn check_sum(&self, at: u64, len: u64, sum: [u8; SUM_LEN]) -> Result<(), StoreError> {
        if len != self.len {
            return Err(corrupt(at, &format!("{len} bytes, {} expected", self.len)));
        }
        if sum != self.sum {
            return Err(corrupt(at, "checksum mismatch"));
        }
        Ok(())
    }
}

fn unframe_snapshot(at: u64, stored: &[u8]) -> Result<&[u8], StoreError> {
    if stored.len() < SUM_LEN {
        return Err(corrupt(at, "shorter than its checksum"));
    }
    let (sum, payload) = stored.split_at(SUM_LEN);
    if sum != snapshot_checksum(at, payload) {
        return Err(corrupt(at, "checksum mismatch"));
    }
    Ok(payload)
}

/// The snapshot a restart starts from, and what it passed over.
pub(crate) struct Chosen {
    /// The newest intact snapshot: its position (the first record it does not cover) and
    /// bytes; `None`: replay every record from the first.
    pub(crate) snapshot: Option<(u64, Vec<u8>)>,
    /// Why a newer snapshot was passed over (damaged): the state is rebuilt from the older one
    /// and the records after it, which compaction keeps for exactly this.
    pub(crate) passed_over: Option<StoreError>,
}

/// Finds the newest intact snapshot whose records after it are all still there. A damaged
/// newest snapshot falls back to the one before it (or to record 0) when the log reaches back
/// that far; otherwise its damage is the error. `dir`: where snapshot files are.
pub(crate) fn read_snapshot(rtx: &redb::ReadTransaction, dir: &Path) -> Result<Chosen, StoreError> {
    let t = match rtx.open_table(SNAPSHOT) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Chosen { snapshot: None, passed_over: None }),
        Err(e) => return Err(db_err(e)),
    };
    let first_record = match rtx.open_table(crate::LOG) {
        Ok(log) => log.first().map_err(db_err)?.map(|(k, _)| k.value()),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(db_err(e)),
    };
    let rows: Vec<(u64, Vec<u8>)> = t
        .iter()
        .map_err(db_err)?
        .map(|r| r.map(|(k, v)| (k.value(), v.value().to_vec())).map_err(db_err))
        .collect::<Result<_, _>>()?;
    let mut passed_over: Option<StoreError> = None;
    for (at, stored) in rows.iter().rev() {
        let at = *at;
        // An older snapshot serves only if the records from it on are still kept.
        if passed_over.is_some() && first_record.is_none_or(|f| f > at) {
            break;
        }
        let read = match Manifest::decode(stored) {
            Some(m) => read_manifest(rtx, dir, at, &m),
            None => unframe_snapshot(at, stored).map(<[u8]>::to_vec),
        };
        match read {
            Ok(bytes) => return Ok(Chosen { snapshot: Some((at, bytes)), passed_over }),
            Err(e) => {
                passed_over.get_or_insert(e);
            }
        }
    }
    match passed_over {
        // Every record from the first is kept: they are the state.
        Some(e) if first_record == Some(0) => Ok(Chosen { snapshot: None, passed_over: Some(e) }),
        Some(e) => Err(e),
        None => Ok(Chosen { snapshot: None, passed_over: None }),
    }
}

/// The bytes of the snapshot at `at` that `m` describes, checked against it.
fn read_manifest(rtx: &redb::ReadTransaction, dir: &Path, at: u64, m: &Manifest) -> Result<Vec<u8>, StoreError> {
    let bytes = match m.bytes {
        Bytes::Parts(n) => read_parts(rtx, at, n)?,
        Bytes::File => read_file(dir, at, m.len)?,
    };
    m.check(at, &bytes)?;
    Ok(bytes)
}

/// Checks that the snapshot at `at` that `m` describes is stored whole, reading its bytes in
/// chunks rather than into one buffer: compaction checks each snapshot it writes, and holding
/// the whole snapshot again for that raised the server's memory by its size every time.
pub(crate) fn verify_manifest(
    rtx: &redb::ReadTransaction,
    dir: &Path,
    at: u64,
    m: &Manifest,
) -> Result<(), StoreError> {
    let mut sum = Summer { hash: snapshot_hasher(at), len: 0 };
    match m.bytes {
        Bytes::Parts(n) => for_each_part(rtx, at, n, |part| sum.add(part))?,
        Bytes::File => {
            use std::io::Read;
            let mut file = open_file(dir, at)?.take(m.len.saturating_add(1));
            let mut chunk = vec![0u8; VERIFY_CHUNK];
            loop {
                let n = file.read(&mut chunk).map_err(|e| corrupt(at, &e.to_string()))?;
                if n == 0 {
                    break;
                }
                sum.add(&chunk[..n]);
            }
        }
    }
    m.check_sum(at, sum.len, sum_of(sum.hash))
}

/// How much of a snapshot file [`verify_manifest`] holds at a time.
const VERIFY_CHUNK: usize = 256 << 10;

/// A checksum and length kept as bytes stream past.
struct Summer {
    hash: Sha256,
    len: u64,
}

impl Summer {
    fn add(&mut self, bytes: &[u8]) {
        self.hash.update(bytes);
        self.len += bytes.len() as u64;
    }
}

fn open_file(dir: &Path, at: u64) -> Result<std::fs::File, StoreError> {
    let path = snapshot_file(dir, at);
    std::fs::File::open(&path).map_err(|e| corrupt(at, &format!("{}: {e}", path.display())))
}

fn read_file(dir: &Path, at: u64, len: u64) -> Result<Vec<u8>, StoreError> {
    use std::io::Read;
    let file = open_file(dir, at)?;
    // Read up to one byte past the length the manifest names, never more (a damaged length
    // must give the error in `check`, not an allocation of that size).
    let mut bytes = Vec::new();
    file.take(len.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| corrupt(at, &e.to_string()))?;
    Ok(bytes)
}

fn read_parts(rtx: &redb::ReadTransaction, at: u64, parts: u32) -> Result<Vec<u8>, StoreError> {
    // Grown as the parts are read, never reserved from the manifest's length.
    let mut bytes = Vec::new();
    for_each_part(rtx, at, parts, |part| bytes.extend_from_slice(part))?;
    Ok(bytes)
}

/// Hands the snapshot's `parts` at `at` to `each` in order.
fn for_each_part(
    rtx: &redb::ReadTransaction,
    at: u64,
    parts: u32,
    mut each: impl FnMut(&[u8]),
) -> Result<(), StoreError> {
    let t = match rtx.open_table(PARTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Err(corrupt(at, "its parts are missing")),
        Err(e) => return Err(db_err(e)),
    };
    for part in 0..parts {
        let v = t
            .get((at, part))
            .map_err(db_err)?
            .ok_or_else(|| corrupt(at, &format!("part {part} of {parts} is missing")))?;
        each(v.value());
    }
    Ok(())
}

/// Writes a snapshot's bytes to its file as they are encoded, keeping their checksum: to
/// `<at>.snap.partial`, synced and renamed into place by [`FileWriter::finish`], so a file
/// under the final name is always whole. Readable by the store's owner only (the state holds
/// what the records hold).
pub(crate) struct FileWriter {
    dir: PathBuf,
    at: u64,
    out: std::io::BufWriter<std::fs::File>,
    len: u64,
    /// Bytes written since the file was last synced.
    unsynced: u64,
    hash: Sha256,
}

/// A snapshot file is synced every this many bytes as it is written: a sync of everything at
/// the end would flush tens of megabytes at once, and the file system makes a store append
/// that syncs meanwhile wait for it.
const SYNC_EVERY: u64 = 4 << 20;

impl FileWriter {
    pub(crate) fn create(dir: &Path, at: u64) -> Result<FileWriter, StoreError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let err = |e: std::io::Error| StoreError::Db(format!("snapshot file in {}: {e}", dir.display()));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
        let partial = dir.join(format!("{at:020}.snap.partial"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(partial)
            .map_err(err)?;
        Ok(FileWriter {
            dir: dir.to_path_buf(),
            at,
            out: std::io::BufWriter::with_capacity(1 << 20, file),
            len: 0,
            unsynced: 0,
            hash: snapshot_hasher(at),
        })
    }

    /// The manifest, once every byte is on disk under the snapshot's name.
    pub(crate) fn finish(self) -> Result<Manifest, StoreError> {
        let err = |e: std::io::Error| StoreError::Db(format!("snapshot file in {}: {e}", self.dir.display()));
        let file = self.out.into_inner().map_err(|e| err(e.into_error()))?;
        file.sync_all().map_err(err)?;
        let partial = self.dir.join(format!("{:020}.snap.partial", self.at));
        std::fs::rename(partial, snapshot_file(&self.dir, self.at)).map_err(err)?;
        let manifest = Manifest { sum: sum_of(self.hash), bytes: Bytes::File, len: self.len };
        write_manifest_file(&self.dir, self.at, &manifest).map_err(err)?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(err)?;
        Ok(manifest)
    }
}

/// Writes `m` beside its snapshot file, whole or not at all (a synced temporary renamed; the
/// caller syncs the directory).
fn write_manifest_file(dir: &Path, at: u64, m: &Manifest) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let partial = dir.join(format!("{at:020}.snap.manifest.partial"));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&partial)?;
    f.write_all(&m.encode())?;
    f.sync_all()?;
    std::fs::rename(partial, manifest_file(dir, at))
}

impl Write for FileWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(data)?;
        self.hash.update(&data[..n]);
        self.len += n as u64;
        self.unsynced += n as u64;
        if self.unsynced >= SYNC_EVERY {
            self.out.flush()?;
            self.out.get_ref().sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Stores `bytes` as the snapshot at `at` in parts, as stores were written before snapshots
/// had files (to test that such stores still read).
#[cfg(test)]
pub(crate) fn write_parts(db: &redb::Database, at: u64, bytes: &[u8]) -> Manifest {
    let tx = db.begin_write().unwrap();
    let chunks: Vec<&[u8]> = bytes.chunks(PART_BYTES).collect();
    {
        let mut t = tx.open_table(PARTS).unwrap();
        for (i, c) in chunks.iter().enumerate() {
            t.insert((at, i as u32), *c).unwrap();
        }
    }
    tx.commit().unwrap();
    Manifest { sum: snapshot_checksum(at, bytes), bytes: Bytes::Parts(chunks.len() as u32), len: bytes.len() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use redb::{Database, ReadableDatabase};

    fn store(name: &str) -> (PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("weave-store-snapfiles-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weave.redb");
        let s = Store::open(&path).unwrap();
        (path, s)
    }

    /// Bytes that differ along their length, so a piece read in the wrong place shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i / 7 % 251) as u8).collect()
    }

    /// Removes record `seq` behind the store's back.
    fn drop_record(path: &Path, seq: u64) {
        let db = Database::open(path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(crate::LOG).unwrap().remove(seq).unwrap();
        tx.commit().unwrap();
    }

    /// The snapshot files beside the store, by name.
    /// The snapshot files (each whole one has its manifest beside it, checked here; the
    /// manifests are left out of the list).
    fn files(path: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(snapshot_dir(path))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let snaps: Vec<&String> = names.iter().filter(|n| n.ends_with(".snap")).collect();
        let manifests: Vec<String> =
            names.iter().filter_map(|n| n.strip_suffix(".manifest")).map(String::from).collect();
        assert_eq!(snaps, manifests.iter().collect::<Vec<_>>(), "a manifest beside every snapshot file, no other");
        names.retain(|n| !n.ends_with(".manifest"));
        names
    }

    fn name(at: u64) -> String {
        format!("{at:020}.snap")
    }

    #[test]
    fn a_snapshot_reads_back_whole_and_the_one_before_the_newest_is_kept_until_the_next() {
        let (path, mut s) = store("whole");
        s.append(&"r0".to_string()).unwrap();
        let big = pattern(3 << 20);
        s.compact(&big).unwrap();
        assert_eq!(s.load::<String>().unwrap(), (Some((1, big.clone())), vec![]));
        // Written in pieces of any size by the encoder: the same bytes.
        s.append(&"r1".to_string()).unwrap();
        s.compact_with(|w| big.chunks(1000).try_for_each(|c| w.write_all(c))).unwrap();
        assert_eq!(files(&path), [name(1), name(2)], "the snapshot before the newest is kept");
        s.append(&"r2".to_string()).unwrap();
        s.compact(b"third").unwrap();
        assert_eq!(files(&path), [name(2), name(3)], "the one before that is let go");
        drop(s);
        assert_eq!(Store::open(&path).unwrap().load::<String>().unwrap(), (Some((3, b"third".to_vec())), vec![]));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(snapshot_file(&snapshot_dir(&path), 3)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the state is readable by the store's owner only");
    }

    #[test]
    fn a_missing_snapshot_file_is_passed_over_while_the_records_are_kept_and_then_refused() {
        let (path, mut s) = store("missing");
        s.append(&"r0".to_string()).unwrap();
        s.compact(&pattern(1000)).unwrap();
        drop(s);
        std::fs::remove_file(snapshot_file(&snapshot_dir(&path), 1)).unwrap();
        // Record 0 is kept until a second snapshot covers it: the state is rebuilt from it.
        let loaded = Store::open(&path).unwrap().load_reporting::<String>().unwrap();
        assert_eq!((loaded.snapshot, loaded.records), (None, vec!["r0".to_string()]));
        let why = loaded.passed_over.expect("the damaged snapshot is reported").to_string();
        assert!(why.contains("snapshot before record 1") && why.contains(&name(1)), "{why}");
        // Without the record, nothing else holds the state: refused.
        drop_record(&path, 0);
        match Store::open(&path).unwrap().load::<String>() {
            Err(StoreError::Corrupt { seq: 1, message }) => assert!(message.contains(&name(1)), "{message}"),
            other => panic!("expected the missing file to be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_damaged_length_in_the_manifest_is_refused_without_allocating_it() {
        let (path, mut s) = store("length");
        s.append(&"r0".to_string()).unwrap();
        s.compact(b"small").unwrap();
        drop(s);
        {
            let db = Database::open(&path).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(SNAPSHOT).unwrap();
                let stored = t.get(1).unwrap().unwrap().value().to_vec();
                let mut m = Manifest::decode(&stored).expect("a manifest");
                m.len = u64::MAX / 2;
                t.insert(1, m.encode().as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
        drop_record(&path, 0);
        match Store::open(&path).unwrap().load::<String>() {
            Err(StoreError::Corrupt { seq: 1, message }) => assert!(message.contains("expected"), "{message}"),
            other => panic!("expected the length to be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_encoding_leaves_the_old_snapshot_and_log_and_its_partial_file_goes_later() {
        let (path, mut s) = store("failed");
        s.append(&"r0".to_string()).unwrap();
        s.compact(b"first").unwrap();
        s.append(&"r1".to_string()).unwrap();
        let half = pattern(3 << 20);
        let failed = s.compact_with(|w| {
            w.write_all(&half)?;
            Err(std::io::Error::other("the encoder gave up"))
        });
        assert!(failed.unwrap_err().to_string().contains("the encoder gave up"));
        assert!(s.ready().is_err(), "a failed compaction is reported until a write works");
        assert_eq!(s.load::<String>().unwrap(), (Some((1, b"first".to_vec())), vec!["r1".to_string()]));
        assert_eq!(files(&path), [name(1), format!("{}.partial", name(2))]);
        // The next compaction drops the partial file.
        s.compact(b"second").unwrap();
        assert!(s.ready().is_ok());
        assert_eq!(files(&path), [name(1), name(2)]);
    }

    /// Stores written before snapshots had files: the whole form, and parts in the store.
    #[test]
    fn snapshots_in_the_earlier_forms_still_read_and_their_parts_go_once_superseded() {
        let (path, mut s) = store("earlier");
        for i in 0..3 {
            s.append(&format!("r{i}")).unwrap();
        }
        drop(s);
        let parts = pattern(PART_BYTES * 2 + 5);
        {
            let db = Database::open(&path).unwrap();
            let m = write_parts(&db, 2, &parts);
            let tx = db.begin_write().unwrap();
            tx.open_table(SNAPSHOT).unwrap().insert(1, frame_snapshot(1, b"old-form").as_slice()).unwrap();
            tx.open_table(SNAPSHOT).unwrap().insert(2, m.encode().as_slice()).unwrap();
            tx.open_table(crate::LOG).unwrap().retain_in(..1, |_, _| false).unwrap();
            tx.commit().unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.load::<String>().unwrap(), (Some((2, parts.clone())), vec!["r2".to_string()]));
        s.compact(b"new").unwrap();
        s.append(&"r3".to_string()).unwrap();
        s.compact(b"newer").unwrap();
        drop(s);
        let db = Database::open(&path).unwrap();
        let rtx = db.begin_read().unwrap();
        assert_eq!(rtx.open_table(PARTS).unwrap().iter().unwrap().count(), 0, "no kept snapshot names them");
    }

    /// Compaction's chunked check and a restart's whole read agree on every damage: a file
    /// cut short, one byte too long, one bit flipped; the parts form too.
    #[test]
    fn the_chunked_check_refuses_exactly_what_the_whole_read_refuses() {
        let (path, mut s) = store("chunked");
        s.append(&"r0".to_string()).unwrap();
        let bytes = pattern(VERIFY_CHUNK * 2 + 17);
        s.compact(&bytes).unwrap();
        drop(s);
        let db = Database::open(&path).unwrap();
        let dir = snapshot_dir(&path);
        let file = snapshot_file(&dir, 1);
        let m =
            Manifest::decode(db.begin_read().unwrap().open_table(SNAPSHOT).unwrap().get(1).unwrap().unwrap().value())
                .expect("a manifest");
        let both = |db: &Database| {
            let rtx = db.begin_read().unwrap();
            (
                verify_manifest(&rtx, &dir, 1, &m).map_err(|e| e.to_string()),
                read_manifest(&rtx, &dir, 1, &m).map(|_| ()).map_err(|e| e.to_string()),
            )
        };
        assert_eq!(both(&db), (Ok(()), Ok(())));
        let mut damaged = bytes.clone();
        damaged[VERIFY_CHUNK + 3] ^= 0x10;
        let cases = [damaged, bytes[..bytes.len() - 1].to_vec(), [&bytes[..], b"x"].concat()];
        for case in cases {
            std::fs::write(&file, &case).unwrap();
            let (chunked, whole) = both(&db);
            assert!(chunked.is_err(), "{} bytes accepted", case.len());
            assert_eq!(chunked, whole);
        }
        // The parts form: a part missing is refused by both, naming it.
        let parts = pattern(PART_BYTES + 5);
        let pm = write_parts(&db, 2, &parts);
        let rtx = db.begin_read().unwrap();
        assert!(verify_manifest(&rtx, &dir, 2, &pm).is_ok());
        drop(rtx);
        let tx = db.begin_write().unwrap();
        tx.open_table(PARTS).unwrap().remove((2, 1)).unwrap();
        tx.commit().unwrap();
        let rtx = db.begin_read().unwrap();
        let err = verify_manifest(&rtx, &dir, 2, &pm).unwrap_err().to_string();
        assert!(err.contains("part 1 of 2 is missing"), "{err}");
    }
}
