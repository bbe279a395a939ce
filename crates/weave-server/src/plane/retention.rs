//! How much history the plane holds, and what an event costs as retention counts it.

use super::PlaneEvent;

/// How much history the plane holds: the newest events, and ended jobs (their entries; a job
/// name let go may be taken again). Bounded, so memory and snapshots follow the live state,
/// not the age of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub events: usize,
    /// The held events' size at most, in bytes as [`event_bytes`] counts them: with clients'
    /// strings and metadata bounded per request (`InputLimits`), this bounds what a tenant
    /// filling its events with the largest allowed metadata can make the server hold.
    pub event_bytes: u64,
    pub jobs: usize,
}

impl Default for Retention {
    // What a server holds at most, by default (the memory bound `weave bench abuse` checks):
    // 48 MiB of events as `event_bytes` counts them (about 179,000 ordinary grant and finish
    // events, so for ordinary traffic the bytes bind a little before the count), 10,000 ended
    // jobs (about 2.8 KB each, measured: 28 MB) and the store's 16 MiB page cache: 92 MB.
    fn default() -> Self {
        Retention { events: 200_000, event_bytes: 48 << 20, jobs: 10_000 }
    }
}

/// What one held event costs in memory, as retention counts it: a fixed part (the event, its
/// `Arc`, its slot in the plane's history and in the readers' chunks, the allocator's share)
/// and its strings and metadata. An estimate, but a deterministic one (a replay holds exactly
/// the events the live server held).
pub fn event_bytes(e: &PlaneEvent) -> u64 {
    // Measured: 80,000 grant and finish events of one job (6-character name, 6-character
    // tenant, no metadata) raised a plane's resident memory by 281 B each; with 160 here the
    // estimate said 177 B, so the byte budget let the server hold 1.6x what it said.
    const FIXED: usize = 264;
    (FIXED + e.job.len() + e.kind.len() + e.tenant.len() + e.meta.as_ref().map_or(0, json_bytes)) as u64
}

fn json_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 16,
        Value::String(s) => 24 + s.len(),
        Value::Array(a) => 24 + a.iter().map(json_bytes).sum::<usize>(),
        Value::Object(o) => 48 + o.iter().map(|(k, v)| 32 + k.len() + json_bytes(v)).sum::<usize>(),
    }
}
