//! Snapshots in the store: the snapshot row (a manifest, or the whole snapshot in the form
//! written before parts) and the parts a manifest names, with the checksum over all the bytes.

use crate::{db_err, StoreError, SUM_LEN};
use redb::{Database, ReadableTable, TableDefinition};
use sha2::{Digest, Sha256};

/// At most one row: the snapshot of the state after every record before its key. Either the
/// whole snapshot ([`frame_snapshot`], as written before parts) or a [`Manifest`] of parts.
pub(crate) const SNAPSHOT: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshot");

/// A snapshot's bytes in parts of [`PART_BYTES`], keyed by (its position, part number). Each
/// part is written in its own transaction, so neither the encoder nor the database ever holds
/// the whole snapshot in memory; the manifest that makes them the snapshot is written last.
pub(crate) const PARTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("snapshot-parts");
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

/// The snapshot row of a snapshot stored in parts: a tag no checksum starts with in practice
/// (so the older whole form is told apart), the checksum over all its bytes, how many parts
/// and bytes.
pub(crate) struct Manifest {
    sum: [u8; SUM_LEN],
    pub(crate) parts: u32,
    len: u64,
}

const MANIFEST_TAG: &[u8] = b"weave-snapshot-parts-v1";

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = MANIFEST_TAG.to_vec();
        v.extend_from_slice(&self.sum);
        v.extend_from_slice(&self.parts.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v
    }

    /// `None`: not a manifest (a whole snapshot).
    fn decode(stored: &[u8]) -> Option<Manifest> {
        let rest = stored.strip_prefix(MANIFEST_TAG)?;
        if rest.len() != SUM_LEN + 12 {
            return None;
        }
        Some(Manifest {
            sum: rest[..SUM_LEN].try_into().ok()?,
            parts: u32::from_be_bytes(rest[SUM_LEN..SUM_LEN + 4].try_into().ok()?),
            len: u64::from_be_bytes(rest[SUM_LEN + 4..].try_into().ok()?),
        })
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

/// The snapshot row, if any: its position (the first record it does not cover) and bytes.
pub(crate) fn read_snapshot(rtx: &redb::ReadTransaction) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
    let t = match rtx.open_table(SNAPSHOT) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(db_err(e)),
    };
    let Some((k, v)) = t.last().map_err(db_err)? else { return Ok(None) };
    let at = k.value();
    match Manifest::decode(v.value()) {
        Some(m) => Ok(Some((at, read_parts(rtx, at, &m)?))),
        None => Ok(Some((at, unframe_snapshot(at, v.value())?.to_vec()))),
    }
}

/// The bytes of the snapshot at `at` stored in the parts `m` lists, checked against `m`.
fn read_parts(rtx: &redb::ReadTransaction, at: u64, m: &Manifest) -> Result<Vec<u8>, StoreError> {
    let t = match rtx.open_table(PARTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Err(corrupt(at, "its parts are missing")),
        Err(e) => return Err(db_err(e)),
    };
    // Grown as the parts are read, never reserved from the manifest's length: a damaged
    // length must give the error below, not an allocation of that size.
    let mut bytes = Vec::new();
    for part in 0..m.parts {
        let v = t
            .get((at, part))
            .map_err(db_err)?
            .ok_or_else(|| corrupt(at, &format!("part {part} of {} is missing", m.parts)))?;
        bytes.extend_from_slice(v.value());
    }
    if bytes.len() as u64 != m.len {
        return Err(corrupt(at, &format!("{} bytes in its parts, {} expected", bytes.len(), m.len)));
    }
    if snapshot_checksum(at, &bytes) != m.sum {
        return Err(corrupt(at, "checksum mismatch"));
    }
    Ok(bytes)
}

/// Writes a snapshot's bytes as parts, each in its own non-durable transaction (the final
/// durable commit of the manifest makes them durable), keeping its checksum as it goes.
pub(crate) struct PartWriter<'d> {
    db: &'d Database,
    at: u64,
    buf: Vec<u8>,
    parts: u32,
    len: u64,
    hash: Sha256,
    /// The store's error behind an I/O error handed to the encoder.
    pub(crate) failed: Option<StoreError>,
}

impl<'d> PartWriter<'d> {
    pub(crate) fn new(db: &'d Database, at: u64) -> Self {
        PartWriter {
            db,
            at,
            buf: Vec::with_capacity(PART_BYTES),
            parts: 0,
            len: 0,
            hash: snapshot_hasher(at),
            failed: None,
        }
    }

    fn store_part(&mut self) -> Result<(), StoreError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut tx = self.db.begin_write().map_err(db_err)?;
        tx.set_durability(redb::Durability::None).map_err(db_err)?;
        {
            let mut t = tx.open_table(PARTS).map_err(db_err)?;
            t.insert((self.at, self.parts), self.buf.as_slice()).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        self.parts += 1;
        self.buf.clear();
        Ok(())
    }

