//! The transfer engine: executes a weight-sync plan (`weave_model::syncplan`) between
//! processes over TCP.
//!
//! - Senders (training GPUs) serve byte ranges of the model file of a version (`serve`).
//! - Each receiver (rollout GPU) fetches its plan's ranges (`fetch`), stage 1 from senders and
//!   stage 2 from the peers that hold them, each range as one stream over its own connection;
//!   a dropped connection is retried and resumes at the last completed chunk; every piece of
//!   a range is checked against its SHA-256 as it lands before it counts, and is at once
//!   served to peers, so stage 2 forwards a shard while stage 1 still brings it (the stages
//!   are pipelined piece by piece, as the plan's prediction assumes; the smaller the piece,
//!   the shorter the tail after the last one crosses).
//! - Only when every byte is verified is the version published: the staging file is synced
//!   and renamed into place, then the `CURRENT` pointer is replaced by rename. A reader never
//!   sees a partially written version as complete.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use thiserror::Error;
use weave_model::syncplan::Plan;

mod fetch;
pub mod process;
mod serve;

pub use fetch::{receive, FetchStats};
pub use serve::{serve, Fault, Source};

/// Bytes per read and write: the unit a dropped connection resumes at.
pub const CHUNK: u64 = 1 << 20;
/// The largest piece: the unit of checking and of forwarding to peers.
pub const MAX_PIECE: u64 = 8 * CHUNK;

/// The piece size for a model: about a thousandth of it in whole chunks, between one chunk and
/// `MAX_PIECE`. Small pieces shorten the pipeline's tail (a peer can forward a piece only
/// once all of it is verified); a bound on their number keeps the manifest small.
pub fn piece_bytes(model_bytes: u64) -> u64 {
    (model_bytes / 1024 / CHUNK * CHUNK).clamp(CHUNK, MAX_PIECE)
}

fn legacy_piece() -> u64 {
    MAX_PIECE
}

/// The pieces of a transfer's byte range, in order.
pub fn pieces(offset: u64, len: u64, piece: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(piece)).map(move |i| (offset + i * piece, piece.min(len - i * piece)))
}

#[derive(Debug, Error)]
pub enum SyncError {
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("peer {peer}: {message}")]
    Peer { peer: SocketAddr, message: String },
    #[error("range [{offset}, +{len}) failed its checksum {attempts} times")]
    Checksum { offset: u64, len: u64, attempts: u32 },
    #[error("manifest: {0}")]
    Manifest(String),
    /// A process of `weave sync` could not start (a missing file, a port in use).
    #[error("{0}")]
    Setup(String),
}

/// Everything the processes of one sync need to agree on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u64,
    pub plan: Plan,
    /// Bytes per checked piece (manifests written before it was a field used 8 MiB).
    #[serde(default = "legacy_piece")]
    pub piece: u64,
    /// SHA-256 (hex) of every piece of every range the plan moves, keyed by "offset:len".
    pub checksums: BTreeMap<String, String>,
    pub train_addrs: Vec<SocketAddr>,
    pub rollout_addrs: Vec<SocketAddr>,
}

pub fn range_key(offset: u64, len: u64) -> String {
    format!("{offset}:{len}")
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 of a byte range of a file.
pub fn sha256_range(path: &Path, offset: u64, len: u64) -> io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut h = Sha256::new();
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than the range"));
        }
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(hex(&h.finalize()))
}

impl Manifest {
    /// Builds the manifest for `plan`, computing checksums from the model file.
    pub fn build(
        version: u64,
        plan: Plan,
        model: &Path,
        train_addrs: Vec<SocketAddr>,
        rollout_addrs: Vec<SocketAddr>,
    ) -> io::Result<Manifest> {
        let piece = piece_bytes(plan.model_bytes);
        let mut checksums = BTreeMap::new();
        for t in &plan.transfers {
            for (o, l) in pieces(t.offset, t.len, piece) {
                if let std::collections::btree_map::Entry::Vacant(e) = checksums.entry(range_key(o, l)) {
                    e.insert(sha256_range(model, o, l)?);
                }
            }
        }
        Ok(Manifest { version, plan, piece, checksums, train_addrs, rollout_addrs })
    }
}

/// Verified byte ranges of a staging file, shared with its server.
pub type Verified = Arc<Mutex<Vec<(u64, u64)>>>;

/// A receiver's staging file and what of it is verified (clones share the verified set).
#[derive(Clone)]
pub struct Staging {
    pub path: PathBuf,
    pub verified: Verified,
    version: u64,
}

impl Staging {
    pub fn create(dir: &Path, version: u64, bytes: u64) -> io::Result<Staging> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("v{version}.partial"));
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
        f.set_len(bytes)?;
        Ok(Staging { path, verified: Arc::new(Mutex::new(Vec::new())), version })
    }

    /// What this receiver may serve its peers.
    pub fn source(&self) -> Source {
        Source { path: self.path.clone(), version: self.version, verified: Some(self.verified.clone()) }
    }
}

/// Atomically publishes a fully verified staging file as `v<version>.bin` and points
/// `CURRENT` at it. Refuses if any byte is unverified.
pub fn publish(staging: &Staging, dir: &Path, bytes: u64) -> Result<PathBuf, SyncError> {
    let mut ranges = staging.verified.lock().unwrap_or_else(|p| p.into_inner()).clone();
    ranges.sort_unstable();
    let mut at = 0;
    for (o, l) in ranges {
        if o > at {
            break;
        }
        at = at.max(o + l);
    }
    if at < bytes {
        return Err(SyncError::Manifest(format!("refusing to publish: only {at} of {bytes} bytes verified")));
    }
    std::fs::File::open(&staging.path)?.sync_all()?;
    let final_path = dir.join(format!("v{}.bin", staging.version));
    // A hard link publishes the complete file under its final name in one step, while the
    // staging name keeps serving peers that still fetch from it.
    let _ = std::fs::remove_file(&final_path);
    std::fs::hard_link(&staging.path, &final_path)?;
    let tmp = dir.join("CURRENT.tmp");
    std::fs::write(&tmp, format!("v{}.bin\n", staging.version))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join("CURRENT"))?;
    Ok(final_path)
}

/// The published version in `dir`, if any.
pub fn current(dir: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(dir.join("CURRENT")).ok()?;
    Some(dir.join(name.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_tile_a_range_exactly() {
        const PIECE: u64 = 3 * CHUNK;
        for (offset, len) in [(0, 1), (5, PIECE), (7, PIECE + 1), (PIECE * 3, 5 * PIECE / 2)] {
            let p: Vec<(u64, u64)> = pieces(offset, len, PIECE).collect();
            assert_eq!(p[0].0, offset);
            assert!(p.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{p:?}");
            assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), len);
            assert!(p.iter().all(|x| x.1 > 0 && x.1 <= PIECE));
        }
        assert_eq!(pieces(9, 0, PIECE).count(), 0);
    }
}
