//! The server's shared state: the plane, its durable store, the clock and the change signal.
//! Every mutation goes check -> append (durable) -> apply, under one lock, so what a client
//! was told succeeded is on disk and nothing half-done is ever visible.

use crate::auth::JobTokens;
use crate::plane::{JobState, Plane, PlaneError, Record};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use thiserror::Error;
use tokio::sync::watch;
use weave_core::Micros;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_store::{Store, StoreError};

mod placement_record;
use crate::durable::Durable;
pub use crate::limits::InputLimits;
use placement_record::{check_placement, record_placement};
mod config;
pub mod replicated;
pub use config::*;

/// Free and total bytes of the volume that holds `path` (`None` where it cannot be asked).
fn volume_space(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `s` a writable statvfs the call fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let unit = s.f_frsize as u64;
    Some((s.f_bavail as u64 * unit, s.f_blocks as u64 * unit))
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Plane(#[from] PlaneError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("recovering from the store: record {index}: {error}")]
    Recovery { index: usize, error: PlaneError },
    #[error("recovering from the store: the snapshot before record {at}: {message} (see `weave store verify`)")]
    Snapshot { at: u64, message: String },
    #[error("{path}: {message}")]
    Placement { path: String, message: String },
    /// etcd refused or could not take the write (no quorum, deposed): nothing was
    /// acknowledged.
    #[error("the replicated log: {0}")]
    Replicated(String),
}

impl From<crate::durable::NotWritten> for ServeError {
    fn from(e: crate::durable::NotWritten) -> ServeError {
        match e {
            crate::durable::NotWritten::Store(s) => ServeError::Store(s),
            crate::durable::NotWritten::Replicated(r) => ServeError::Replicated(r),
        }
    }
}

/// A plane configured as `cfg` says, with no state yet.
fn configured_plane(cfg: &ServerConfig) -> Plane {
    let mut placer = PlacerConfig::for_cluster(&cfg.cluster, PlacePolicy::Weave, true, true, 0);
    placer.capacity = match cfg.capacity {
        Capacity::Elastic => None,
        Capacity::Fixed => Some((cfg.cluster.rollout.nodes, cfg.cluster.training.nodes)),
        Capacity::Recorded => Some((0, 0)),
    };
    let fixed = placer.capacity.is_some();
    let mut plane =
        Plane::new(cfg.cluster.clone(), placer).with_slo_risk(cfg.placement.slo_risk).with_retention(cfg.retention);
    if cfg.placement.consolidate {
        plane = plane.with_consolidation(Default::default());
    }
    if cfg.placement.lending {
        plane = plane.with_lending();
    }
    // Quotas mean something only where the pools are fixed.
    if let (Some(policy), true) = (cfg.tenants.share_policy(), fixed) {
        plane = plane.with_share(policy);
    }
    plane
}

/// The plane the store's snapshot and the records after it make (at start).
fn rebuild(cfg: &ServerConfig, loaded: weave_store::Loaded<Record>) -> Result<Plane, ServeError> {
    let mut plane = configured_plane(cfg);
    let base = loaded.snapshot.as_ref().map_or(0, |(at, _)| *at);
    if let Some((at, bytes)) = loaded.snapshot {
        plane = plane.restore(&bytes).map_err(|e| ServeError::Snapshot { at, message: e.to_string() })?;
    }
    for (i, r) in loaded.records.iter().enumerate() {
        let index = base as usize + i;
        plane.apply(r).map_err(|error| ServeError::Recovery { index, error })?;
    }
    Ok(plane)
}

pub struct Inner {
    pub plane: Plane,
    /// Appended to with the plane's lock released (see [`Shared::commit`]): locked after
    /// `inner` when both are held, never before it.
    store: Arc<Mutex<Durable>>,
    /// Last heartbeat (or admission / restart) per running job.
    pub heartbeats: BTreeMap<String, Instant>,
    /// The plane's events as readers take them out of the lock.
    pub history: crate::history::History,
    /// Snapshots committed since the server started.
    snapshots: u64,
    snapshot_windows: std::collections::VecDeque<SnapshotWindow>,
    /// When the snapshot in flight began (before its frozen copy was taken under the lock, so
    /// that its window covers the copy too) and how long the copy took.
    snapshot_began: Option<(Instant, std::time::Duration)>,
    /// The store's appended bytes when the last snapshot began (see `snapshot_every_bytes`).
    appended_at_snapshot: u64,
    /// The longest a record took to apply to the plane (under the lock, after the disk), while
    /// a snapshot was being written and at other times: what copy-on-write costs the requests
    /// that change what a frozen copy still shares, apart from the disk's noise.
    pub apply_max: ApplyMax,
}

/// See [`Inner::apply_max`] (benchmarks reset it with `Default`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyMax {
    pub during_snapshots: std::time::Duration,
    pub at_other_times: std::time::Duration,
}

