//! Snapshot format version 1, read by converting it to the current form (version 2) before
//! it is decoded: the live types (dispatcher, placer, job entries) carry no format history.
//!
//! Version 1 covered several shapes written while it was current; each conversion below names
//! the change that made the older shape. They work on the self-describing CBOR value, in the
//! style of Kubernetes API versions: an explicit conversion from the old form, once, at read.
//! Fields version 1 may lack take the value every build before them behaved as.

use super::SnapshotError;
use ciborium::Value;
use serde::{Deserialize, Serialize};
use weave_dispatch::order::GroupOrder;
use weave_dispatch::Phase;

use crate::plane::gate::{Gate, RolloutGrant};

type Map = Vec<(Value, Value)>;

/// Converts a version-1 snapshot document, in place, to the current form.
pub(super) fn upgrade(doc: &mut Value) -> Result<(), SnapshotError> {
    let top = map(doc, "snapshot")?;
    job_names(top)?;
    fill(top, "notices", || Value::Array(Vec::new()));
    if let Some(stats) = field(top, "stats") {
        let stats = map(stats, "stats")?;
        // Lending's counters came with lending.
        for name in ["loans", "loans_reclaimed_early", "loan_returns", "loan_returns_late_us"] {
            fill(stats, name, || Value::Integer(0.into()));
        }
    }
    for job in array(top, "jobs")? {
        let job = map(job, "jobs[]")?;
        // Grant waits measured per lane replaced `ready_us`.
        take(job, "ready_us");
        job_entry(map(field(job, "entry").ok_or_else(|| missing("jobs[].entry"))?, "jobs[].entry")?)?;
    }
    for queued in array(top, "queue")? {
        // Resumed jobs going first came with preemption.
        fill(map(queued, "queue[]")?, "resumes", || Value::Bool(false));
    }
    if let Some(placer) = field(top, "placer") {
        for group in values(map(placer, "placer")?, "groups")? {
            let group = map(group, "placer.groups[]")?;
            if let Some(prediction) = field(group, "prediction") {
                fill(map(prediction, "prediction")?, "order", default_order);
            }
            for member in array(group, "members")? {
                if let Some(job) = field(map(member, "placer.groups[].members[]")?, "job") {
                    staleness(map(job, "placer.groups[].members[].job")?);
                }
            }
        }
    }
    for dispatcher in values(top, "dispatchers")? {
        self::dispatcher(map(dispatcher, "dispatchers[]")?)?;
    }
    set(top, "version", Value::Integer(super::VERSION.into()));
    Ok(())
}

/// Names by position (emptied once let go) became the live names by number and the next one.
fn job_names(top: &mut Map) -> Result<(), SnapshotError> {
    let names = take(top, "names");
    if field(top, "job_names").is_some_and(|v| !v.is_null()) {
        return Ok(());
    }
    let names: Vec<String> = match names {
        Some(v) => v.deserialized().map_err(|e| SnapshotError(format!("`names`: {e}")))?,
        None => Vec::new(),
    };
    let next = names.len() as u32;
    let live: Vec<(u32, String)> =
        names.into_iter().enumerate().filter(|(_, n)| !n.is_empty()).map(|(i, n)| (i as u32, n)).collect();
    set(top, "job_names", encode(&(live, next))?);
    Ok(())
}

/// Before the gate had two lanes, a job held its one grant (`granted`) and next phase (`next`).
fn job_entry(entry: &mut Map) -> Result<(), SnapshotError> {
    let granted: Option<(Phase, u64)> = take(entry, "granted").map(decode).transpose()?.flatten();
    let next: Option<(Phase, u64)> = take(entry, "next").map(decode).transpose()?.flatten();
    if let Some(next) = next {
        set(entry, "gate", encode(&gate_from_barrier(granted, next))?);
    }
    fill(entry, "gate", || encode(&Gate::default()).expect("a gate encodes"));
    if let Some(spec) = field(entry, "pending_join").filter(|v| !v.is_null()) {
        staleness(map(spec, "pending_join")?);
    }
    Ok(())
}

