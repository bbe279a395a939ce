//! LoRA packs over random histories of the plane (seeded, so always the same ground): members
//! of several bases arrive, packs run, members and packs end, nodes are lost and come back.
//! After every record: each running member sits in its pack's slot and nobody else does, no
//! member's slot ever changes while it runs, and a plane restored from a snapshot taken
//! anywhere and fed the rest is the same plane.

use std::collections::BTreeMap;
use weave_core::{ClusterConfig, NodeId};
use weave_dispatch::Phase;
use weave_place::{PlacePolicy, PlacerConfig};
use weave_server::plane::{JobState, Plane, Record, SubmitSpec};

const S: u64 = 1_000_000;

/// Fixed pools of three nodes each; consolidation (co-located mode and moves) on odd seeds.
fn plane(seed: u64) -> Plane {
    let cluster = ClusterConfig::default();
    let mut cfg = PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0);
    cfg.capacity = Some((3, 3));
    let p = Plane::new(cluster, cfg);
    if seed % 2 == 1 {
        p.with_consolidation(Default::default())
    } else {
        p
    }
}

fn step(p: &Plane, (kind, a, b): (u8, u8, u8), n: usize, t: u64) -> Option<Record> {
    let time_us = t * S;
    let running = |packs: bool| -> Vec<String> {
        let jobs = p.jobs().filter(|j| j.state == JobState::Running);
        jobs.filter(|j| p.pack(&j.name).is_some() == packs).map(|j| j.name.clone()).collect()
    };
    let pick = |v: Vec<String>| (!v.is_empty()).then(|| v[a as usize % v.len()].clone());
    match kind % 10 {
        0..=2 => {
            let (base, ty) = [("qwen2.5-7b", "7B_8k"), ("qwen2.5-14b", "14B_8k")][a as usize % 2];
            let (batch, rank, slo) =
                ([16, 32, 64][b as usize % 3], [8, 16, 64][b as usize % 3], [1.2, 1.5, 2.0][a as usize % 3]);
            let job: SubmitSpec = serde_json::from_value(serde_json::json!({
                "id": format!("j{n}"), "type": ty, "batch": batch, "iterations": 1 + b as u64 % 5, "slo": slo,
                "lora": { "base": base, "rank": rank },
            }))
            .unwrap();
            Some(Record::Submit { time_us, tenant: ["alice", "bob"][b as usize % 2].into(), job })
        }
        3..=6 => {
            let granted: Vec<_> =
                p.jobs().flat_map(|j| j.gate.grants().into_iter().map(|g| (j.name.clone(), g))).collect();
            let (job, (phase, iteration)) = granted.get(a as usize % granted.len().max(1))?.clone();
            let duration_us = (20 + b as u64) * S;
            Some(Record::Finish { time_us, job, phase, iteration, duration_us, meta: None, admission: None })
        }
        7 => Some(Record::Cancel { time_us, job: pick(running(b % 4 != 0))? }),
        8 => Some(Record::Restart { time_us, job: pick(running(true))?, reason: "engine restarted".into() }),
        _ => {
            let node: NodeId = format!("{}{}", ["r", "t"][a as usize % 2], b % 3).parse().unwrap();
            match a % 3 {
                0 => Some(Record::NodeUp { time_us, node }),
                _ => Some(Record::NodeDown { time_us, node, reason: "test".into() }),
            }
        }
    }
}

