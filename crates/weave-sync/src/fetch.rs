//! The receiving side: a receiver fetches its plan's ranges, stage 1 from senders and stage 2
//! from the peers that hold them, each range as one stream on its own connection; every piece
//! is hashed as it lands and counts only when it matches its checksum.

use crate::{hex, pieces, range_key, Manifest, Staging, SyncError, CHUNK};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use weave_model::syncplan::Endpoint;

/// Statistics of one receiver's run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FetchStats {
    pub bytes: u64,
    pub reconnects: u32,
    pub checksum_retries: u32,
    /// Bytes this receiver fetched in stage 1 (across the slow link) and the seconds from the
    /// start of `receive` until the last of them was verified.
    pub stage1_bytes: u64,
    pub stage1_seconds: f64,
}

/// Checksum failures of one piece before the range is given up.
const ATTEMPTS: u32 = 5;
/// Failed connections in a row before the range is given up.
const MAX_FAILURES: u32 = 20;

/// One range on its way in: where it comes from, how far it got, the piece being hashed.
struct Range<'a> {
    peer: SocketAddr,
    version: u64,
    end: u64,
    piece: u64,
    checksums: &'a BTreeMap<String, String>,
    staging: &'a Staging,
    stats: &'a Mutex<FetchStats>,
    file: std::fs::File,
    conn: Option<(BufReader<OwnedReadHalf>, OwnedWriteHalf)>,
    buf: Vec<u8>,
}

impl Range<'_> {
    /// Opens a connection and asks for everything from `at` to the end.
    async fn request(&mut self, at: u64) -> Result<(), SyncError> {
        let peer = self.peer;
        let sock = TcpStream::connect(peer).await?;
        sock.set_nodelay(true)?;
        let (r, mut w) = sock.into_split();
        let mut r = BufReader::new(r);
        let len = self.end - at;
        w.write_all(format!("FETCH {} {at} {len}\n", self.version).as_bytes()).await?;
        let mut header = String::new();
        if r.read_line(&mut header).await? == 0 {
            return Err(SyncError::Peer { peer, message: "connection closed".into() });
        }
        match header.trim().strip_prefix("OK ").and_then(|l| l.parse::<u64>().ok()) {
            Some(got) if got == len => {}
            Some(got) => return Err(SyncError::Peer { peer, message: format!("asked {len} bytes, offered {got}") }),
            None => return Err(SyncError::Peer { peer, message: header.trim().to_string() }),
        }
        self.conn = Some((r, w));
        Ok(())
    }

    /// Reads the next `n` bytes of the stream into the staging file at `at`, and the hash.
    async fn chunk(&mut self, at: u64, n: usize, hash: &mut Sha256) -> Result<(), SyncError> {
        use std::os::unix::fs::FileExt;
        if self.conn.is_none() {
            self.request(at).await?;
        }
        let Some((r, _)) = self.conn.as_mut() else { unreachable!("requested above") };
        r.read_exact(&mut self.buf[..n]).await?;
        // A positional write to the page cache: brief, and no copy through a blocking pool.
        self.file.write_all_at(&self.buf[..n], at)?;
        hash.update(&self.buf[..n]);
        Ok(())
    }

    /// Fetches one piece: a dropped connection resumes at the last whole chunk (the hash
    /// state is kept), a checksum mismatch fetches the piece again on a new connection.
    async fn piece(&mut self, offset: u64, len: u64) -> Result<(), SyncError> {
        let sha = self
            .checksums
            .get(&range_key(offset, len))
            .ok_or_else(|| SyncError::Manifest(format!("no checksum for [{offset}, +{len})")))?;
        for _ in 0..ATTEMPTS {
            let mut hash = Sha256::new();
            let (mut done, mut failures) = (0u64, 0u32);
            while done < len {
                let n = CHUNK.min(len - done) as usize;
                match self.chunk(offset + done, n, &mut hash).await {
                    Ok(()) => done += n as u64,
                    Err(e) => {
                        self.conn = None;
                        failures += 1;
                        self.stats.lock().unwrap_or_else(|p| p.into_inner()).reconnects += 1;
                        if failures > MAX_FAILURES {
                            let message = format!("giving up after {failures} failed connections: {e}");
                            return Err(SyncError::Peer { peer: self.peer, message });
                        }
                        tokio::time::sleep(Duration::from_millis(20 * failures as u64)).await;
                    }
                }
            }
            if hex(&hash.finalize()) == *sha {
                self.staging.verified.lock().unwrap_or_else(|p| p.into_inner()).push((offset, len));
                self.stats.lock().unwrap_or_else(|p| p.into_inner()).bytes += len;
                return Ok(());
            }
            self.stats.lock().unwrap_or_else(|p| p.into_inner()).checksum_retries += 1;
            // The stream runs on past the bad piece: start again at its first byte.
            self.conn = None;
        }
        Err(SyncError::Checksum { offset, len, attempts: ATTEMPTS })
    }
}

