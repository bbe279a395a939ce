//! `weave serve`: the control plane. Admits real jobs, tells each where to run and gates
//! their phases at run time, on the same placer and dispatcher as the simulator, with every
//! acknowledged input durable in an embedded store.
// The OpenAPI document is one `json!` literal deeper than the default limit allows.
#![recursion_limit = "256"]

pub mod auth;
mod durable;
mod history;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod plane;
pub mod state;
mod status;
pub mod telemetry;
pub mod views;

pub use auth::{Caller, Tenants};
pub use state::{
    Capacity, ConnectionLimits, InputLimits, ServeError, ServerConfig, Shared, DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_JOBS_PER_TENANT, DEFAULT_MIN_FREE_BYTES, DEFAULT_SNAPSHOT_EVERY, DEFAULT_SNAPSHOT_EVERY_BYTES,
    DEFAULT_SNAPSHOT_EVERY_ETCD,
};
pub use status::events_report;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

/// Serves on `listener` until `shutdown` resolves; expires heartbeats in the background.
///
/// Connections are capped ([`ConnectionLimits`]): one past the cap is answered 503 and closed,
/// so a flood of idle or slow clients can never take the file descriptors that answering
/// (and the store) need; a client that does not deliver its headers in time is cut.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = shared.cfg.limits;
    let (rate, reads) = (http::rate_limits(limits.rate), http::rate_limits(limits.read_rate));
    let reaper = shared.clone();
    let limiters: Vec<http::RateLimits> = rate.iter().chain(&reads).cloned().collect();
    let tick = Duration::from_millis(250).min(shared.cfg.heartbeat_timeout / 4).max(Duration::from_millis(10));
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut trims = FreedMemory::new(connections.clone());
    // A replica that lost its leadership stops serving (another may lead now).
    let (deposed_tx, mut deposed) = tokio::sync::oneshot::channel::<()>();
    let mut deposed_tx = Some(deposed_tx);
    tokio::spawn(async move {
        let mut last_sweep = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let r = reaper.clone();
            let leading = tokio::task::spawn_blocking(move || r.keep_leading()).await.unwrap_or(true);
            if !leading {
                if let Some(tx) = deposed_tx.take() {
                    let _ = tx.send(());
                }
                continue;
            }
            let r = reaper.clone();
            // The store's fsync blocks: keep it off the async workers.
            let _ = tokio::task::spawn_blocking(move || {
                r.expire_heartbeats();
                r.expire_notices();
                r.consolidate_if_due();
            })
            .await;
            // Tokens idle long enough to be back at full burst are forgotten.
            if last_sweep.elapsed() > Duration::from_secs(60) {
                for l in &limiters {
                    l.limiter().retain_recent();
                }
                last_sweep = tokio::time::Instant::now();
            }
            if trims.due() {
                let _ = tokio::task::spawn_blocking(release_freed_memory).await;
            }
        }
    });
    let cap = limits.max_connections.unwrap_or_else(default_max_connections).max(1);
    let permits = Arc::new(Semaphore::new(cap));
    let per_address = PerAddress::new(limits.max_connections_per_address.unwrap_or(usize::MAX));
    let app = http::router(shared.clone(), rate, reads);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut lost = false;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
            Ok(()) = &mut deposed => {
                lost = true;
                break;
            }
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            // Out of descriptors or a connection reset before accept: back off, go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(held) = per_address.hold(peer.ip()) else {
            let why = format!("too many open connections from your address (limit {}): close some", per_address.limit);
            tokio::spawn(answer_503(stream, why));
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let why = format!("too many open connections (limit {cap}): try again shortly");
            tokio::spawn(answer_503(stream, why));
            continue;
        };
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        let closed = connections.clone();
        tokio::spawn(async move {
            let _ = conn.await;
            drop((permit, held));
            closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
    }
    drop(listener);
    // Parked long-polls are answered at once ("waiting": the client asks again after the
    // restart) instead of holding the shutdown for their whole wait.
    shared.closing.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.changed.send_modify(|v| *v += 1);
    let _ = tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await;
    // Spans still buffered go out before the process ends (the flush blocks: off the workers).
    if shared.telemetry.is_some() {
        let _ = tokio::task::spawn_blocking(move || shared.telemetry.as_ref().map(|t| t.shutdown())).await;
    }
    if lost {
        let why = "this replica lost its leadership of the replicated log (its lease expired): another replica \
                   serves now; restart this one to stand by";
        return Err(std::io::Error::other(why));
    }
    Ok(())
}

