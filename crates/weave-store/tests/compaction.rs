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
    // Nothing is let go yet: the records stay until a second snapshot covers them too.
    assert_eq!(s.compact(b"state-after-ten-records").unwrap(), 0);
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
    // A second compaction lets go of the records the first covers (kept until now, should the
    // newer snapshot be damaged); an empty log keeps its position.
    assert_eq!(s.compact(b"state-after-fifteen").unwrap(), 10);
    drop(s);
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.len(), 15);
    assert_eq!(s.load::<String>().unwrap(), (Some((15, b"state-after-fifteen".to_vec())), vec![]));
    assert_eq!(s.append(&"r15".to_string()).unwrap(), 15);
    drop(s);
    let v = verify::<String>(&path).unwrap();
    assert_eq!((v.snapshot_at, v.records, v.first_bad), (Some(15), 1, None));
}

/// The files of the store at `path`: the store's own and its snapshots'.
fn store_files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    let mut snaps: Vec<PathBuf> =
        std::fs::read_dir(path.with_extension("snapshots")).unwrap().map(|e| e.unwrap().path()).collect();
    snaps.sort();
    files.extend(snaps);
    files
}

/// Flips a bit inside the stored bytes `needle`, wherever the store keeps them.
fn flip_inside(path: &Path, needle: &[u8]) {
    for file in store_files(path) {
        let mut bytes = std::fs::read(&file).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + 3] ^= 0x01;
            std::fs::write(&file, &bytes).unwrap();
            return;
        }
    }
    panic!("the snapshot's bytes are in none of the store's files");
}

#[test]
fn a_damaged_snapshot_is_passed_over_for_the_kept_records_and_never_read_as_other_state() {
    let d = dir("damaged");
    let path = compacted(&d);
    flip_inside(&path, b"state-after-ten-records");
    // Every record is still kept: the state is rebuilt from them, and the damage reported.
    let loaded = Store::open(&path).unwrap().load_reporting::<String>().unwrap();
    assert_eq!((loaded.snapshot, loaded.records), (None, (0..15).map(|i| format!("r{i}")).collect::<Vec<_>>()));
    assert!(loaded.passed_over.unwrap().to_string().contains("snapshot before record 10"));
    let v = verify::<String>(&path).unwrap();
    assert_eq!((v.snapshot_at, v.records, v.first_bad), (None, 15, None));
    assert!(v.passed_over.unwrap().contains("checksum mismatch"));
}

#[test]
fn a_damaged_newest_snapshot_falls_back_to_the_one_before_and_without_it_is_refused() {
    let d = dir("fallback");
    let path = compacted(&d);
    let mut s = Store::open(&path).unwrap();
    s.compact(b"state-after-fifteen-records").unwrap();
    s.append(&"r15".to_string()).unwrap();
    drop(s);
    flip_inside(&path, b"state-after-fifteen-records");
    let loaded = Store::open(&path).unwrap().load_reporting::<String>().unwrap();
    let after_ten: Vec<String> = (10..16).map(|i| format!("r{i}")).collect();
    assert_eq!((loaded.snapshot, loaded.records), (Some((10, b"state-after-ten-records".to_vec())), after_ten));
    assert!(loaded.passed_over.is_some());
    // With the older snapshot damaged too, the records before 10 are gone: refused, naming
    // the newest.
    flip_inside(&path, b"state-after-ten-records");
    match load(&path) {
        Err(StoreError::Corrupt { seq: 15, message }) => assert!(message.contains("snapshot"), "{message}"),
        other => panic!("expected the snapshot to be refused, got {other:?}"),
    }
    let v = verify::<String>(&path).unwrap();
    assert!(v.first_bad.unwrap().1.contains("snapshot"));
}

