//! The plane's event history as readers take it: out of the lock. Every read of history
//! (`/v1/events`, a job's history, the status page's timeline) used to copy or scan the
//! events under the plane's lock, so one tenant polling a long history stalled every other
//! tenant's phase gate. Here the plane's events (each shared, never copied) are indexed in
//! chunks shared by reference: under the lock a reader only clones the chunks' handles
//! (O(chunks), the last one copy-on-write), and filters, pages and serializes after the lock
//! is released.

use crate::plane::{Plane, PlaneEvent};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// Events per chunk: the most a writer copies when a reader still holds the open chunk.
const CHUNK: usize = 512;

/// Events in order, and the tenants they belong to: a reader skips a chunk none of whose
/// tenants it may see (a tenant with few events reads in about O(chunks), not O(events)).
#[derive(Clone, Default)]
struct Chunk {
    events: Vec<Arc<PlaneEvent>>,
    tenants: BTreeSet<String>,
}

impl Chunk {
    fn push(&mut self, e: Arc<PlaneEvent>) {
        if !self.tenants.contains(&e.tenant) {
            self.tenants.insert(e.tenant.clone());
        }
        self.events.push(e);
    }

    fn last_seq(&self) -> Option<u64> {
        self.events.last().map(|e| e.seq)
    }
}

/// The plane's events in chunks, brought up to date whenever a reader asks.
#[derive(Default)]
pub struct History {
    chunks: VecDeque<Arc<Chunk>>,
    /// The sequence number the next event copied will have.
    next_seq: u64,
}

/// What a reader holds after the lock is released: the events with `seq >= from` that the
/// plane still held when the view was taken.
pub struct HistoryView {
    chunks: Vec<Arc<Chunk>>,
    from: u64,
}

impl History {
    /// Copies the events the plane has gained since the last call, each event naming its
    /// tenant (resolved now for events from snapshots written before events named it), and
    /// lets go of chunks the plane has let go of.
    fn catch_up(&mut self, plane: &Plane) {
        let base = plane.first_event_seq();
        if self.next_seq < base {
            // More was let go than was ever copied: start again at the oldest event held.
            self.chunks.clear();
            self.next_seq = base;
        }
        for e in plane.events_from(self.next_seq) {
            let e = if e.tenant.is_empty() && !plane.event_tenant(e).is_empty() {
                Arc::new(PlaneEvent { tenant: plane.event_tenant(e).to_string(), ..(**e).clone() })
            } else {
                e.clone()
            };
            match self.chunks.back_mut() {
                Some(open) if open.events.len() < CHUNK => Arc::make_mut(open).push(e),
                _ => {
                    let mut chunk = Chunk::default();
                    chunk.push(e);
                    self.chunks.push_back(Arc::new(chunk));
                }
            }
            self.next_seq += 1;
        }
        while self.chunks.front().is_some_and(|c| c.last_seq().is_some_and(|seq| seq < base)) {
            self.chunks.pop_front();
        }
    }

    /// The events from `from` on (and not older than the plane holds), for reading after
    /// the lock is released.
    pub fn view(&mut self, plane: &Plane, from: u64) -> HistoryView {
        self.catch_up(plane);
        let base = plane.first_event_seq();
        let from = from.max(base);
        let chunks = self.chunks.iter().filter(|c| c.last_seq().is_some_and(|seq| seq >= from)).cloned().collect();
        HistoryView { chunks, from }
    }
}

impl HistoryView {
    /// Oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &PlaneEvent> {
        self.of_tenants(|_| true)
    }

    /// The events of the tenants `wanted` accepts (and maybe a few others: filter them too),
    /// oldest first, skipping whole chunks of other tenants' events.
    pub fn of_tenants(&self, wanted: impl Fn(&str) -> bool) -> impl DoubleEndedIterator<Item = &PlaneEvent> {
        let from = self.from;
        let chunks = self.chunks.iter().filter(move |c| c.tenants.iter().any(|t| wanted(t)));
        chunks.flat_map(|c| c.events.iter()).map(|e| &**e).filter(move |e| e.seq >= from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::{Record, Retention, SubmitSpec};
    use weave_core::ClusterConfig;
    use weave_place::{PlacePolicy, PlacerConfig};

    fn plane() -> Plane {
        let cluster = ClusterConfig::default();
        let cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
        Plane::new(cluster, cfg).with_retention(Retention { events: 40, jobs: 4, ..Retention::default() })
    }

    /// Submits a job and runs every granted phase once: a few events each time.
    fn step(p: &mut Plane, n: u64) {
        let job: SubmitSpec = serde_json::from_value(serde_json::json!({
            "id": format!("j{n}"), "type": "3B_4k", "iterations": 2, "slo": 2.0, "rollout_s": 40, "train_s": 30
        }))
        .unwrap();
        p.apply(&Record::Submit { time_us: n * 1000, tenant: ["alice", "bob"][n as usize % 2].into(), job }).unwrap();
        let granted: Vec<_> =
            p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|(ph, k)| (j.name.clone(), ph, k))).collect();
        for (job, phase, iteration) in granted {
            let r = Record::Finish {
                time_us: n * 1000 + 1,
                job,
                phase,
                iteration,
                duration_us: 1,
                meta: None,
                admission: None,
            };
            p.apply(&r).unwrap();
        }
    }

    fn held(p: &Plane, from: u64) -> Vec<PlaneEvent> {
        p.events_from(from).map(|e| (**e).clone()).collect()
    }

    /// A view equals the plane's events from its cursor, whatever was let go in between, and a
    /// view taken earlier never changes under a reader while the history grows.
    #[test]
    fn a_view_is_the_planes_events_and_stays_as_taken() {
        let mut p = plane();
        let mut h = History::default();
        let mut kept: Vec<(HistoryView, Vec<PlaneEvent>)> = Vec::new();
        for n in 0..400 {
            step(&mut p, n);
            // Read now and then (catch-up across many events, and across what was let go).
            if n % 7 == 0 || n % 50 > 45 {
                for from in [0, p.next_event_seq().saturating_sub(3), p.next_event_seq() + 5] {
                    let v = h.view(&p, from);
                    let got: Vec<PlaneEvent> = v.iter().cloned().collect();
                    assert_eq!(got, held(&p, from), "view from {from} after step {n}");
                    let bobs: Vec<PlaneEvent> =
                        v.of_tenants(|t| t == "bob").filter(|e| e.tenant == "bob").cloned().collect();
                    let want: Vec<PlaneEvent> = held(&p, from).into_iter().filter(|e| e.tenant == "bob").collect();
                    assert_eq!(bobs, want, "one tenant's events from {from} after step {n}");
                    if kept.len() < 30 {
                        kept.push((v, got));
                    }
                }
            }
        }
        assert!(p.first_event_seq() > 1000, "history was let go many times over");
        for (v, got) in &kept {
            assert_eq!(&v.iter().cloned().collect::<Vec<_>>(), got, "an old view stayed as it was taken");
        }
        assert!(h.chunks.len() <= 2 + 50 / CHUNK, "chunks let go with the plane's history: {}", h.chunks.len());
    }
}