/// When to give freed memory back to the system. glibc keeps what a burst of connections
/// freed (their buffers, about 20 MB after 1,000 at once, measured) until something trims it.
/// The server trims once a burst is over: [`FreedMemory::BURST`] connections or more closed
/// since the last trim and none in the last tick (a trim in the middle of a burst would leave
/// the rest of it kept), at most once per [`FreedMemory::AT_MOST_EVERY`]; and once per
/// [`FreedMemory::ANYWAY_EVERY`] whatever came. A trim walks the heap under the allocator's
/// locks: milliseconds, off the async workers.
struct FreedMemory {
    /// Connections closed, counted by each connection's task as it ends.
    closed: Arc<std::sync::atomic::AtomicUsize>,
    since_trim: usize,
    last: std::time::Instant,
}

impl FreedMemory {
    const BURST: usize = 256;
    const AT_MOST_EVERY: Duration = Duration::from_secs(5);
    const ANYWAY_EVERY: Duration = Duration::from_secs(60);

    fn new(closed: Arc<std::sync::atomic::AtomicUsize>) -> Self {
        FreedMemory { closed, since_trim: 0, last: std::time::Instant::now() }
    }

    /// Whether to trim now (if so, the count starts again). Asked once per tick.
    fn due(&mut self) -> bool {
        let this_tick = self.closed.swap(0, std::sync::atomic::Ordering::Relaxed);
        self.since_trim += this_tick;
        let waited = self.last.elapsed();
        let burst_over = self.since_trim >= Self::BURST && this_tick == 0;
        let due = (burst_over && waited >= Self::AT_MOST_EVERY) || waited >= Self::ANYWAY_EVERY;
        if due {
            (self.since_trim, self.last) = (0, std::time::Instant::now());
        }
        due
    }
}

/// Ctrl-C or SIGTERM: stop accepting, finish what is in flight. (Every acknowledged request is
/// already durable, so a SIGKILL loses nothing either.)
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
    }
}

/// Until `ready` resolves, every connection on `listener` is answered 503 "recovering" (the
/// store is being replayed): clients get a clear answer to retry instead of a refused
/// connection.
pub async fn answer_while_recovering<T>(
    listener: &tokio::net::TcpListener,
    ready: impl std::future::Future<Output = T>,
) -> T {
    answer_while_opening(listener, ready, String::new).await
}

/// [`answer_while_recovering`], the answer saying `why()` when it says something (a standby
/// replica names the active one).
pub async fn answer_while_opening<T>(
    listener: &tokio::net::TcpListener,
    ready: impl std::future::Future<Output = T>,
    why: impl Fn() -> String,
) -> T {
    let mut ready = std::pin::pin!(ready);
    loop {
        tokio::select! {
            out = &mut ready => return out,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let mut why = why();
                    if why.is_empty() {
                        why = "recovering: the server is replaying its store; try again shortly".to_string();
                    }
                    tokio::spawn(answer_503(stream, why));
                }
            }
        }
    }
}

/// A connection the server will not serve now: a short 503 with `why`, then close. What the
/// client already sent is read first, so the answer is not lost to a reset.
/// Open connections per client address (only counts: which address comes first decides
/// nothing, so a hash map is fine).
#[derive(Clone)]
struct PerAddress {
    limit: usize,
    open: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

/// One connection counted against its address until dropped.
struct Held(PerAddress, std::net::IpAddr);

impl PerAddress {
    fn new(limit: usize) -> PerAddress {
        PerAddress { limit, open: Default::default() }
    }