#[test]
fn a_flipped_byte_anywhere_in_a_compacted_store_is_refused_or_changes_nothing() {
    let d = dir("anywhere");
    let path = compacted(&d);
    let expected = load(&path).unwrap();
    // The same state without the snapshot: every record from the first.
    let replayed: Loaded = (None, (0..15).map(|i| format!("r{i}")).collect());
    let mut refused = 0;
    // Each file of the store (its own, then the snapshot's), a byte flipped in a copy.
    for (n, file) in store_files(&path).iter().enumerate() {
        let original = std::fs::read(file).unwrap();
        let stride = (original.len() / 400).max(1);
        for offset in (0..original.len()).step_by(stride) {
            let copy = d.join(format!("flip-{n}-{offset}"));
            copy_store(&path, &copy);
            let target = copy.join(file.strip_prefix(&d).unwrap());
            let mut bytes = original.clone();
            bytes[offset] ^= 0xFF;
            std::fs::write(&target, &bytes).unwrap();
            match Store::open(&copy.join("weave.redb")).and_then(|s| s.load_reporting::<String>()) {
                Err(_) => refused += 1,
                Ok(got) => {
                    let passed_over = got.passed_over.is_some();
                    let got = (got.snapshot, got.records);
                    let same = if passed_over { &replayed } else { &expected };
                    assert_eq!(&got, same, "a flip at byte {offset} of {} was read as different data", file.display());
                    refused += usize::from(passed_over);
                }
            }
            let _ = std::fs::remove_dir_all(&copy);
        }
    }
    assert!(refused > 0, "no flip was noticed");
}

