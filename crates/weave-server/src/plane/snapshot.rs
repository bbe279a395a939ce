//! Snapshots: the plane's whole state as bytes, so that a restart loads the state and replays
//! only the records after it instead of all of history. A plane restored from a snapshot taken
//! after record N, then fed records N+1.., is the same plane, field for field, as one that
//! replayed every record (tests compare the two snapshots' bytes).
//!
//! What is configuration (the cluster, the profile table, admission's risk, quotas, churn
//! limits, tracing detail) is not in a snapshot: it comes from the server's flags, as for a
//! fresh plane. Placement settings likewise, except the pools' sizes, which records grow
//! (inventory) and which the snapshot therefore keeps.
//!
//! Encoding: CBOR (binary, self-describing, exact for every `f64` including infinities).

use super::nodes::Notice;
use super::{JobEntry, Loan, Measured, Plane, PlaneEvent, PlaneStats, Queued};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use weave_core::{GroupId, JobId, NodeId};
use weave_dispatch::Dispatcher;
use weave_place::consolidate::{Churn, Deferred};
use weave_place::share::UsageHistory;
use weave_place::Placer;

mod v1;

/// Format version. Version 1 is read by converting it first (`v1`); a snapshot of any other
/// version is refused, and the server does not start (the records it covers are no longer in
/// the log, so there is nothing to replay instead).
const VERSION: u32 = 2;

/// A snapshot as read (written as [`SnapshotRef`]).
#[derive(Deserialize)]
struct Snapshot {
    version: u32,
    plane_version: u64,
    placer: Placer,
    dispatchers: BTreeMap<GroupId, Dispatcher>,
    jobs: Vec<JobSnapshot>,
    /// The names of the admissions still held, by number, and the next number.
    job_names: (Vec<(u32, String)>, u32),
    events: Vec<PlaneEvent>,
    churn: Option<Churn>,
    queue: Vec<Queued>,
    arrivals: BTreeMap<String, u64>,
    next_arrival: u64,
    stats: PlaneStats,
    last_time_us: Option<u64>,
    events_base: u64,
    ended: VecDeque<(String, JobId)>,
    preemptions: BTreeMap<String, u64>,
    usage_history: UsageHistory,
    /// The last consolidation pass, or the first record's time.
    last_pass_us: Option<u64>,
    /// Preemption notices in force.
    notices: Vec<(NodeId, Notice)>,
    /// Rollout blocks lent, by the lender's (group, block) (left out when none are).
    #[serde(default)]
    loans: Vec<((GroupId, u32), Loan)>,
    /// Consolidation moves waiting for their job's training to finish (left out when none are).
    #[serde(default)]
    deferred: Vec<(JobId, Deferred)>,
    /// LoRA packs' members and rounds (left out when there are none).
    #[serde(default)]
    packs: BTreeMap<String, super::Pack>,
}

/// [`Snapshot`] borrowed from a plane (written without copying the state first).
#[derive(Serialize)]
struct SnapshotRef<'a> {
    version: u32,
    plane_version: u64,
    placer: &'a Placer,
    dispatchers: &'a imbl::OrdMap<GroupId, Arc<Dispatcher>>,
    jobs: Vec<JobSnapshotRef<'a>>,
    job_names: (Vec<(u32, &'a String)>, u32),
    events: &'a imbl::Vector<Arc<PlaneEvent>>,
    churn: &'a Option<Churn>,
    queue: &'a [Queued],
    arrivals: &'a imbl::OrdMap<String, u64>,
    next_arrival: u64,
    stats: PlaneStats,
    last_time_us: Option<u64>,
    events_base: u64,
    ended: &'a imbl::Vector<(String, JobId)>,
    preemptions: &'a BTreeMap<String, u64>,
    usage_history: &'a UsageHistory,
    last_pass_us: Option<u64>,
    notices: Vec<(&'a NodeId, &'a Notice)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    loans: Vec<(&'a (GroupId, u32), &'a Loan)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deferred: Vec<(&'a JobId, &'a Deferred)>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    packs: &'a BTreeMap<String, super::Pack>,
}

#[derive(Serialize)]
struct JobSnapshotRef<'a> {
    entry: &'a JobEntry,
    measured: &'a Measured,
    iteration_started_us: u64,
}

/// A job entry with the fields its API form leaves out.
#[derive(Deserialize)]
struct JobSnapshot {
    entry: JobEntry,
    measured: Measured,
    iteration_started_us: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("snapshot: {0}")]
pub struct SnapshotError(String);

