//! Damage inside the storage engine's own structures (the library panics on it) is reported
//! as one clear error, without the panic's message and backtrace, and every other panic still
//! reaches the hook installed before; `export`, the way out it names, copies a prefix of the
//! records as written (or says it can read nothing). Its own test binary: it installs a hook.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use weave_store::Store;

#[test]
fn engine_damage_is_one_clear_error_and_no_panic_output() {
    let printed = Arc::new(AtomicUsize::new(0));
    let counter = printed.clone();
    std::panic::set_hook(Box::new(move |info| {
        counter.fetch_add(1, Ordering::SeqCst);
        eprintln!("{info}");
    }));
    let d = std::env::temp_dir().join(format!("weave-store-engine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("weave.redb");
    {
        let mut s = Store::open(&path).unwrap();
        for i in 0..200 {
            s.append(&format!("{{\"n\":{i}}}")).unwrap();
        }
    }
    let written: Vec<serde_json::Value> = Store::open(&path).unwrap().records().unwrap();
    let original = std::fs::read(&path).unwrap();
    let (mut damaged, mut exported, mut whole) = (0, 0, 0);
    for offset in (0..original.len()).step_by((original.len() / 2000).max(1)) {
        let copy = d.join("flipped.redb");
        let mut bytes = original.clone();
        bytes[offset] ^= 0xFF;
        std::fs::write(&copy, &bytes).unwrap();
        if let Err(e) = Store::open(&copy).and_then(|s| s.records::<serde_json::Value>()) {
            let m = e.to_string();
            if m.contains("damaged inside its storage engine") {
                assert!(m.contains("restore the data directory from a backup"), "{m}");
                assert!(m.contains("weave store export"), "{m}");
                damaged += 1;
                // The way out copies a prefix of the records, each as written, or says it can
                // read nothing; never anything else.
                let to = d.join("exported.redb");
                let _ = std::fs::remove_file(&to);
                match weave_store::export(&copy, &to) {
                    Ok(e) => {
                        let got: Vec<serde_json::Value> = Store::open(&to).unwrap().records().unwrap();
                        assert_eq!(got.len() as u64, e.records);
                        assert_eq!(got, written[..got.len()], "a flip at {offset} exported other records");
                        exported += 1;
                        whole += usize::from(got.len() == written.len());
                    }
                    Err(e) => assert!(e.to_string().contains("damaged"), "{e}"),
                }
            }
        }
    }
    assert!(damaged > 0, "no flip reached the storage engine's structures");
    eprintln!("{damaged} flips damaged the engine; export copied a prefix from {exported}, every record from {whole}");
    assert!(exported > 0, "export never got past the damage");
    assert_eq!(printed.load(Ordering::SeqCst), 0, "a guarded panic reached the panic hook");
    let _ = std::panic::catch_unwind(|| panic!("an ordinary panic"));
    assert_eq!(printed.load(Ordering::SeqCst), 1, "other panics still reach the hook");
    let _ = std::fs::remove_dir_all(&d);
}