/// When a snapshot was being taken, on the monotonic clock (for operators and benchmarks;
/// never part of any decision).
#[derive(Clone, Copy, Debug)]
pub struct SnapshotWindow {
    /// Before its frozen copy of the plane was taken, under the lock.
    pub began: Instant,
    /// How long that copy held the lock.
    pub copy: std::time::Duration,
    /// When its file and manifest were written.
    pub ended: Instant,
}

/// Recent snapshot windows kept (see [`Inner::snapshot_windows`]).
const SNAPSHOT_WINDOWS_KEPT: usize = 64;

/// Whether the job `rec` names is `c`'s to drive: a submission may not take another tenant's
/// job name (refused without saying whose it is), and a report or cancel must name a job the
/// caller sees.
fn owned_by(plane: &Plane, c: &crate::Caller, rec: &Record) -> Result<(), PlaneError> {
    // A queued job is its tenant's as much as a placed one.
    match rec {
        Record::Submit { job, .. } => match plane.owner(&job.id) {
            Some(t) if !c.may_see(t, &job.id) => {
                Err(PlaneError::Conflict { job: job.id.clone(), reason: "the job id is taken".into() })
            }
            _ => Ok(()),
        },
        Record::Cancel { job, .. }
        | Record::Finish { job, .. }
        | Record::Fail { job, .. }
        | Record::Restart { job, .. }
        | Record::Ready { job, .. } => match plane.owner(job) {
            Some(t) if c.may_see(t, job) => Ok(()),
            _ => Err(PlaneError::NotFound(job.clone())),
        },
        _ => Ok(()),
    }
}

/// The store's lock. A poisoned lock means a panic mid-append: the store itself reports what
/// it wrote, so its state is still the truth.
fn lock_store(store: &Mutex<Durable>) -> std::sync::MutexGuard<'_, Durable> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn store(&self) -> std::sync::MutexGuard<'_, Durable> {
        lock_store(&self.store)
    }

    /// Snapshots committed since the server started (one just written is counted here).
    pub fn snapshots_taken(&mut self) -> u64 {
        self.collect_snapshot();
        self.snapshots
    }

    /// Whether a snapshot is still being written in the background (one just finished is
    /// collected first).
    pub fn snapshot_in_flight(&mut self) -> bool {
        self.collect_snapshot();
        self.store().compacting()
    }

    /// Records in the replicated log and those its newest snapshot covers (`None`: the
    /// embedded store).
    pub fn replicated_records(&mut self) -> Option<(u64, u64)> {
        // A snapshot written since the last record counts at once.
        self.collect_snapshot();
        self.store().replicated_records()
    }

    /// The store, to ask it something without the plane's lock held.
    pub fn durable(&self) -> Arc<Mutex<Durable>> {
        self.store.clone()
    }

    /// Records in the store after its newest snapshot.
    pub fn records_since_snapshot(&self) -> u64 {
        self.store().records_since_snapshot()
    }

    /// When the recent snapshots were being written (started, ended; newest last).
    pub fn snapshot_windows(&mut self) -> Vec<SnapshotWindow> {
        self.collect_snapshot();
        self.snapshot_windows.iter().copied().collect()
    }

    /// Counts a snapshot the store has finished writing in the background, if any.
    fn collect_snapshot(&mut self) {
        let done = self.store().finish_compaction(false);
        if let Some(done) = done {
            self.snapshots += u64::from(done.outcome.is_ok());
            if self.snapshot_windows.len() == SNAPSHOT_WINDOWS_KEPT {
                self.snapshot_windows.pop_front();
            }
            let (began, copy) = self.snapshot_began.take().unwrap_or((done.started, Default::default()));
            self.snapshot_windows.push_back(SnapshotWindow { began: began.min(done.started), copy, ended: done.ended });
        }
    }
}

