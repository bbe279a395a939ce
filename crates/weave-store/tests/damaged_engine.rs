//! Damage inside the storage engine's own structures (the library panics on it) is reported
//! as one clear error, without the panic's message and backtrace, and every other panic still
//! reaches the hook installed before. Its own test binary: it installs a panic hook.

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
    let original = std::fs::read(&path).unwrap();
    let mut damaged = 0;
    for offset in (0..original.len()).step_by((original.len() / 2000).max(1)) {
        let copy = d.join("flipped.redb");
        let mut bytes = original.clone();
        bytes[offset] ^= 0xFF;
        std::fs::write(&copy, &bytes).unwrap();
        if let Err(e) = Store::open(&copy).and_then(|s| s.records::<serde_json::Value>()) {
            let m = e.to_string();
            if m.contains("damaged inside its storage engine") {
                assert!(m.contains("restore the data directory from a backup"), "{m}");
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "no flip reached the storage engine's structures");
    assert_eq!(printed.load(Ordering::SeqCst), 0, "a guarded panic reached the panic hook");
    let _ = std::panic::catch_unwind(|| panic!("an ordinary panic"));
    assert_eq!(printed.load(Ordering::SeqCst), 1, "other panics still reach the hook");
    let _ = std::fs::remove_dir_all(&d);
}