/// The on-policy gate of one grant and a next phase, as two lanes.
fn gate_from_barrier(granted: Option<(Phase, u64)>, next: (Phase, u64)) -> Gate {
    let (phase, n) = next;
    let rolled = if phase == Phase::Train { n + 1 } else { n };
    let mut gate = Gate { staleness: 0, rolled, trained: n, rollout: None, train: None };
    match granted {
        Some((Phase::Rollout, k)) => gate.rollout = Some(RolloutGrant { iteration: k, weights: k }),
        Some((Phase::Train, k)) => gate.train = Some(k),
        None => {}
    }
    gate
}

/// Staleness came with bounded staleness; every job before it was on-policy.
fn staleness(spec: &mut Map) {
    fill(spec, "staleness", || Value::Integer(0.into()));
}

fn dispatcher(d: &mut Map) -> Result<(), SnapshotError> {
    fill(d, "order", default_order);
    fill(d, "per_resource_join", || Value::Bool(false));
    if let Some(train) = field(d, "train") {
        resource(map(train, "train")?);
    }
    rollout_resources(d)?;
    for member in values(d, "members")? {
        self::member(map(member, "members[]")?)?;
    }
    Ok(())
}

/// Rollout resources were a vector indexed by node (unused indices empty) before they were
/// keyed by node.
fn rollout_resources(d: &mut Map) -> Result<(), SnapshotError> {
    let Some(rollout) = field(d, "rollout") else { return Ok(()) };
    if let Value::Array(indexed) = rollout {
        let keyed = std::mem::take(indexed).into_iter().enumerate().filter(|(_, r)| in_use(r));
        *rollout = Value::Map(keyed.map(|(i, r)| (Value::Integer((i as u64).into()), r)).collect());
    }
    let Value::Map(keyed) = rollout else { return Err(SnapshotError("`rollout`: neither indexed nor keyed".into())) };
    for (_, r) in keyed.iter_mut() {
        resource(map(r, "rollout[]")?);
    }
    Ok(())
}

/// A resource some member was served on (an index the vector only padded has none).
fn in_use(resource: &Value) -> bool {
    let served = resource.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_text() == Some("served")));
    served.is_some_and(|(_, s)| s.as_map().is_some_and(|m| !m.is_empty()))
}

/// The round's order per resource came with cyclic orders.
fn resource(r: &mut Map) {
    fill(r, "rank", || Value::Map(Vec::new()));
}

/// A member before bounded staleness was one stage; after, two lanes.
fn member(m: &mut Map) -> Result<(), SnapshotError> {
    if let Some(stage) = take(m, "stage") {
        let stage: Stage = decode(stage)?;
        let iteration: u64 = decode(field(m, "iteration").cloned().ok_or_else(|| missing("members[].iteration"))?)?;
        let ready_seq = take(m, "ready_seq").ok_or_else(|| missing("members[].ready_seq"))?;
        let (rolled, rollout, train) = stage.lanes(iteration);
        set(m, "rolled", Value::Integer(rolled.into()));
        set(m, "rollout", Value::Text(rollout.into()));
        set(m, "train", Value::Text(train.into()));
        set(m, "rollout_seq", ready_seq.clone());
        set(m, "train_seq", ready_seq);
    }
    // Late joiners came with cyclic orders.
    fill(m, "late", || Value::Bool(false));
    if let Some(spec) = field(m, "spec") {
        staleness(map(spec, "members[].spec")?);
    }
    Ok(())
}

/// A member's one stage in version 1's earliest form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Stage {
    Ready(Phase),
    Switching(Phase),
    Running(Phase),
    Syncing,
}

impl Stage {
    /// Rollouts done and the two lanes' states: a training stage follows its rollout.
    fn lanes(self, iteration: u64) -> (u64, &'static str, &'static str) {
        match self {
            Stage::Ready(Phase::Rollout) => (iteration, "idle", "idle"),
            Stage::Switching(Phase::Rollout) => (iteration, "switching", "idle"),
            Stage::Running(Phase::Rollout) => (iteration, "running", "idle"),
            Stage::Ready(Phase::Train) => (iteration + 1, "idle", "idle"),
            Stage::Switching(Phase::Train) => (iteration + 1, "idle", "switching"),
            Stage::Running(Phase::Train) => (iteration + 1, "idle", "running"),
            Stage::Syncing => (iteration + 1, "idle", "syncing"),
        }
    }
}

