//! The transfer engine: executes a weight-sync plan (`weave_model::syncplan`) between
//! processes over TCP.
//!
//! - Senders (training GPUs) serve byte ranges of the model file of a version.
//! - Each receiver (rollout GPU) fetches its plan's ranges, stage 1 from senders and stage 2
//!   from the peers that hold them, in chunks over parallel connections; a dropped connection
//!   is retried and resumes at the last completed chunk; every piece (8 MiB) of a shard is
//!   checked against its SHA-256 before it counts; meanwhile the receiver serves the pieces
//!   it has verified to its peers, so stage 2 forwards a shard while stage 1 still brings it
//!   (the stages are pipelined piece by piece, as the plan's prediction assumes).
//! - Only when every byte is verified is the version published: the staging file is synced
//!   and renamed into place, then the `CURRENT` pointer is replaced by rename. A reader never
//!   sees a partially written version as complete.
//!
//! Wire protocol, one request per line: `FETCH <version> <offset> <len>`; answers
//! `OK <len>` followed by the bytes, `WAIT` (not verified here yet: ask again), or
//! `ERR <message>`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use weave_model::syncplan::{Endpoint, Plan};

/// Bytes per request.
pub const CHUNK: u64 = 1 << 20;
/// Bytes per verified piece: the unit of checking and of forwarding to peers.
pub const PIECE: u64 = 8 * CHUNK;

/// The pieces of a transfer's byte range, in order.
pub fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(PIECE)).map(move |i| (offset + i * PIECE, PIECE.min(len - i * PIECE)))
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
}

/// Everything the processes of one sync need to agree on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u64,
    pub plan: Plan,
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
        let mut checksums = BTreeMap::new();
        for t in &plan.transfers {
            for (o, l) in pieces(t.offset, t.len) {
                if let std::collections::btree_map::Entry::Vacant(e) = checksums.entry(range_key(o, l)) {
                    e.insert(sha256_range(model, o, l)?);
                }
            }
        }
        Ok(Manifest { version, plan, checksums, train_addrs, rollout_addrs })
    }
}

/// Verified byte ranges of a staging file, shared with its server.
pub type Verified = Arc<Mutex<Vec<(u64, u64)>>>;

/// What a server can hand out: a whole file (senders) or the verified part of a staging file.
#[derive(Clone)]
pub struct Source {
    path: PathBuf,
    version: u64,
    /// `None`: everything is available; else the verified ranges.
    verified: Option<Verified>,
}

impl Source {
    pub fn whole(path: PathBuf, version: u64) -> Source {
        Source { path, version, verified: None }
    }

    fn available(&self, offset: u64, len: u64) -> bool {
        match &self.verified {
            None => true,
            Some(v) => {
                v.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|(o, l)| *o <= offset && offset + len <= o + l)
            }
        }
    }
}

/// Fault injection: drop a connection once, after this many payload bytes have been sent.
#[derive(Clone, Default)]
pub struct Fault {
    after: Option<u64>,
    sent: Arc<AtomicU64>,
    fired: Arc<std::sync::atomic::AtomicBool>,
}

