//! Snapshots: restoring a snapshot taken after any record and replaying the rest gives the same
//! plane, field for field, as replaying everything (compared by the snapshots' bytes), on
//! random histories with sharing, preemption, consolidation, node losses, cancellations and
//! loans of idle rollout blocks.

use proptest::prelude::*;
use weave_core::{ClusterConfig, Micros, NodeId};
use weave_dispatch::Phase;
use weave_place::share::{ShareMode, SharePolicy, TenantQuota};
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, Record, Retention, SubmitSpec};

const S: u64 = 1_000_000;

/// Three nodes of each pool, two tenants with quotas and preemption; consolidation and lending
/// optional (lending when the flag's second bit is set: `plane(2 | consolidate)`).
fn plane(flags: u8) -> Plane {
    let (consolidate, lending) = (flags & 1 == 1, flags & 2 == 2);
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((3, 3));
    let quota = |name: &str, n: f64| TenantQuota {
        name: name.into(),
        rollout_nodes: n,
        training_nodes: n,
        borrow_limit: None,
        env_cores: None,
    };
    // Little history held, so that letting go of it is part of every test.
    let mut p = Plane::new(cluster, cfg).with_retention(Retention { events: 40, jobs: 4, ..Retention::default() });
    if consolidate {
        p = p.with_consolidation(Default::default());
    }
    if lending {
        p = p.with_lending();
    }
    p.with_share(SharePolicy {
        mode: ShareMode::Preemption,
        tenants: vec![quota("alice", 2.0), quota("bob", 1.0)],
        min_run: Micros::from_secs(120),
        checkpoint_every: 1,
        // Fair share with decay: its history is state a snapshot must carry.
        half_life: Some(Micros::from_secs(600)),
        preempts_own: weave_core::Priority::High,
        grace: weave_core::Micros::ZERO,
    })
}

/// One step of a random history, made valid against the plane's current state.
fn step(p: &Plane, op: (u8, u8, u8), n: usize, t: u64) -> Option<Record> {
    let (kind, a, b) = op;
    let time_us = t * S;
    let running: Vec<_> = p.jobs().filter(|j| j.state == JobState::Running).map(|j| j.name.clone()).collect();
    let pick = |v: &[String]| (!v.is_empty()).then(|| v[a as usize % v.len()].clone());
    match kind % 8 {
        0..=2 => {
            let slo = [1.0, 1.5, 2.0][b as usize % 3];
            let job_type = ["3B_4k", "7B_8k"][a as usize % 2];
            let priority = ["low", "normal", "high"][a as usize % 3];
            let job: SubmitSpec = serde_json::from_value(serde_json::json!({
                "id": format!("j{n}"), "type": job_type, "iterations": 1 + b as u64 % 6,
                "slo": slo, "rollout_s": 40 + a as u64, "train_s": 30 + b as u64, "priority": priority,
                // Some one-step off-policy: a gate with two grants is state too.
                "staleness": (a / 3) % 2,
            }))
            .unwrap();
            Some(Record::Submit { time_us, tenant: ["alice", "bob"][b as usize % 2].into(), job })
        }
        3..=5 => {
            let granted: Vec<_> =
                p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|g| (j.name.clone(), g))).collect();
            let (job, (phase, iteration)) = granted.get(a as usize % granted.len().max(1))?.clone();
            let duration_us = (20 + b as u64) * S * if phase == Phase::Rollout { 2 } else { 1 };
            Some(Record::Finish { time_us, job, phase, iteration, duration_us, meta: None, admission: None })
        }
        6 if b % 3 == 2 => {
            let borrowing: Vec<_> = running.iter().filter(|j| p.loan_of(j).is_some()).cloned().collect();
            Some(Record::ReturnLoan { time_us, job: pick(&borrowing)?, admission: None })
        }
        6 if b % 2 == 0 => Some(Record::Cancel { time_us, job: pick(&running)? }),
        6 => Some(Record::Restart { time_us, job: pick(&running)?, reason: "test".into() }),
        _ => {
            let node: NodeId = format!("{}{}", ["r", "t"][a as usize % 2], b % 3).parse().unwrap();
            if a % 3 == 0 {
                Some(Record::NodeUp { time_us, node })
            } else {
                Some(Record::NodeDown { time_us, node, reason: "test".into() })
            }
        }
    }
}