/// Fetches one range into the staging file as one stream (reopened after a drop), verifying
/// each piece as it lands and publishing it to peers at once.
async fn fetch_range(
    peer: SocketAddr,
    m: &Manifest,
    range: (u64, u64),
    checksums: &BTreeMap<String, String>,
    staging: &Staging,
    stats: &Mutex<FetchStats>,
) -> Result<(), SyncError> {
    let file = std::fs::OpenOptions::new().write(true).open(&staging.path)?;
    let mut r = Range {
        peer,
        version: m.version,
        end: range.0 + range.1,
        piece: m.piece,
        checksums,
        staging,
        stats,
        file,
        conn: None,
        buf: vec![0u8; CHUNK as usize],
    };
    for (offset, len) in pieces(range.0, range.1, r.piece) {
        r.piece(offset, len).await?;
    }
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
/// once; a stage-2 range streams from its peer as fast as the peer verifies its stage-1
/// pieces, so the stages overlap. Then publishes the version into `dir`.
pub async fn receive(m: &Manifest, me: u32, staging: &Staging, dir: &Path) -> Result<FetchStats, SyncError> {
    let start = std::time::Instant::now();
    let stats = Arc::new(Mutex::new(FetchStats::default()));
    let checksums = Arc::new(m.checksums.clone());
    let manifest = Arc::new(m.clone());
    let mut tasks = [Vec::new(), Vec::new()];
    // Stage 1 first, so its connections are up before stage 2 starts asking.
    for (stage, tasks) in [1u8, 2].into_iter().zip(&mut tasks) {
        for t in m.plan.transfers.iter().filter(|t| t.stage == stage && t.to == Endpoint::Rollout(me)) {
            let peer = addr(m, t.from)?;
            if pieces(t.offset, t.len, m.piece).any(|(o, l)| !checksums.contains_key(&range_key(o, l))) {
                return Err(SyncError::Manifest(format!("no checksums for [{}, +{})", t.offset, t.len)));
            }
            let range = (t.offset, t.len);
            let (stats, checksums, manifest) = (stats.clone(), checksums.clone(), manifest.clone());
            let staging = staging.clone();
            tasks.push(tokio::spawn(
                async move { fetch_range(peer, &manifest, range, &checksums, &staging, &stats).await },
            ));
        }
    }
    let [first, second] = tasks;
    for t in first {
        t.await.map_err(|e| SyncError::Io(io::Error::other(e.to_string())))??;
    }
    {
        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
        s.stage1_bytes =
            m.plan.transfers.iter().filter(|t| t.stage == 1 && t.to == Endpoint::Rollout(me)).map(|t| t.len).sum();
        s.stage1_seconds = start.elapsed().as_secs_f64();
    }
    for t in second {
        t.await.map_err(|e| SyncError::Io(io::Error::other(e.to_string())))??;
    }
    crate::publish(staging, dir, m.plan.model_bytes)?;
    let s = stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(s)
}