fn default_order() -> Value {
    encode(&GroupOrder::default()).expect("an order encodes")
}

fn encode<T: Serialize>(v: &T) -> Result<Value, SnapshotError> {
    Value::serialized(v).map_err(|e| SnapshotError(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, SnapshotError> {
    v.deserialized().map_err(|e| SnapshotError(e.to_string()))
}

fn missing(what: &str) -> SnapshotError {
    SnapshotError(format!("format version 1: `{what}` is missing"))
}

fn map<'a>(v: &'a mut Value, what: &str) -> Result<&'a mut Map, SnapshotError> {
    match v {
        Value::Map(m) => Ok(m),
        _ => Err(SnapshotError(format!("format version 1: `{what}` is not a map"))),
    }
}

/// The elements of array field `name` (none if absent).
fn array<'a>(m: &'a mut Map, name: &str) -> Result<std::slice::IterMut<'a, Value>, SnapshotError> {
    match field(m, name) {
        Some(Value::Array(a)) => Ok(a.iter_mut()),
        None => Ok(Default::default()),
        Some(_) => Err(SnapshotError(format!("format version 1: `{name}` is not an array"))),
    }
}

/// The values of map field `name` (none if absent).
fn values<'a>(m: &'a mut Map, name: &str) -> Result<impl Iterator<Item = &'a mut Value>, SnapshotError> {
    let entries: std::slice::IterMut<'a, (Value, Value)> = match field(m, name) {
        Some(Value::Map(entries)) => entries.iter_mut(),
        None => Default::default(),
        Some(_) => return Err(SnapshotError(format!("format version 1: `{name}` is not a map"))),
    };
    Ok(entries.map(|(_, v)| v))
}

fn field<'a>(m: &'a mut Map, name: &str) -> Option<&'a mut Value> {
    m.iter_mut().find(|(k, _)| k.as_text() == Some(name)).map(|(_, v)| v)
}

fn take(m: &mut Map, name: &str) -> Option<Value> {
    let i = m.iter().position(|(k, _)| k.as_text() == Some(name))?;
    Some(m.remove(i).1)
}

fn set(m: &mut Map, name: &str, v: Value) {
    match field(m, name) {
        Some(slot) => *slot = v,
        None => m.push((Value::Text(name.into()), v)),
    }
}

fn fill(m: &mut Map, name: &str, v: impl FnOnce() -> Value) {
    if field(m, name).is_none() {
        m.push((Value::Text(name.into()), v()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_reads_as_the_same_gate() {
        let g = gate_from_barrier(Some((Phase::Train, 3)), (Phase::Train, 3));
        assert_eq!((g.rolled, g.trained, g.train), (4, 3, Some(3)));
        assert_eq!(g.next(), (Phase::Train, 3));
        let g = gate_from_barrier(Some((Phase::Rollout, 2)), (Phase::Rollout, 2));
        assert!(g.is_granted(Phase::Rollout, 2));
        assert_eq!(g.next(), (Phase::Rollout, 2));
    }

    #[test]
    fn names_by_position_keep_their_numbers_and_drop_emptied_ones() {
        let mut top = vec![(Value::Text("names".into()), encode(&vec!["a", "", "c"]).unwrap())];
        job_names(&mut top).unwrap();
        let (live, next): (Vec<(u32, String)>, u32) = decode(field(&mut top, "job_names").unwrap().clone()).unwrap();
        assert_eq!(live, vec![(0, "a".to_string()), (2, "c".to_string())]);
        assert_eq!(next, 3);
        assert!(field(&mut top, "names").is_none());
    }

    #[test]
    fn an_indexed_rollout_keeps_only_the_nodes_in_use() {
        let used = encode(&serde_json::json!({ "holder": null, "served": { "0": 1 } })).unwrap();
        let unused = encode(&serde_json::json!({ "holder": null, "served": {} })).unwrap();
        let mut d = vec![(Value::Text("rollout".into()), Value::Array(vec![unused.clone(), used, unused]))];
        rollout_resources(&mut d).unwrap();
        let keys: Vec<_> = field(&mut d, "rollout").unwrap().as_map().unwrap().iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, vec![Value::Integer(1.into())]);
    }
}