/// A loan is held only by the running admission it was made to, for the rollout it runs now.
fn loans_held_rightly(p: &Plane) {
    for j in p.jobs() {
        if let Some(l) = p.loan_of(&j.name) {
            let rolling = j.gate.rollout.map(|g| g.iteration);
            assert!(
                j.state == JobState::Running && j.id.0 == l.admission && rolling == Some(l.iteration),
                "{} holds a loan of admission {} for rollout {} ({:?}, admission {}, rolling {rolling:?})",
                j.name,
                l.admission,
                l.iteration,
                j.state,
                j.id.0
            );
        }
    }
}

fn history(ops: &[(u8, u8, u8)], flags: u8) -> Vec<Record> {
    let mut p = plane(flags);
    let mut records = Vec::new();
    let mut t = 0;
    for (n, &op) in ops.iter().enumerate() {
        t += 7 + op.2 as u64;
        if let Some(r) = step(&p, op, n, t) {
            if p.check(&r).is_ok() {
                p.apply(&r).unwrap();
                loans_held_rightly(&p);
                records.push(r);
            }
        }
    }
    records
}

fn replay(mut p: Plane, records: &[Record]) -> Plane {
    for r in records {
        p.apply(r).unwrap();
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn a_snapshot_and_the_rest_of_the_log_equal_the_whole_log(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..120),
        cut in 0.0..1.0f64,
        flags in 0..4u8,
    ) {
        let records = history(&ops, flags);
        let whole = replay(plane(flags), &records);
        let k = (records.len() as f64 * cut) as usize;
        let head = replay(plane(flags), &records[..k]);
        let restored = plane(flags).restore(&head.snapshot()).unwrap();
        let resumed = replay(restored, &records[k..]);
        prop_assert!(whole.snapshot() == resumed.snapshot(), "differs after a cut at {k} of {}", records.len());
        prop_assert_eq!(whole.events(), resumed.events());
    }

    /// The server snapshots a frozen copy (`Plane::clone`, sharing job entries, dispatchers,
    /// groups and events) while the live plane goes on: nothing the live plane does after
    /// may show in the copy.
    #[test]
    fn a_frozen_copy_is_untouched_by_what_the_live_plane_does_after(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..120),
        cut in 0.0..1.0f64,
        flags in 0..4u8,
    ) {
        let records = history(&ops, flags);
        let k = (records.len() as f64 * cut) as usize;
        let mut live = replay(plane(flags), &records[..k]);
        let at_cut = live.snapshot();
        let frozen = live.clone();
        for r in &records[k..] {
            live.apply(r).unwrap();
        }
        prop_assert!(frozen.snapshot() == at_cut, "the copy changed after a cut at {k} of {}", records.len());
        prop_assert!(live.snapshot() == replay(plane(flags), &records).snapshot());
    }
}

