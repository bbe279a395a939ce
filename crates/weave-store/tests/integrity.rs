//! A damaged store is refused with the record that is wrong, never read as different data and
//! never a panic; `verify` and `truncate_after` say and do exactly what they claim.

use std::path::{Path, PathBuf};
use weave_store::{truncate_after, verify, Store, StoreError};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weave-store-integrity-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn records() -> Vec<String> {
    (0..40).map(|i| format!("record-{i:03}-tenant-alpha-job-{}", i * 7)).collect()
}

fn written(d: &Path) -> PathBuf {
    let path = d.join("weave.redb");
    let mut s = Store::open(&path).unwrap();
    for r in records() {
        s.append(&r).unwrap();
    }
    path
}

fn read(path: &Path) -> Result<Vec<String>, StoreError> {
    Store::open(path)?.records()
}

#[test]
fn a_changed_byte_inside_a_record_names_that_record() {
    let d = dir("inside");
    let path = written(&d);
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = b"record-017-tenant-alpha";
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("the record's bytes are in the file");
    bytes[at + 11] ^= 0x01; // "tenant" -> "uenant": still valid JSON, different data
    std::fs::write(&path, &bytes).unwrap();
    match read(&path) {
        Err(StoreError::Corrupt { seq: 17, message }) => assert!(message.contains("checksum"), "{message}"),
        other => panic!("expected record 17 to be refused, got {other:?}"),
    }
    let v = verify::<String>(&path).unwrap();
    assert_eq!(v.records, 17);
    assert_eq!(v.first_bad.as_ref().map(|b| b.0), Some(17));
}

#[test]
fn a_flipped_byte_anywhere_is_refused_or_changes_nothing() {
    let d = dir("anywhere");
    let path = written(&d);
    let original = std::fs::read(&path).unwrap();
    let expected = records();
    let stride = (original.len() / 500).max(1);
    let (mut refused, mut harmless) = (0, 0);
    for offset in (0..original.len()).step_by(stride) {
        let copy = d.join(format!("flip-{offset}.redb"));
        let mut bytes = original.clone();
        bytes[offset] ^= 0xFF;
        std::fs::write(&copy, &bytes).unwrap();
        match read(&copy) {
            Err(_) => refused += 1,
            Ok(got) => {
                assert_eq!(got, expected, "a flip at byte {offset} was read as different data");
                harmless += 1;
            }
        }
        let _ = std::fs::remove_file(&copy);
    }
    assert!(refused > 0, "no flip was noticed ({harmless} harmless)");
}

#[test]
fn truncate_after_keeps_a_copy_and_drops_only_the_tail() {
    let d = dir("truncate");
    let path = written(&d);
    let (dropped, backup) = truncate_after(&path, 24).unwrap();
    assert_eq!(dropped, 15);
    assert!(backup.exists());
    assert_eq!(read(&path).unwrap(), records()[..25].to_vec());
    assert_eq!(read(&backup).unwrap(), records());
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.append(&"next".to_string()).unwrap(), 25, "appends continue after the kept records");
}

#[test]
fn verify_counts_good_records_and_never_creates_a_store() {
    let d = dir("verify");
    let path = written(&d);
    let v = verify::<String>(&path).unwrap();
    assert_eq!((v.snapshot_at, v.records, v.unchecked, v.first_bad), (None, 40, 0, None));
    // Records that do not parse as what the caller expects are named too.
    let v = verify::<u32>(&path).unwrap();
    assert_eq!(v.first_bad.map(|b| b.0), Some(0));
    assert!(verify::<String>(&d.join("absent.redb")).is_err());
    assert!(!d.join("absent.redb").exists());
}

/// A flipped bit in a record's key (its sequence number) is reported at the position where
/// the sequence breaks, so the advice keeps every good record before it instead of naming the
/// damaged key's huge number (which would drop nothing).
#[test]
fn a_flipped_key_is_reported_where_the_sequence_breaks() {
    let d = dir("key");
    let path = written(&d);
    let mut bytes = std::fs::read(&path).unwrap();
    let key = 35u64.to_le_bytes();
    let at = bytes.windows(8).position(|w| w == key).expect("record 35's key is in the file");
    bytes[at + 5] ^= 0x20; // 35 -> 35 + 2^45
    std::fs::write(&path, &bytes).unwrap();
    let v = verify::<String>(&path).unwrap();
    let (at, why) = v.first_bad.clone().expect("the broken sequence is found");
    assert_eq!((at, v.records), (35, 35), "{why}");
    assert!(why.contains("expected record 35"), "{why}");
    // What the advice says to run leaves a good store of the records before it.
    truncate_after(&path, at - 1).unwrap();
    assert_eq!(read(&path).unwrap(), records()[..35].to_vec());
    let v = verify::<String>(&path).unwrap();
    assert_eq!((v.records, v.first_bad), (35, None));
}