/// Every running member is in its pack's slot (the pack running or waiting), no slot holds a
/// job that is not its running member, and no running member's slot changed since `before`.
fn members_in_their_slots(p: &Plane, before: &mut BTreeMap<String, (String, u32)>) {
    let mut now = BTreeMap::new();
    for j in p.jobs().filter(|j| j.state == JobState::Running) {
        let Some(a) = &j.adapter else { continue };
        let pack = p.pack(&a.pack).unwrap_or_else(|| panic!("{}: its pack {} is gone", j.name, a.pack));
        assert_eq!(pack.members.get(&a.slot), Some(&j.name), "{} not in slot {} of {}", j.name, a.slot, a.pack);
        if let Some(was) = before.get(&j.name) {
            assert_eq!(was, &(a.pack.clone(), a.slot), "{}'s slot changed while it ran", j.name);
        }
        now.insert(j.name.clone(), (a.pack.clone(), a.slot));
    }
    for j in p.jobs() {
        if let Some(pack) = p.pack(&j.name) {
            for (slot, m) in &pack.members {
                assert_eq!(now.get(m), Some(&(j.name.clone(), *slot)), "slot {slot} of {} holds {m}", j.name);
            }
        }
    }
    *before = now;
}

fn replay(mut p: Plane, records: &[Record]) -> Plane {
    for r in records {
        p.apply(r).unwrap();
    }
    p
}

#[test]
fn seeded_histories_keep_members_in_their_slots_and_restore_exactly() {
    let mut seen = std::collections::BTreeSet::new();
    let mut most_members = 0;
    for seed in 0..16u64 {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as u8
        };
        let ops: Vec<(u8, u8, u8)> = (0..200).map(|_| (next(), next(), next())).collect();
        let mut p = plane(seed);
        let mut records = Vec::new();
        let mut slots = BTreeMap::new();
        let mut t = 0;
        for (n, &op) in ops.iter().enumerate() {
            t += 7 + op.2 as u64;
            let Some(r) = step(&p, op, n, t) else { continue };
            if p.check(&r).is_err() {
                continue;
            }
            let from = p.next_event_seq();
            p.apply(&r).unwrap();
            seen.extend(p.events_from(from).map(|e| e.kind.clone()));
            members_in_their_slots(&p, &mut slots);
            let largest = p.jobs().filter_map(|j| p.pack(&j.name)).map(|k| k.members.len()).max();
            most_members = most_members.max(largest.unwrap_or(0));
            records.push(r);
        }
        for k in [0, records.len() / 3, records.len() / 2, records.len()] {
            let head = replay(plane(seed), &records[..k]);
            let resumed = replay(plane(seed).restore(&head.snapshot()).unwrap(), &records[k..]);
            assert!(p.snapshot() == resumed.snapshot(), "seed {seed}: differs after a cut at {k}");
        }
    }
    assert!(most_members >= 3, "packs never grew past {most_members} members");
    for kind in ["member-joined", "member-left", "completed", "cancelled", "readmitted", "node-down", "queued", "moved"]
    {
        assert!(seen.contains(kind), "no {kind} event in any history: {seen:?}");
    }
}

/// The slot a finished phase says nothing about: a member's iteration is credited by its
/// pack's training, and a member refuses phases of its own.
#[test]
fn a_member_is_credited_by_its_packs_training_only() {
    let mut p = plane(0);
    let job: SubmitSpec = serde_json::from_value(serde_json::json!({
        "id": "a", "type": "7B_8k", "iterations": 2, "slo": 2.0, "lora": { "base": "qwen2.5-7b", "rank": 8 }
    }))
    .unwrap();
    p.apply(&Record::Submit { time_us: S, tenant: "alice".into(), job }).unwrap();
    let pack = p.job("a").unwrap().adapter.clone().unwrap().pack;
    assert!(p.may_start("a", Phase::Rollout, 0).is_err());
    let finish = |phase, t: u64| Record::Finish {
        time_us: t * S,
        job: pack.clone(),
        phase,
        iteration: 0,
        duration_us: S,
        meta: None,
        admission: None,
    };
    p.apply(&finish(Phase::Rollout, 2)).unwrap();
    assert_eq!(p.job("a").unwrap().completed_iterations, 0, "a rollout is not an iteration");
    p.apply(&finish(Phase::Train, 3)).unwrap();
    assert_eq!(p.job("a").unwrap().completed_iterations, 1);
}