/// Seeded histories (a fixed generator, so this test always covers the same ground): cuts
/// anywhere give the same plane, and between them the histories reach preemption,
/// re-queueing, node losses, completions and cancellations.
#[test]
fn seeded_histories_cover_what_snapshots_must_carry() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..24u64 {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as u8
        };
        let ops: Vec<(u8, u8, u8)> = (0..250).map(|_| (next(), next(), next())).collect();
        // Consolidation on even seeds, lending on every other pair.
        let consolidate = (seed % 2 == 0) as u8 | if seed % 4 < 2 { 2 } else { 0 };
        let records = history(&ops, consolidate);
        let mut whole = plane(consolidate);
        let mut cuts = vec![0, records.len() / 3, records.len() / 2, records.len()];
        for (k, r) in records.iter().enumerate() {
            let from = whole.next_event_seq();
            whole.apply(r).unwrap();
            seen.extend(whole.events_from(from).map(|e| e.kind.clone()));
            // Loans are rare in these histories: cut wherever one is out, too.
            if whole.jobs().any(|j| whole.loan_of(&j.name).is_some()) {
                cuts.push(k + 1);
            }
        }
        for k in cuts {
            let head = replay(plane(consolidate), &records[..k]);
            let resumed = replay(plane(consolidate).restore(&head.snapshot()).unwrap(), &records[k..]);
            assert!(whole.snapshot() == resumed.snapshot(), "seed {seed}: differs after a cut at {k}");
        }
        // Bounded history: at most the retention (and a quarter) of events, numbered on.
        assert!(whole.events().len() <= 50, "{} events held", whole.events().len());
        let seqs: Vec<u64> = whole.events().iter().map(|e| e.seq).collect();
        assert_eq!(seqs.last().map(|s| s + 1), Some(whole.next_event_seq()));
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
        let ended = whole.jobs().filter(|j| matches!(j.state, JobState::Completed | JobState::Cancelled)).count();
        assert!(ended <= 4, "{ended} ended jobs held");
    }
    for kind in [
        "preempted",
        "completed",
        "node-down",
        "queued",
        "cancelled",
        "moved",
        "move-deferred",
        "requeued",
        "readmitted",
        "loan",
        "loan-returned",
    ] {
        assert!(seen.contains(kind), "no {kind} event in any history: {seen:?}");
    }
}

#[test]
fn a_damaged_or_foreign_snapshot_is_refused() {
    let mut bytes = plane(0).snapshot();
    assert!(plane(0).restore(&bytes[..bytes.len() / 2]).is_err());
    bytes[0] ^= 0xff;
    assert!(plane(0).restore(&bytes).is_err());
    assert!(plane(0).restore(b"not cbor").is_err());
}

/// Snapshot format version 1 (the form before the current version 2), in each shape it was
/// written in, restores to the plane it held: the conversion lives in `plane/snapshot/v1.rs`,
/// not in the live types.
mod format_version_1 {
    use super::*;
    use ciborium::Value;

    type Map = Vec<(Value, Value)>;

    /// Planes at the end of seeded histories (all four combinations of consolidation and
    /// lending), with jobs in every state a snapshot holds.
    fn planes() -> Vec<(u8, Plane)> {
        (0..8u64)
            .map(|seed| {
                let mut x = seed.wrapping_mul(2862933555777941757).wrapping_add(3037000493);
                let mut next = || {
                    x = x.wrapping_mul(2862933555777941757).wrapping_add(3037000493);
                    (x >> 33) as u8
                };
                let ops: Vec<(u8, u8, u8)> = (0..120).map(|_| (next(), next(), next())).collect();
                let flags = (seed % 4) as u8;
                (flags, replay(plane(flags), &history(&ops, flags)))
            })
            .collect()
    }

    fn doc(bytes: &[u8]) -> Value {
        ciborium::from_reader(bytes).unwrap()
    }

    fn bytes(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(v, &mut out).unwrap();
        out
    }

    fn map(v: &mut Value) -> &mut Map {
        match v {
            Value::Map(m) => m,
            other => panic!("not a map: {other:?}"),
        }
    }

