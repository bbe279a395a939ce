//! The serving side: senders serve their whole model file, receivers the pieces of their
//! staging file they have verified. One request per line, `FETCH <version> <offset> <len>`,
//! answered `OK <len>` and then the bytes as a stream, chunk by chunk; a chunk not verified
//! here yet is waited for (so a peer's stage 2 follows this receiver's stage 1 piece by
//! piece without asking again), or `ERR <message>`.

use crate::{Verified, CHUNK};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// How long a request waits for a chunk to be verified here before the connection is closed
/// (the receiver then reconnects and asks again).
const CHUNK_WAIT: Duration = Duration::from_secs(60);

/// What a server can hand out: a whole file (senders) or the verified part of a staging file.
#[derive(Clone)]
pub struct Source {
    pub(crate) path: PathBuf,
    pub(crate) version: u64,
    /// `None`: everything is available; else the verified ranges.
    pub(crate) verified: Option<Verified>,
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

    /// Waits until `[offset, +len)` is verified here; false after `CHUNK_WAIT`.
    async fn wait_available(&self, offset: u64, len: u64) -> bool {
        let deadline = Instant::now() + CHUNK_WAIT;
        while !self.available(offset, len) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }
}

/// Fault injection, once, after this many payload bytes have been sent: drop the connection
/// half-way through a chunk, or send a chunk with one byte flipped.
#[derive(Clone, Default)]
pub struct Fault {
    after: Option<u64>,
    corrupt: bool,
    sent: Arc<AtomicU64>,
    fired: Arc<AtomicBool>,
}

impl Fault {
    pub fn drop_after(bytes: u64) -> Fault {
        Fault { after: Some(bytes), ..Fault::default() }
    }

    pub fn corrupt_after(bytes: u64) -> Fault {
        Fault { after: Some(bytes), corrupt: true, ..Fault::default() }
    }

    /// Counts `n` more bytes about to be sent; true once, when they cross the limit.
    fn fires(&self, n: u64) -> bool {
        let Some(after) = self.after else { return false };
        let before = self.sent.fetch_add(n, Ordering::SeqCst);
        before + n > after && !self.fired.swap(true, Ordering::SeqCst)
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

fn parse(line: &str) -> Option<(u64, u64, u64)> {
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["FETCH", v, o, l] => Some((v.parse().ok()?, o.parse().ok()?, l.parse().ok()?)),
        _ => None,
    }
}

async fn handle(sock: TcpStream, source: Source, fault: Fault) -> io::Result<()> {
    sock.set_nodelay(true)?;
    let (r, mut w) = sock.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut file = tokio::fs::File::open(&source.path).await?;
    // One buffer per connection: a fresh allocation per chunk costs a mapping and page faults.
    let mut buf = vec![0u8; CHUNK as usize];
    while let Some(line) = lines.next_line().await? {
        let Some((version, offset, len)) = parse(&line) else {
            w.write_all(b"ERR bad request\n").await?;
            continue;
        };
        if version != source.version {
            w.write_all(format!("ERR version {version} not served (have {})\n", source.version).as_bytes()).await?;
            continue;
        }
        w.write_all(format!("OK {len}\n").as_bytes()).await?;
        let mut at = offset;
        while at < offset + len {
            let n = CHUNK.min(offset + len - at) as usize;
            if !source.wait_available(at, n as u64).await {
                return Ok(());
            }
            file.seek(io::SeekFrom::Start(at)).await?;
            file.read_exact(&mut buf[..n]).await?;
            if fault.fires(n as u64) {
                if !fault.corrupt {
                    w.write_all(&buf[..n / 2]).await?;
                    return Ok(());
                }
                buf[n / 2] ^= 0x20;
            }
            w.write_all(&buf[..n]).await?;
            at += n as u64;
        }
    }
    Ok(())
}