impl Plane {
    /// The plane's state as bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_snapshot(&mut out).expect("writing to a Vec cannot fail");
        out
    }

    /// Writes [`Plane::snapshot`]'s bytes to `out` as they are encoded (never all in memory).
    pub fn write_snapshot(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let jobs = self
            .jobs
            .values()
            .map(|j| JobSnapshotRef { entry: j, measured: &j.measured, iteration_started_us: j.iteration_started_us })
            .collect();
        let snap = SnapshotRef {
            version: VERSION,
            plane_version: self.version,
            placer: &self.placer,
            dispatchers: &self.dispatchers,
            jobs,
            job_names: self.names.parts(),
            events: &self.events,
            churn: &self.churn,
            queue: &self.queue,
            arrivals: &self.arrivals,
            next_arrival: self.next_arrival,
            stats: self.stats,
            last_time_us: self.last_time_us,
            events_base: self.events_base,
            ended: &self.ended,
            preemptions: &self.preemptions,
            usage_history: &self.usage_history,
            last_pass_us: self.last_pass_us,
            notices: self.notices.iter().collect(),
            loans: self.loans().collect(),
            deferred: self.deferred.iter().collect(),
            packs: &self.packs,
        };
        ciborium::into_writer(&snap, out).map_err(|e| match e {
            ciborium::ser::Error::Io(e) => e,
            ciborium::ser::Error::Value(v) => std::io::Error::other(v),
        })
    }

    /// This (freshly configured) plane with the state in `bytes`.
    pub fn restore(mut self, bytes: &[u8]) -> Result<Plane, SnapshotError> {
        let snap = decode(bytes)?;
        // Placement settings come from the configuration; the pools' sizes from the state.
        let mut placer = snap.placer;
        let configured = self.placer.config().clone();
        let grown = placer.config().capacity;
        placer.set_config(configured);
        if let (Some(sizes), Some(_)) = (grown, self.placer.config().capacity) {
            placer.grow_capacity(sizes);
        }
        self.placer = Arc::new(placer);
        self.dispatchers = snap.dispatchers.into_iter().map(|(g, d)| (g, Arc::new(d))).collect();
        self.jobs = snap
            .jobs
            .into_iter()
            .map(|j| {
                let mut entry = j.entry;
                entry.measured = j.measured;
                entry.iteration_started_us = j.iteration_started_us;
                (entry.name.clone(), Arc::new(entry))
            })
            .collect();
        let (live, next) = snap.job_names;
        self.names = super::names::JobNames::from_parts(live, next);
        self.events = snap.events.into_iter().map(Arc::new).collect();
        self.events_bytes = self.events.iter().map(|e| super::event_bytes(e)).sum();
        // Consolidation on or off is configuration; what it did so far is state.
        if let (Some(mine), Some(theirs)) = (self.churn.as_mut(), snap.churn) {
            let limits = mine.limits;
            *mine = theirs;
            mine.limits = limits;
        }
        self.queue = snap.queue;
        self.arrivals = snap.arrivals.into_iter().collect();
        self.next_arrival = snap.next_arrival;
        self.stats = snap.stats;
        self.last_time_us = snap.last_time_us;
        self.events_base = snap.events_base;
        self.ended = snap.ended.into_iter().collect();
        self.preemptions = snap.preemptions;
        self.usage_history = snap.usage_history;
        self.last_pass_us = snap.last_pass_us;
        self.notices = snap.notices.into_iter().collect();
        self.loans = snap.loans.into_iter().collect();
        self.deferred = snap.deferred.into_iter().collect();
        self.packs = snap.packs;
        self.version = snap.plane_version;
        Ok(self)
    }
}

/// A snapshot in the current form, or in version 1 converted to it.
fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let current = ciborium::from_reader::<Snapshot, _>(bytes);
    if let Ok(snap) = current.as_ref() {
        if snap.version == VERSION {
            return current.map_err(|e| SnapshotError(e.to_string()));
        }
    }
    let mut doc: ciborium::Value = ciborium::from_reader(bytes).map_err(|e| SnapshotError(e.to_string()))?;
    let version = doc.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_text() == Some("version")));
    match version.and_then(|(_, v)| v.as_integer()).and_then(|v| u32::try_from(v).ok()) {
        Some(1) => {
            v1::upgrade(&mut doc)?;
            doc.deserialized().map_err(|e| SnapshotError(format!("format version 1, converted: {e}")))
        }
        Some(v) if v != VERSION => Err(SnapshotError(format!("format version {v} (this build reads 1 and {VERSION})"))),
        _ => Err(SnapshotError(current.err().map_or_else(|| "no format version".into(), |e| e.to_string()))),
    }
}