impl Fault {
    pub fn drop_after(bytes: u64) -> Fault {
        Fault { after: Some(bytes), ..Fault::default() }
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

/// Serves `source` on `listener` forever.
pub async fn serve(listener: TcpListener, source: Source, fault: Fault) -> io::Result<()> {
    loop {
        let (sock, _) = listener.accept().await?;
        let (source, fault) = (source.clone(), fault.clone());
        tokio::spawn(async move {
            let _ = handle(sock, source, fault).await;
        });
    }
}

async fn handle(sock: TcpStream, source: Source, fault: Fault) -> io::Result<()> {
    sock.set_nodelay(true)?;
    let (r, mut w) = sock.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut file = tokio::fs::File::open(&source.path).await?;
    while let Some(line) = lines.next_line().await? {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let parsed = match parts.as_slice() {
            ["FETCH", v, o, l] => v.parse::<u64>().ok().zip(o.parse::<u64>().ok()).zip(l.parse::<u64>().ok()),
            _ => None,
        };
        let Some(((version, offset), len)) = parsed else {
            w.write_all(b"ERR bad request\n").await?;
            continue;
        };
        if version != source.version {
            w.write_all(format!("ERR version {version} not served (have {})\n", source.version).as_bytes()).await?;
            continue;
        }
        if !source.available(offset, len) {
            w.write_all(b"WAIT\n").await?;
            continue;
        }
        use tokio::io::AsyncSeekExt;
        file.seek(io::SeekFrom::Start(offset)).await?;
        let mut buf = vec![0u8; len as usize];
        file.read_exact(&mut buf).await?;
        w.write_all(format!("OK {len}\n").as_bytes()).await?;
        if let Some(after) = fault.after {
            let before = fault.sent.fetch_add(len, Ordering::SeqCst);
            if before + len > after && !fault.fired.swap(true, Ordering::SeqCst) {
                // Send half the chunk, then drop the connection.
                w.write_all(&buf[..buf.len() / 2]).await?;
                return Ok(());
            }
        }
        w.write_all(&buf).await?;
    }
    Ok(())
}

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

/// Statistics of one receiver's run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FetchStats {
    pub bytes: u64,
    pub reconnects: u32,
    pub checksum_retries: u32,
}

/// Fetches one range into the staging file piece by piece (each chunk by chunk, resuming
/// after dropped connections), verifying and publishing each piece to peers as it lands.
async fn fetch_range(
    peer: SocketAddr,
    version: u64,
    range: (u64, u64),
    checksums: &BTreeMap<String, String>,
    staging: &Staging,
    stats: &Mutex<FetchStats>,
) -> Result<(), SyncError> {
    for (offset, len) in pieces(range.0, range.1) {
        let sha = checksums
            .get(&range_key(offset, len))
            .ok_or_else(|| SyncError::Manifest(format!("no checksum for [{offset}, +{len})")))?;
        fetch_piece(peer, version, offset, len, sha, staging, stats).await?;
    }
    Ok(())
}

async fn fetch_piece(
    peer: SocketAddr,
    version: u64,
    offset: u64,
    len: u64,
    sha: &str,
    staging: &Staging,
    stats: &Mutex<FetchStats>,
) -> Result<(), SyncError> {
    const ATTEMPTS: u32 = 5;
    for attempt in 1..=ATTEMPTS {
        let mut done = 0u64;
        let mut failures = 0u32;
        while done < len {
            match fetch_chunks(peer, version, offset + done, len - done, staging, &mut done).await {
                Ok(()) => {}
                Err(e) => {
                    failures += 1;
                    stats.lock().unwrap_or_else(|p| p.into_inner()).reconnects += 1;
                    if failures > 20 {
                        return Err(SyncError::Peer {
                            peer,
                            message: format!("giving up after {failures} failed connections: {e}"),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20 * failures as u64)).await;
                }
            }
        }
        if sha256_range(&staging.path, offset, len)? == sha {
            staging.verified.lock().unwrap_or_else(|p| p.into_inner()).push((offset, len));
            stats.lock().unwrap_or_else(|p| p.into_inner()).bytes += len;
            return Ok(());
        }
        stats.lock().unwrap_or_else(|p| p.into_inner()).checksum_retries += 1;
        if attempt == ATTEMPTS {
            return Err(SyncError::Checksum { offset, len, attempts: ATTEMPTS });
        }
    }
    unreachable!()
}

/// One connection's worth of chunks; advances `done` as chunks land.
async fn fetch_chunks(
    peer: SocketAddr,
    version: u64,
    offset: u64,
    len: u64,
    staging: &Staging,
    done: &mut u64,
) -> Result<(), SyncError> {
    use tokio::io::AsyncSeekExt;
    let sock = TcpStream::connect(peer).await?;
    sock.set_nodelay(true)?;
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let mut file = tokio::fs::OpenOptions::new().write(true).open(&staging.path).await?;
    let mut at = 0u64;
    while at < len {
        let n = CHUNK.min(len - at);
        w.write_all(format!("FETCH {version} {} {n}\n", offset + at).as_bytes()).await?;
        let mut header = String::new();
        if r.read_line(&mut header).await? == 0 {
            return Err(SyncError::Peer { peer, message: "connection closed".into() });
        }
        let header = header.trim();
        if header == "WAIT" {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let Some(got) = header.strip_prefix("OK ").and_then(|l| l.parse::<u64>().ok()) else {
            return Err(SyncError::Peer { peer, message: header.to_string() });
        };
        if got != n {
            return Err(SyncError::Peer { peer, message: format!("asked {n} bytes, offered {got}") });
        }
        let mut buf = vec![0u8; n as usize];
        r.read_exact(&mut buf).await?;
        file.seek(io::SeekFrom::Start(offset + at)).await?;
        file.write_all(&buf).await?;
        at += n;
        *done += n;
    }
    file.flush().await?;
    Ok(())
}

fn addr(m: &Manifest, e: Endpoint) -> Result<SocketAddr, SyncError> {
    let (list, i) = match e {
        Endpoint::Train(i) => (&m.train_addrs, i),
        Endpoint::Rollout(i) => (&m.rollout_addrs, i),
    };
    list.get(i as usize).copied().ok_or_else(|| SyncError::Manifest(format!("no address for {e:?}")))
}

/// Executes receiver `me`'s part of the plan: every range on its own connection, all at
/// once; a stage-2 range waits at its peer piece by piece (WAIT) until the peer has verified
/// that piece from stage 1, so the stages overlap. Then publishes the version into `dir`.
pub async fn receive(m: &Manifest, me: u32, staging: &Staging, dir: &Path) -> Result<FetchStats, SyncError> {
    let stats = Arc::new(Mutex::new(FetchStats::default()));
    let checksums = Arc::new(m.checksums.clone());
    let mut tasks = Vec::new();
    // Stage 1 first, so its connections are up before stage 2 starts asking.
    for stage in [1u8, 2] {
        for t in m.plan.transfers.iter().filter(|t| t.stage == stage && t.to == Endpoint::Rollout(me)) {
            let peer = addr(m, t.from)?;
            if pieces(t.offset, t.len).any(|(o, l)| !checksums.contains_key(&range_key(o, l))) {
                return Err(SyncError::Manifest(format!("no checksums for [{}, +{})", t.offset, t.len)));
            }
            let (version, range) = (m.version, (t.offset, t.len));
            let (stats, checksums) = (stats.clone(), checksums.clone());
            let staging = staging.clone();
            tasks.push(tokio::spawn(
                async move { fetch_range(peer, version, range, &checksums, &staging, &stats).await },
            ));
        }
    }
    for t in tasks {
        t.await.map_err(|e| SyncError::Io(io::Error::other(e.to_string())))??;
    }
    publish(staging, dir, m.plan.model_bytes)?;
    let s = stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(s)
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
        for (offset, len) in [(0, 1), (5, PIECE), (7, PIECE + 1), (PIECE * 3, 5 * PIECE / 2)] {
            let p: Vec<(u64, u64)> = pieces(offset, len).collect();
            assert_eq!(p[0].0, offset);
            assert!(p.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{p:?}");
            assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), len);
            assert!(p.iter().all(|x| x.1 > 0 && x.1 <= PIECE));
        }
        assert_eq!(pieces(9, 0).count(), 0);
    }
}
