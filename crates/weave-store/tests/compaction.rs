//! Compaction: a snapshot replaces the records it covers in one transaction; the log goes on
//! at the same position; the snapshot is checksummed like records.

use std::path::{Path, PathBuf};
use weave_store::{truncate_after, verify, Store, StoreError};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weave-store-compaction-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

type Loaded = (Option<(u64, Vec<u8>)>, Vec<String>);

fn load(path: &Path) -> Result<Loaded, StoreError> {
    Store::open(path)?.load()
}

/// Ten records, a snapshot after them, five more.
fn compacted(d: &Path) -> PathBuf {
    let path = d.join("weave.redb");
    let mut s = Store::open(&path).unwrap();
    for i in 0..10 {
        s.append(&format!("r{i}")).unwrap();
    }
    assert_eq!(s.compact(b"state-after-ten-records").unwrap(), 10);
    for i in 10..15 {
        assert_eq!(s.append(&format!("r{i}")).unwrap(), i, "numbering goes on after the snapshot");
    }
    path
}

#[test]
fn a_snapshot_replaces_the_records_it_covers_and_the_log_goes_on() {
    let d = dir("basic");
    let path = compacted(&d);
    let (snap, records) = load(&path).unwrap();
    assert_eq!(snap, Some((10, b"state-after-ten-records".to_vec())));
    assert_eq!(records, (10..15).map(|i| format!("r{i}")).collect::<Vec<_>>());
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.len(), 15);
    // `records` alone would silently miss the compacted ones: it refuses.
    assert!(s.records::<String>().is_err());
    // A second compaction replaces the first snapshot; an empty log keeps its position.
    assert_eq!(s.compact(b"state-after-fifteen").unwrap(), 5);
    drop(s);
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.len(), 15);
    assert_eq!(s.load::<String>().unwrap(), (Some((15, b"state-after-fifteen".to_vec())), vec![]));
    assert_eq!(s.append(&"r15".to_string()).unwrap(), 15);
    drop(s);
    let v = verify::<String>(&path).unwrap();
    assert_eq!((v.snapshot_at, v.records, v.first_bad), (Some(15), 1, None));
}

#[test]
fn a_damaged_snapshot_is_refused_never_read_as_other_state() {
    let d = dir("damaged");
    let path = compacted(&d);
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = b"state-after-ten-records";
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("the snapshot's bytes are in the file");
    bytes[at + 3] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    match load(&path) {
        Err(StoreError::Corrupt { seq: 10, message }) => assert!(message.contains("snapshot"), "{message}"),
        other => panic!("expected the snapshot to be refused, got {other:?}"),
    }
    let v = verify::<String>(&path).unwrap();
    assert!(v.first_bad.unwrap().1.contains("snapshot"));
}

#[test]
fn a_flipped_byte_anywhere_in_a_compacted_store_is_refused_or_changes_nothing() {
    let d = dir("anywhere");
    let path = compacted(&d);
    let original = std::fs::read(&path).unwrap();
    let expected = load(&path).unwrap();
    let stride = (original.len() / 400).max(1);
    let mut refused = 0;
    for offset in (0..original.len()).step_by(stride) {
        let copy = d.join(format!("flip-{offset}.redb"));
        let mut bytes = original.clone();
        bytes[offset] ^= 0xFF;
        std::fs::write(&copy, &bytes).unwrap();
        match load(&copy) {
            Err(_) => refused += 1,
            Ok(got) => assert_eq!(got, expected, "a flip at byte {offset} was read as different data"),
        }
        let _ = std::fs::remove_file(&copy);
    }
    assert!(refused > 0, "no flip was noticed");
}

#[test]
fn truncation_never_reaches_into_the_snapshot() {
    let d = dir("truncate");
    let path = compacted(&d);
    let e = truncate_after(&path, 5).unwrap_err().to_string();
    assert!(e.contains("compacted into the snapshot"), "{e}");
    // Past the end it drops nothing, and says so instead of reporting success.
    let e = truncate_after(&path, 14).unwrap_err().to_string();
    assert!(e.contains("ends at record 14") && e.contains("drop nothing"), "{e}");
    let (dropped, _) = truncate_after(&path, 11).unwrap();
    assert_eq!(dropped, 3);
    let (snap, records) = load(&path).unwrap();
    assert_eq!((snap.unwrap().0, records), (10, vec!["r10".to_string(), "r11".to_string()]));
    // Keeping exactly what the snapshot covers leaves an empty log after it.
    truncate_after(&path, 9).unwrap();
    assert_eq!(load(&path).unwrap().1, Vec::<String>::new());
    assert_eq!(Store::open(&path).unwrap().len(), 10);
}