    /// The manifest, once every byte is stored.
    pub(crate) fn finish(mut self) -> Result<Manifest, StoreError> {
        self.store_part()?;
        Ok(Manifest { sum: sum_of(self.hash), parts: self.parts, len: self.len })
    }
}

impl std::io::Write for PartWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(PART_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        self.hash.update(&data[..n]);
        self.len += n as u64;
        if self.buf.len() == PART_BYTES {
            if let Err(e) = self.store_part() {
                let message = e.to_string();
                self.failed = Some(e);
                return Err(std::io::Error::other(message));
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use redb::ReadableDatabase;
    use std::path::PathBuf;

    fn store(name: &str) -> (PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("weave-store-parts-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weave.redb");
        let s = Store::open(&path).unwrap();
        (path, s)
    }

    /// Bytes no two parts share, so a part read in the wrong place shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i / 7 % 251) as u8).collect()
    }

    fn part_keys(path: &std::path::Path) -> Vec<(u64, u32)> {
        let db = Database::open(path).unwrap();
        let rtx = db.begin_read().unwrap();
        let t = rtx.open_table(PARTS).unwrap();
        t.iter().unwrap().map(|r| r.unwrap().0.value()).collect()
    }

    #[test]
    fn a_snapshot_larger_than_a_part_reads_back_whole_and_replaces_the_last_one() {
        let (path, mut s) = store("whole");
        s.append(&"r0".to_string()).unwrap();
        let big = pattern(2 * PART_BYTES + 12_345);
        s.compact(&big).unwrap();
        assert_eq!(s.load::<String>().unwrap(), (Some((1, big.clone())), vec![]));
        // Written in pieces of any size by the encoder: the same parts.
        s.append(&"r1".to_string()).unwrap();
        s.compact_with(|w| big.chunks(1000).try_for_each(|c| w.write_all(c))).unwrap();
        drop(s);
        assert_eq!(part_keys(&path), [(2, 0), (2, 1), (2, 2)], "the older snapshot's parts are gone");
        assert_eq!(Store::open(&path).unwrap().load::<String>().unwrap(), (Some((2, big)), vec![]));
    }

    #[test]
    fn a_missing_part_is_refused_with_the_snapshot_named() {
        let (path, mut s) = store("missing");
        s.append(&"r0".to_string()).unwrap();
        s.compact(&pattern(PART_BYTES + 1)).unwrap();
        drop(s);
        {
            let db = Database::open(&path).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(PARTS).unwrap().remove((1, 1)).unwrap();
            tx.commit().unwrap();
        }
        match Store::open(&path).unwrap().load::<String>() {
            Err(StoreError::Corrupt { seq: 1, message }) => assert!(message.contains("part 1 of 2"), "{message}"),
            other => panic!("expected the missing part to be refused, got {other:?}"),
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
        match Store::open(&path).unwrap().load::<String>() {
            Err(StoreError::Corrupt { seq: 1, message }) => {
                assert!(message.contains("bytes in its parts"), "{message}")
            }
            other => panic!("expected the length to be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_encoding_leaves_the_old_snapshot_and_log_and_its_parts_go_later() {
        let (path, mut s) = store("failed");
        s.append(&"r0".to_string()).unwrap();
        s.compact(b"first").unwrap();
        s.append(&"r1".to_string()).unwrap();
        let half = pattern(PART_BYTES + 10);
        let failed = s.compact_with(|w| {
            w.write_all(&half)?;
            Err(std::io::Error::other("the encoder gave up"))
        });
        assert!(failed.unwrap_err().to_string().contains("the encoder gave up"));
        assert!(s.ready().is_err(), "a failed compaction is reported until a write works");
        assert_eq!(s.load::<String>().unwrap(), (Some((1, b"first".to_vec())), vec!["r1".to_string()]));
        // The next compaction drops the stray part.
        s.compact(b"second").unwrap();
        assert!(s.ready().is_ok());
        drop(s);
        assert_eq!(part_keys(&path), [(2, 0)]);
    }

    #[test]
    fn a_snapshot_in_the_earlier_whole_form_still_reads() {
        let (path, mut s) = store("earlier");
        for i in 0..3 {
            s.append(&format!("r{i}")).unwrap();
        }
        drop(s);
        {
            let db = Database::open(&path).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(SNAPSHOT).unwrap().insert(2, frame_snapshot(2, b"old-form").as_slice()).unwrap();
            tx.open_table(crate::LOG).unwrap().retain_in(..2, |_, _| false).unwrap();
            tx.commit().unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.load::<String>().unwrap(), (Some((2, b"old-form".to_vec())), vec!["r2".to_string()]));
    }
}