pub struct Shared {
    pub cfg: ServerConfig,
    /// Held by a commit from its check to its apply: records are checked, made durable and
    /// applied one at a time, in order, while the plane's lock (`inner`) is free for readers
    /// during the disk's write.
    writer: Mutex<()>,
    pub inner: Mutex<Inner>,
    started: Instant,
    /// Time of the last record before this process started: the clock continues from there.
    offset_us: u64,
    pub changed: watch::Sender<u64>,
    /// Mints and checks the tokens of jobs an execution backend launches.
    pub job_tokens: JobTokens,
    /// Set when the server starts shutting down: long-polls answer at once.
    pub closing: std::sync::atomic::AtomicBool,
    /// Phase-start long-polls parked now, waiting for a grant (`weave_parked_phase_requests`).
    pub parked: std::sync::atomic::AtomicU64,
    /// OpenTelemetry export (`--otlp-endpoint`); `None`: off.
    pub telemetry: Option<crate::telemetry::Telemetry>,
}

impl Shared {
    /// Opens the store and replays it (with `etcd`, once this replica leads: see
    /// [`replicated::open`]).
    pub fn open(cfg: ServerConfig) -> Result<Shared, ServeError> {
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| StoreError::Open { path: cfg.data_dir.display().to_string(), message: e.to_string() })?;
        if let Some(etcd) = cfg.etcd.clone() {
            let (durable, plane, job_tokens) = replicated::open(&cfg, &etcd)?;
            return Ok(Shared::with(cfg, durable, plane, job_tokens));
        }
        let store = Store::open(&cfg.data_dir.join("weave.redb"))?;
        let unrecorded = check_placement(&cfg, &store)?;
        let key = cfg.data_dir.join("job-token.key");
        let job_tokens = JobTokens::load_or_create(&key)
            .map_err(|e| StoreError::Open { path: key.display().to_string(), message: e.to_string() })?;
        let loaded = store.load_reporting::<Record>()?;
        if let Some(damage) = &loaded.passed_over {
            // Nothing is lost: the older state and every record after it were kept for this.
            eprintln!(
                "weave serve: {damage}; rebuilding the state from the snapshot before it (or the first record) and \
                 the records after that"
            );
        }
        let plane = match unrecorded {
            Some(mode) => record_placement(&cfg, mode, rebuild(&cfg, loaded))?,
            None => rebuild(&cfg, loaded)?,
        };
        Ok(Shared::with(cfg, Durable::Local(store), plane, job_tokens))
    }

    /// The shared state of a plane replayed from `durable`.
    fn with(cfg: ServerConfig, durable: Durable, plane: Plane, job_tokens: JobTokens) -> Shared {
        let offset_us = plane.last_time_us().map_or(0, |t| t + 1);
        let now = Instant::now();
        // Running jobs get a fresh heartbeat grace period after a restart.
        let heartbeats = plane.jobs().filter(|j| j.watched()).map(|j| (j.name.clone(), now)).collect();
        let (changed, _) = watch::channel(plane.version);
        Shared {
            cfg,
            writer: Mutex::new(()),
            inner: Mutex::new(Inner {
                plane,
                store: Arc::new(Mutex::new(durable)),
                heartbeats,
                history: Default::default(),
                snapshots: 0,
                snapshot_windows: Default::default(),
                snapshot_began: None,
                appended_at_snapshot: 0,
                apply_max: ApplyMax::default(),
            }),
            started: now,
            offset_us,
            changed,
            job_tokens,
            closing: std::sync::atomic::AtomicBool::new(false),
            parked: std::sync::atomic::AtomicU64::new(0),
            telemetry: None,
        }
    }

    /// Exports spans from now on (what the store replayed is not exported again).
    pub fn with_telemetry(mut self, t: crate::telemetry::Telemetry) -> Self {
        let mut g = self.lock();
        g.plane.set_grant_detail(true);
        t.skip_to(&g.plane);
        drop(g);
        self.telemetry = Some(t);
        self
    }

    /// Microseconds on the plane's clock (monotonic across restarts).
    pub fn now_us(&self) -> u64 {
        self.offset_us + self.started.elapsed().as_micros() as u64
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock means a handler panicked mid-request; the plane itself is only
        // changed after the durable append, so its state is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Check, make durable, apply; then wake waiters.
    pub fn commit(&self, make: impl FnOnce(u64) -> Record) -> Result<(), ServeError> {
        self.commit_checked(None, make)
    }

    /// [`Shared::commit`] for a request: under the same lock as the write, the job the record
    /// names must be the caller's (a job of the same name may have ended and been taken by
    /// another tenant since the handler looked).
    pub fn commit_as(&self, caller: &crate::Caller, make: impl FnOnce(u64) -> Record) -> Result<(), ServeError> {
        self.commit_checked(Some(caller), make)
    }

    fn commit_checked(
        &self,
        caller: Option<&crate::Caller>,
        make: impl FnOnce(u64) -> Record,
    ) -> Result<(), ServeError> {
        // The plane's lock is not held while the record is made durable: a gate request or
        // a read that needs only the plane never waits for another tenant's fsync (under
        // abuse those waits were most of the other tenants' gate p99). Commits still go one
        // at a time (`writer`), so nothing changes the plane between a check and its apply.
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let (rec, store) = {
            let g = self.lock();
            let rec = make(self.now_us());
            if let Some(c) = caller {
                owned_by(&g.plane, c, &rec)?;
            }
            g.plane.check(&rec)?;
            (rec, g.store.clone())
        };
        lock_store(&store).append(&rec)?;
        let mut g = self.lock();
        let seen = g.plane.next_event_seq();
        let applying = Instant::now();
        g.plane.apply_checked(&rec)?;
        let took = applying.elapsed();
        let max =
            if g.store().compacting() { &mut g.apply_max.during_snapshots } else { &mut g.apply_max.at_other_times };
        *max = (*max).max(took);
        if let Some(t) = &self.telemetry {
            t.observe(&g.plane);
        }
        // Every job this record started (a submission, or queued ones it made room for) is
        // watched from now; a queued job is not (it is not running yet).
        let Inner { plane, heartbeats, .. } = &mut *g;
        for e in plane.events_from(seen) {
            match e.kind.as_str() {
                "admitted" if plane.job(&e.job).is_some_and(|j| j.watched()) => {
                    heartbeats.insert(e.job.clone(), Instant::now());
                }
                // An admission that ended (here or as a side effect: completion, preemption,
                // a node's loss) is no longer watched.
                "completed" | "preempted" | "failed" | "cancelled" => {
                    heartbeats.remove(&e.job);
                }
                _ => {}
            }
        }
        match &rec {
            Record::Submit { .. } => {}
            Record::Cancel { job, .. } | Record::Fail { job, .. } => {
                g.heartbeats.remove(job);
            }
            Record::Finish { job, .. } => {
                if g.plane.job(job).is_some_and(|j| j.state == JobState::Running) {
                    g.heartbeats.insert(job.clone(), Instant::now());
                }
            }
            Record::NodeDown { time_us, .. } | Record::Restart { time_us, .. } => {
                // Failed jobs stop being watched; re-admitted ones get a fresh grace period.
                let Inner { plane, heartbeats, .. } = &mut *g;
                heartbeats.retain(|name, _| plane.job(name).is_some_and(|j| j.state == JobState::Running));
                let now = Instant::now();
                for j in plane.jobs().filter(|j| j.watched() && j.submitted_us == *time_us) {
                    heartbeats.insert(j.name.clone(), now);
                }
            }
            Record::NodeUp { .. }
            | Record::NodeNotice { .. }
            | Record::EnvNodeDown { .. }
            | Record::EnvNodeUp { .. }
            | Record::Inventory { .. }
            | Record::Consolidate { .. }
            | Record::Ready { .. }
            | Record::Launched { .. }
            | Record::ReturnLoan { .. } => {}
        }
        let version = g.plane.version;
        self.compact_if_due(&mut g);
        drop(g);
        self.changed.send_replace(version);
        Ok(())
    }

    /// Snapshots the plane into the store once enough records follow the last snapshot. The
    /// live plane is not held for it: a frozen copy is taken under the lock (cheap: its job
    /// entries, dispatchers, groups and events are shared, copy-on-write) and the snapshot's
    /// own thread encodes that while requests go on. A failed snapshot loses nothing (the
    /// records stay; the store reports not ready until a write works again) and is tried
    /// again after the next record.
    fn compact_if_due(&self, g: &mut Inner) {
        g.collect_snapshot();
        let (every, every_bytes) = (self.cfg.snapshot_every, self.cfg.snapshot_every_bytes);
        let mut store = lock_store(&g.store);
        let by_count = every > 0 && store.records_since_snapshot() >= every;
        let by_bytes = every_bytes > 0 && store.appended_bytes() - g.appended_at_snapshot >= every_bytes;
        if !(by_count || by_bytes) || store.compacting() {
            return;
        }
        let began = Instant::now();
        let frozen = g.plane.clone();
        let copy = began.elapsed();
        let started = store.compact_in_background(Box::new(move |out| {
            crate::lower_this_thread_priority();
            let written = frozen.write_snapshot(out);
            // What the live plane changed meanwhile was copied; those copies go with it.
            drop(frozen);
            crate::release_freed_memory();
            written
        }));
        if started {
            g.snapshot_began = Some((began, copy));
            let appended = store.appended_bytes();
            drop(store);
            g.appended_at_snapshot = appended;
        }
    }

    /// Runs the periodic consolidation pass when it is due (a durable record, so replay
    /// makes the same moves). A pass the disk refused is tried again on the next round.
    pub fn consolidate_if_due(&self) {
        let every = Micros(self.cfg.placement.consolidate_every.as_micros() as u64);
        if !self.lock().plane.consolidation_due(self.now_us(), every) {
            return;
        }
        let _ = self.commit(|time_us| Record::Consolidate { time_us });
    }

    /// Takes out of service every node whose preemption notice has run out (as a lost node:
    /// its jobs are re-admitted from their last completed iteration). A record the disk
    /// refused is tried again on the next round.
    pub fn expire_notices(&self) {
        // With an execution backend the node goes when the backend reports it gone (Ray kills a
        // drained node at its deadline; taking it down here first would race Ray's own view).
        if self.cfg.capacity == Capacity::Recorded {
            return;
        }
        let due = self.lock().plane.notices_due(self.now_us());
        for (node, reason) in due {
            let reason = format!("preempted: {reason}");
            let _ = self.commit(|time_us| Record::NodeDown { time_us, node, reason });
        }
    }

    /// Renews a replica's leadership when due; false once it is lost (another replica may lead
    /// now: this one must stop serving). Always true on the embedded store.
    pub fn keep_leading(&self) -> bool {
        let store = self.lock().store.clone();
        let leading = lock_store(&store).keep_leading();
        leading
    }

    /// Whether the store can take the next write: enough free space on its volume (see
    /// [`ServerConfig::min_free_bytes`]), and, after a failed write, a probe that works.
    /// Asked again each time, so it recovers by itself when space returns.
    pub fn readiness(&self) -> Result<(), String> {
        if let Some((free, total)) = volume_space(&self.cfg.data_dir) {
            let margin = self.cfg.min_free_bytes.min(total / 20);
            if free < margin {
                return Err(format!(
                    "the store's volume has {} free, below the {} margin (--min-free-mib)",
                    weave_core::Bytes(free),
                    weave_core::Bytes(margin)
                ));
            }
        }
        // The probe may write to the disk: not under the plane's lock.
        let store = self.lock().store.clone();
        let probed = lock_store(&store).probe();
        probed
    }

    /// Marks jobs whose heartbeats stopped as failed (they leave their groups).
    pub fn expire_heartbeats(&self) {
        let timeout = self.cfg.heartbeat_timeout;
        let stale: Vec<String> = {
            let g = self.lock();
            let now = Instant::now();
            g.heartbeats.iter().filter(|(_, t)| now.duration_since(**t) > timeout).map(|(n, _)| n.clone()).collect()
        };
        for job in stale {
            let reason = format!("no heartbeat for {:.1} s", timeout.as_secs_f64());
            // A fail record the disk refused is tried again on the next round: the job stays
            // tracked until its failure is durable (or it ended some other way).
            match self.commit(|time_us| Record::Fail { time_us, job: job.clone(), reason }) {
                Err(ServeError::Store(_)) => {}
                _ => {
                    self.lock().heartbeats.remove(&job);
                }
            }
        }
    }
}