/// Copies the store at `path` (its file and its snapshots) into the directory `to`.
fn copy_store(path: &Path, to: &Path) {
    let snaps = to.join("weave.snapshots");
    std::fs::create_dir_all(&snaps).unwrap();
    for file in store_files(path) {
        let name = file.file_name().unwrap();
        let dest = if file == path { to.join(name) } else { snaps.join(name) };
        std::fs::copy(&file, dest).unwrap();
    }
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

#[test]
fn a_snapshot_written_in_the_background_lets_appends_go_on_and_covers_only_what_came_before() {
    let d = dir("background");
    let path = d.join("weave.redb");
    let mut s = Store::open(&path).unwrap();
    for i in 0..10 {
        s.append(&format!("r{i}")).unwrap();
    }
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (show, shown) = std::sync::mpsc::channel::<()>();
    let before: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let frozen = before.join(",");
    let started = s.compact_in_background(Box::new(move |out| {
        show.send(()).unwrap();
        // Held until the appends below are done: they must not wait for it.
        released.recv_timeout(std::time::Duration::from_secs(60)).map_err(std::io::Error::other)?;
        out.write_all(frozen.as_bytes())
    }));
    assert!(started);
    shown.recv().unwrap();
    for i in 10..15 {
        assert_eq!(s.append(&format!("r{i}")).unwrap(), i);
    }
    assert!(s.compacting());
    assert!(!s.compact_in_background(Box::new(|_| Ok(()))), "one snapshot at a time");
    release.send(()).unwrap();
    let done = s.finish_compaction(true).unwrap();
    assert_eq!(done.outcome.unwrap(), 0, "nothing let go before a second snapshot");
    assert!(done.ended >= done.started);
    assert_eq!(s.records_since_snapshot(), 5);
    drop(s);
    let (snap, records) = load(&path).unwrap();
    assert_eq!(snap, Some((10, before.join(",").into_bytes())));
    assert_eq!(records, (10..15).map(|i| format!("r{i}")).collect::<Vec<_>>());
}

#[test]
fn a_background_snapshot_that_fails_loses_nothing_and_is_reported_until_a_write_works() {
    let d = dir("background-fails");
    let path = d.join("weave.redb");
    let mut s = Store::open(&path).unwrap();
    s.append(&"r0".to_string()).unwrap();
    assert!(s.compact_in_background(Box::new(|_| Err(std::io::Error::other("encoding failed")))));
    let e = s.finish_compaction(true).unwrap().outcome.unwrap_err().to_string();
    assert!(e.contains("encoding failed"), "{e}");
    assert!(s.ready().is_err());
    s.append(&"r1".to_string()).unwrap();
    assert!(s.ready().is_ok());
    assert_eq!(s.load::<String>().unwrap(), (None, vec!["r0".to_string(), "r1".to_string()]));
}

#[test]
fn export_copies_the_snapshot_and_the_records_after_it_into_a_new_store() {
    let d = dir("export");
    let path = compacted(&d);
    let to = d.join("exported.redb");
    let e = weave_store::export(&path, &to).unwrap();
    assert_eq!((e.snapshot_at, e.records, e.stopped_at), (Some(10), 5, None));
    assert_eq!(load(&to).unwrap(), load(&path).unwrap());
    let mut s = Store::open(&to).unwrap();
    assert_eq!(s.append(&"r15".to_string()).unwrap(), 15, "the log goes on where it was");
    drop(s);
    let again = weave_store::export(&path, &to).unwrap_err().to_string();
    assert!(again.contains("already exists"), "{again}");
}

#[test]
fn export_stops_at_the_first_record_it_cannot_read() {
    let d = dir("export-bad");
    let path = compacted(&d);
    // Damage record 12's bytes (a checksum mismatch).
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(5).position(|w| w == b"\"r12\"").expect("record 12 is in the file");
    bytes[at + 2] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let to = d.join("exported.redb");
    let e = weave_store::export(&path, &to).unwrap();
    assert_eq!((e.snapshot_at, e.records), (Some(10), 2));
    let (seq, why) = e.stopped_at.unwrap();
    assert_eq!(seq, 12, "{why}");
    assert_eq!(load(&to).unwrap().1, ["r10", "r11"]);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the damaged store is not changed");
}

/// A store file that cannot be opened at all (its header overwritten, or the file cut short):
/// export falls back on the newest snapshot file whose manifest beside it says it is whole,
/// and says the records after it are lost; a snapshot file damaged as well is not taken.
#[test]
fn export_of_an_unreadable_store_starts_from_the_newest_whole_snapshot_file() {
    for (name, damage) in [("header", 0usize), ("cut", 1)] {
        let d = dir(&format!("export-unreadable-{name}"));
        let path = d.join("weave.redb");
        let mut s = Store::open(&path).unwrap();
        for i in 0..10 {
            s.append(&format!("r{i}")).unwrap();
        }
        s.compact(b"state-after-ten-records").unwrap();
        for i in 10..15 {
            s.append(&format!("r{i}")).unwrap();
        }
        drop(s);
        let mut bytes = std::fs::read(&path).unwrap();
        if damage == 0 {
            bytes[..4096].fill(0xAB);
        } else {
            bytes.truncate(1000);
        }
        std::fs::write(&path, &bytes).unwrap();
        assert!(Store::open(&path).and_then(|s| s.load::<String>()).is_err(), "{name}: the store no longer opens");
        let to = d.join("exported.redb");
        let e = weave_store::export(&path, &to).unwrap();
        assert_eq!((e.snapshot_at, e.records), (Some(10), 0), "{name}");
        let (at, why) = e.stopped_at.unwrap();
        assert!(at == 10 && why.contains("lost"), "{name}: {why}");
        assert_eq!(load(&to).unwrap(), (Some((10, b"state-after-ten-records".to_vec())), vec![]));
        let mut s = Store::open(&to).unwrap();
        assert_eq!(s.append(&"r10".to_string()).unwrap(), 10, "the log goes on after the snapshot");
        drop(s);

        // The snapshot file damaged too: nothing trustworthy is left, and export says so.
        let snaps = path.with_extension("snapshots");
        let file = std::fs::read_dir(&snaps)
            .unwrap()
            .flatten()
            .find(|e| e.path().extension().is_some_and(|x| x == "snap"))
            .unwrap();
        let mut snap = std::fs::read(file.path()).unwrap();
        snap[0] ^= 1;
        std::fs::write(file.path(), snap).unwrap();
        assert!(weave_store::export(&path, &d.join("again.redb")).is_err(), "{name}: a damaged snapshot is not taken");
    }
}