    fn hold(&self, ip: std::net::IpAddr) -> Option<Held> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Held(self.clone(), ip))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.0.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

async fn answer_503(mut stream: tokio::net::TcpStream, why: String) {
    use tokio::io::AsyncReadExt;
    let mut scratch = [0u8; 8192];
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut scratch)).await;
    let body = serde_json::json!({ "error": why }).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all(answer.as_bytes())).await;
    let _ = stream.shutdown().await;
}

/// Descriptors kept back from connections: the store, the listener, logs, the exporter.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The connection cap when none is configured: the open-file limit (raised to its hard limit
/// first, see [`raise_open_file_limit`]) less a reserve.
pub fn default_max_connections() -> usize {
    let limit = open_file_limit().unwrap_or(1024);
    limit.saturating_sub(RESERVED_DESCRIPTORS).clamp(64, 1 << 20) as usize
}

fn open_file_limit() -> Option<u64> {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0;
    ok.then_some(l.rlim_cur)
}

/// Open files a server asks for when it may raise its hard limit (root).
const WANTED_OPEN_FILES: u64 = 65_536;

/// Raises this process's open-file limit: the hard limit to 65,536 where allowed (root),
/// then the soft limit to the hard one (a server holding many connections needs them);
/// returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return None;
        }
        if l.rlim_max < WANTED_OPEN_FILES {
            let wanted = WANTED_OPEN_FILES as libc::rlim_t;
            let raised = libc::rlimit { rlim_cur: wanted, rlim_max: wanted };
            // Refused without the privilege: keep the hard limit there is.
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                l = raised;
            }
        }
        if l.rlim_cur < l.rlim_max {
            let raised = libc::rlimit { rlim_cur: l.rlim_max, rlim_max: l.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                l = raised;
            }
        }
    }
    Some(l.rlim_cur)
}

/// Allocations from this size on get their own mapping, returned to the system when freed.
const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;
/// Allocator arenas: a few, however many threads the blocking pool has started.
const MALLOC_ARENAS: i32 = 2;

/// Drops `garbage` on a thread of its own (started once), so that freeing a large structure
/// never holds the caller (and the plane's lock) up. Without that thread it is dropped here.
pub fn drop_elsewhere<T: Send + 'static>(garbage: T) {
    use std::sync::{mpsc, OnceLock};
    type Garbage = Box<dyn Send>;
    static BIN: OnceLock<Option<mpsc::Sender<Garbage>>> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Garbage>();
        let spawned =
            std::thread::Builder::new().name("weave-drop".into()).spawn(move || rx.into_iter().for_each(drop));
        spawned.ok().map(|_| tx)
    });
    if let Some(tx) = bin {
        // A send that fails hands the garbage back in its error, dropped here.
        let _ = tx.send(Box::new(garbage));
    }
}

/// Gives the memory the allocator holds free back to the system (glibc keeps freed pages in its
/// arenas otherwise). Called after a snapshot's frozen copy of the plane is dropped, with the
/// entries the live plane copied while it was written (before the copy was frozen, each
/// snapshot rebuilt a whole second plane, and without this the process kept that much more).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system, under the allocator's locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Lowers the calling thread's CPU priority to the lowest (Linux; elsewhere nothing), for work
/// no request waits for: a snapshot's encoding is a CPU-bound pass of hundreds of
/// milliseconds, and at normal priority on two cores it made durable requests queue for the
/// CPU (`weave bench serve`: their p99 during snapshots about 4x that at other times, on
/// tmpfs as on disk). At the lowest priority a woken request thread takes the core at once.
pub fn lower_this_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority only read and set this thread's scheduling attributes.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// Keeps a long-running server's resident memory at its live heap (glibc): a fixed mmap
/// threshold (glibc otherwise raises it to the largest block freed so far, up to 32 MiB, after
/// which big buffers, such as a page of events, are carved from the arenas and their pages
/// stay with the process) and few arenas (each thread the blocking pool starts would otherwise
/// get one, up to eight per core, each keeping its own freed pages). Measured by `weave bench
/// soak`: see the README. Best effort: elsewhere it does nothing.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters (under its own lock); called at start,
    // before the runtime starts the threads it is meant for.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}
