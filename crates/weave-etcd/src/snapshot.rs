//! Snapshots of the state in etcd, so that a replica opens from the newest one and the records
//! after it instead of the whole history.
//!
//! The state after record `at` is kept in parts of [`PART_BYTES`] (etcd refuses requests over
//! 1.5 MiB) at `<prefix>/snapshots/<at, 20 digits>/<part, 6 digits>`, each written only while
//! the writer leads. One transaction, also conditional on the leadership, then makes it the
//! newest (`<prefix>/snapshot` names it) and deletes the records before `at` and every older
//! snapshot: a reader sees the old snapshot and its records or the new one and its records,
//! never a snapshot without the records after it.

use crate::guard::{record_key, AppendError, LeaderGuard};
use crate::{prefix_end, Compare, Etcd, EtcdError, Op};
use serde::{Deserialize, Serialize};

/// Bytes per part (etcd's default request limit is 1.5 MiB).
pub const PART_BYTES: usize = 1 << 20;

/// What `<prefix>/snapshot` holds: the newest snapshot's place and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The state after this many records.
    pub at: u64,
    pub parts: u64,
    pub bytes: u64,
}

fn manifest_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}/snapshot").into_bytes()
}

fn parts_dir(prefix: &str, at: u64) -> String {
    format!("{prefix}/snapshots/{at:020}/")
}

/// The newest snapshot's manifest, if one was taken.
pub fn manifest(etcd: &Etcd, prefix: &str) -> Result<Option<Manifest>, EtcdError> {
    let Some(kv) = etcd.get(&manifest_key(prefix))? else { return Ok(None) };
    serde_json::from_slice(&kv.value)
        .map(Some)
        .map_err(|e| EtcdError::Decode { call: "snapshot manifest", message: format!("{prefix}/snapshot: {e}") })
}

/// The newest snapshot and its bytes. A snapshot replaced while it was read is read again.
pub fn load(etcd: &Etcd, prefix: &str) -> Result<Option<(Manifest, Vec<u8>)>, EtcdError> {
    let mut last = None;
    for _ in 0..5 {
        let Some(m) = manifest(etcd, prefix)? else { return Ok(None) };
        if last == Some(m) {
            // The same manifest twice with parts missing: they were lost, not replaced.
            let message = format!("{prefix}/snapshot names {} parts at {}, not all there", m.parts, m.at);
            return Err(EtcdError::Decode { call: "snapshot", message });
        }
        let dir = parts_dir(prefix, m.at);
        let parts = etcd.range(dir.as_bytes(), Some(&prefix_end(dir.as_bytes())), m.parts as i64 + 1)?;
        let bytes: Vec<u8> = parts.into_iter().flat_map(|kv| kv.value).collect();
        if bytes.len() as u64 == m.bytes && m.parts == m.bytes.div_ceil(PART_BYTES as u64) {
            return Ok(Some((m, bytes)));
        }
        last = Some(m);
    }
    Err(EtcdError::Decode {
        call: "snapshot",
        message: format!("{prefix}/snapshot was replaced five times while read"),
    })
}

/// Writes `state` as the state after record `at` while `guard`'s campaign leads, makes it the
/// newest, and lets go of the records before it and of older snapshots; then asks etcd to
/// forget their old revisions. How many records were let go.
pub fn write(etcd: &Etcd, prefix: &str, guard: &LeaderGuard, at: u64, state: &[u8]) -> Result<u64, AppendError> {
    let before = manifest(etcd, prefix)?.map_or(0, |m| m.at);
    let Some(value) = put_parts(etcd, prefix, at, state, &[guard.holds()])? else {
        return Err(guard.deposed(etcd));
    };
    let dir = parts_dir(prefix, at);
    let then = [
        Op::Put { key: manifest_key(prefix), value, lease: None },
        Op::DeleteRange(record_key(prefix, 0), record_key(prefix, at)),
        Op::DeleteRange(format!("{prefix}/snapshots/").into_bytes(), dir.into_bytes()),
    ];
    let (done, revision) = etcd.txn_revision(&[guard.holds()], &then)?;
    if !done {
        return Err(guard.deposed(etcd));
    }
    // Best effort: a compaction that fails (one already past this revision) loses nothing.
    let _ = etcd.compact(revision);
    Ok(at.saturating_sub(before))
}

/// Only where nothing is written yet (no leader, no record, no snapshot): the state after
/// `at` records and the records after it, in transactions of a hundred keys (moving an
/// embedded store into etcd). Keys written before a failure stay; the prefix is then not empty
/// and a second try is refused, naming what is there.
pub fn seed(etcd: &Etcd, prefix: &str, at: u64, state: Option<&[u8]>, records: &[Vec<u8>]) -> Result<(), EtcdError> {
    let everything = format!("{prefix}/");
    if let Some(kv) = etcd.range(everything.as_bytes(), Some(&prefix_end(everything.as_bytes())), 1)?.first() {
        let message = format!("{prefix} is not empty (it holds {})", String::from_utf8_lossy(&kv.key));
        return Err(EtcdError::Refused { call: "seed", message });
    }
    let manifest = match state {
        Some(state) => put_parts(etcd, prefix, at, state, &[])?,
        None => None,
    };
    let mut ops: Vec<Op> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        ops.push(Op::Put { key: record_key(prefix, at + i as u64), value: r.clone(), lease: None });
        if ops.len() == 100 {
            etcd.txn(&[], &std::mem::take(&mut ops))?;
        }
    }
    etcd.txn(&[], &ops)?;
    // Named last: a reader never finds a snapshot whose records are not all there.
    if let Some(value) = manifest {
        etcd.put(&manifest_key(prefix), &value, None)?;
    }
    Ok(())
}

/// Writes `state` in parts as the snapshot after record `at`, each put only while `when`
/// holds: the manifest that names them (not written yet), or `None` once a put's condition
/// failed.
fn put_parts(etcd: &Etcd, prefix: &str, at: u64, state: &[u8], when: &[Compare]) -> Result<Option<Vec<u8>>, EtcdError> {
    let dir = parts_dir(prefix, at);
    for (k, chunk) in state.chunks(PART_BYTES).enumerate() {
        let put = Op::Put { key: format!("{dir}{k:06}").into_bytes(), value: chunk.to_vec(), lease: None };
        if !etcd.txn(when, &[put])? {
            return Ok(None);
        }
    }
    let m = Manifest { at, parts: state.len().div_ceil(PART_BYTES) as u64, bytes: state.len() as u64 };
    let value = serde_json::to_vec(&m).map_err(|e| EtcdError::Decode { call: "snapshot", message: e.to_string() })?;
    Ok(Some(value))
}