    fn get<'a>(m: &'a mut Map, name: &str) -> &'a mut Value {
        m.iter_mut().find(|(k, _)| k.as_text() == Some(name)).map(|(_, v)| v).unwrap_or_else(|| panic!("no `{name}`"))
    }

    fn remove(m: &mut Map, name: &str) -> Option<Value> {
        let i = m.iter().position(|(k, _)| k.as_text() == Some(name))?;
        Some(m.remove(i).1)
    }

    /// Removes `name` if it holds what version 1's older shapes implied by its absence.
    fn drop_if(m: &mut Map, name: &str, implied: Value) {
        if m.iter().any(|(k, v)| k.as_text() == Some(name) && *v == implied) {
            remove(m, name);
        }
    }

    fn int(v: &Value) -> u64 {
        u64::try_from(v.as_integer().unwrap()).unwrap()
    }

    fn values(v: &mut Value) -> Vec<&mut Value> {
        match v {
            Value::Map(m) => m.iter_mut().map(|(_, v)| v).collect(),
            Value::Array(a) => a.iter_mut().collect(),
            other => panic!("not a collection: {other:?}"),
        }
    }

    fn version(doc: &mut Value, v: u64) {
        *get(map(doc), "version") = Value::Integer(v.into());
    }

    #[test]
    fn version_1_in_its_last_shape_restores_the_same_plane() {
        for (flags, p) in planes() {
            let current = p.snapshot();
            let mut old = doc(&current);
            version(&mut old, 1);
            let restored = plane(flags).restore(&bytes(&old)).unwrap();
            assert!(restored.snapshot() == current, "flags {flags}");
        }
    }

    /// Every field version 1 once lacked, left out where it holds what its absence meant;
    /// rollout resources indexed by node; names by position; on-policy gates as one grant.
    fn older_shapes(snapshot: &mut Value) {
        let top = map(snapshot);
        let Value::Array(live) = get(top, "job_names").clone() else { panic!("job_names") };
        let next = int(&live[1]) as usize;
        let mut names = vec![Value::Text(String::new()); next];
        for pair in live[0].as_array().unwrap() {
            let pair = pair.as_array().unwrap();
            names[int(&pair[0]) as usize] = pair[1].clone();
        }
        remove(top, "job_names");
        top.push((Value::Text("names".into()), Value::Array(names)));
        drop_if(top, "notices", Value::Array(vec![]));
        let stats = map(get(top, "stats"));
        for name in ["loans", "loans_reclaimed_early", "loan_returns", "loan_returns_late_us"] {
            drop_if(stats, name, Value::Integer(0.into()));
        }
        for job in values(get(top, "jobs")) {
            let job = map(job);
            job.push((Value::Text("ready_us".into()), Value::Integer(0.into())));
            one_grant(map(get(job, "entry")));
        }
        for queued in values(get(top, "queue")) {
            drop_if(map(queued), "resumes", Value::Bool(false));
        }
        let empty_order = doc(&{
            let mut out = Vec::new();
            ciborium::into_writer(&weave_dispatch::order::GroupOrder::default(), &mut out).unwrap();
            out
        });
        for group in values(get(map(get(top, "placer")), "groups")) {
            let group = map(group);
            drop_if(map(get(group, "prediction")), "order", empty_order.clone());
            for member in values(get(group, "members")) {
                drop_if(map(get(map(member), "job")), "staleness", Value::Integer(0.into()));
            }
        }
        for d in values(get(top, "dispatchers")) {
            let d = map(d);
            drop_if(d, "order", empty_order.clone());
            drop_if(d, "per_resource_join", Value::Bool(false));
            drop_if(map(get(d, "train")), "rank", Value::Map(vec![]));
            indexed(get(d, "rollout"));
            for m in values(get(d, "members")) {
                let m = map(m);
                drop_if(m, "late", Value::Bool(false));
                drop_if(map(get(m, "spec")), "staleness", Value::Integer(0.into()));
            }
        }
    }

    /// An on-policy gate as version 1 first wrote it: its one grant and next phase.
    fn one_grant(entry: &mut Map) {
        let gate = map(get(entry, "gate")).clone();
        let field = |name: &str| gate.iter().find(|(k, _)| k.as_text() == Some(name)).unwrap().1.clone();
        if int(&field("staleness")) != 0 {
            return;
        }
        let (rolled, trained) = (int(&field("rolled")), int(&field("trained")));
        let next_phase = if rolled > trained { "train" } else { "rollout" };
        let pair = |phase: &str, k: u64| Value::Array(vec![Value::Text(phase.into()), Value::Integer(k.into())]);
        let granted = match (field("rollout"), field("train")) {
            (Value::Map(g), Value::Null) => {
                let k = int(&g.iter().find(|(k, _)| k.as_text() == Some("iteration")).unwrap().1);
                pair("rollout", k)
            }
            (Value::Null, k) if !k.is_null() => pair("train", int(&k)),
            _ => Value::Null,
        };
        remove(entry, "gate");
        entry.push((Value::Text("granted".into()), granted));
        entry.push((Value::Text("next".into()), pair(next_phase, trained)));
    }

    /// Rollout resources as a vector indexed by node, unused indices padded.
    fn indexed(rollout: &mut Value) {
        let keyed = map(rollout).clone();
        let len = keyed.iter().map(|(k, _)| int(k) as usize + 1).max().unwrap_or(0);
        let pad = Value::Map(vec![
            (Value::Text("holder".into()), Value::Null),
            (Value::Text("last".into()), Value::Null),
            (Value::Text("loaded".into()), Value::Array(vec![])),
            (Value::Text("served".into()), Value::Map(vec![])),
        ]);
        let mut v = vec![pad; len];
        for (k, mut r) in keyed {
            drop_if(map(&mut r), "rank", Value::Map(vec![]));
            v[int(&k) as usize] = r;
        }
        *rollout = Value::Array(v);
    }

    #[test]
    fn version_1_in_its_older_shapes_restores_the_same_plane() {
        for (flags, p) in planes() {
            let current = p.snapshot();
            let mut old = doc(&current);
            version(&mut old, 1);
            older_shapes(&mut old);
            assert!(bytes(&old) != current);
            let restored = plane(flags).restore(&bytes(&old)).unwrap();
            assert!(restored.snapshot() == current, "flags {flags}");
        }
    }

    /// Members as one stage (the form before bounded staleness): each on-policy member's two
    /// lanes come back as they were.
    #[test]
    fn version_1_members_as_one_stage_restore_the_same_lanes() {
        let lanes = |snapshot: &[u8]| -> Vec<Vec<Value>> {
            let mut d = doc(snapshot);
            let mut out = Vec::new();
            for d in values(get(map(&mut d), "dispatchers")) {
                for m in values(get(map(d), "members")) {
                    let m = map(m);
                    out.push(["iteration", "rolled", "rollout", "train"].map(|f| get(m, f).clone()).to_vec());
                }
            }
            out
        };
        let mut staged = 0;
        for (flags, p) in planes() {
            let current = p.snapshot();
            let mut old = doc(&current);
            version(&mut old, 1);
            for d in values(get(map(&mut old), "dispatchers")) {
                for m in values(get(map(d), "members")) {
                    staged += one_stage(map(m)) as usize;
                }
            }
            let restored = plane(flags).restore(&bytes(&old)).unwrap();
            assert_eq!(lanes(&restored.snapshot()), lanes(&current), "flags {flags}");
        }
        assert!(staged >= 5, "only {staged} members written as one stage");
    }

    /// A member's lanes as its one stage, if it is on-policy (the stage form had no other).
    fn one_stage(m: &mut Map) -> bool {
        if int(get(map(get(m, "spec")), "staleness")) != 0 {
            return false;
        }
        let text = |v: &Value| v.as_text().unwrap().to_owned();
        let (rollout, train) = (text(get(m, "rollout")), text(get(m, "train")));
        let ahead = int(get(m, "rolled")) > int(get(m, "iteration"));
        let tagged = |tag: &str, p: &str| Value::Map(vec![(Value::Text(tag.into()), Value::Text(p.into()))]);
        let stage = match (rollout.as_str(), train.as_str()) {
            (_, "syncing") => Value::Text("Syncing".into()),
            (_, "switching") => tagged("Switching", "train"),
            (_, "running") => tagged("Running", "train"),
            ("switching", _) => tagged("Switching", "rollout"),
            ("running", _) => tagged("Running", "rollout"),
            _ if ahead => tagged("Ready", "train"),
            _ => tagged("Ready", "rollout"),
        };
        let seq = get(m, if ahead { "train_seq" } else { "rollout_seq" }).clone();
        m.retain(|(k, _)| ["spec", "iteration"].contains(&k.as_text().unwrap_or("")));
        m.push((Value::Text("stage".into()), stage));
        m.push((Value::Text("ready_seq".into()), seq));
        true
    }

    #[test]
    fn another_version_is_refused_by_its_number() {
        let (flags, p) = planes().remove(0);
        let mut d = doc(&p.snapshot());
        version(&mut d, 3);
        let err = plane(flags).restore(&bytes(&d)).err().expect("refused").to_string();
        assert!(err.contains("format version 3"), "{err}");
    }
}
