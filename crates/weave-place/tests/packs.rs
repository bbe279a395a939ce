//! Packs of LoRA jobs: on hand-made cases, and on random candidates every job lands in exactly
//! one pack, a pack never mixes bases or widths, and every member of a pack keeps the slack the
//! headroom asks for.

use proptest::prelude::*;
use weave_core::{Micros, PhaseTimes};
use weave_place::lora::{form_packs, pack_slo, Candidate};

/// An engine whose mixed rollout grows as the batch's square root, plus the stagger.
fn engine(members: &[&Candidate]) -> Option<PhaseTimes> {
    let n = members.len() as f64;
    let stagger = members.iter().map(|m| m.alone.train).max()?;
    let rollout = members.iter().map(|m| m.alone.rollout).max()?.scale(n.sqrt()) + stagger;
    let train = members.iter().map(|m| m.alone.train).fold(Micros::ZERO, |a, b| a + b);
    Some(PhaseTimes { rollout, train })
}

fn cand(index: usize, base: &str, slo: f64, rollout: u64, train: u64) -> Candidate {
    Candidate {
        index,
        key: (base.into(), 1, 1),
        slo,
        alone: PhaseTimes { rollout: Micros::from_secs(rollout), train: Micros::from_secs(train) },
        iterations: None,
    }
}

#[test]
fn jobs_pack_while_every_members_slo_holds_and_never_across_bases() {
    // Alone: 100 s + 10 s. The period of two: 141 + 10 = 151 (1.37x); three: 173 + 10 =
    // 183 (1.66x); four: 200 + 10 = 210 (1.91x); five: 224 + 10 = 234 (2.13x).
    let a = |i| cand(i, "a", 2.0, 100, 10);
    let c = [a(0), a(1), a(2), a(3), a(4), cand(5, "b", 2.0, 100, 10)];
    assert_eq!(form_packs(&c, 0.0, &engine), vec![vec![0, 1, 2, 3], vec![4], vec![5]]);
    // A tight member (SLO 1.5) keeps its pack at two.
    let c = [cand(0, "a", 1.5, 100, 10), cand(1, "a", 2.0, 100, 10), cand(2, "a", 2.0, 100, 10)];
    let packs = form_packs(&c, 0.0, &engine);
    assert_eq!(packs.len(), 2, "{packs:?}");
    // Keeping half of each slack for the group: 151 x 1.5 = 226 > 220, nobody packs.
    let c = [cand(0, "a", 2.0, 100, 10), cand(1, "a", 2.0, 100, 10)];
    assert_eq!(form_packs(&c, 0.5, &engine), vec![vec![0], vec![1]]);
}

#[test]
fn the_packs_slo_is_the_tightest_members_allowance() {
    let c = [cand(0, "a", 2.0, 100, 10), cand(1, "a", 1.6, 100, 10)];
    let refs: Vec<&Candidate> = c.iter().collect();
    let t = engine(&refs).unwrap();
    let slo = pack_slo(&refs, t);
    assert!((slo - 1.6 * 110.0 / t.rollout.as_secs_f64()).abs() < 1e-9, "{slo}");
}

#[test]
fn a_short_job_counts_the_pipelines_fill_that_its_few_iterations_cannot_spread() {
    // Two alike: period 151 s against 110 s alone (1.37x); the fill, the rollout and trainings
    // after it less the period, is 141 + 10 + 20 - 151 = 20 s.
    let mut c = [cand(0, "a", 1.45, 100, 10), cand(1, "a", 2.0, 100, 10)];
    let refs: Vec<&Candidate> = c.iter().collect();
    let t = engine(&refs).unwrap();
    assert!(weave_place::lora::allowed(&refs, 0.0, &engine), "long jobs: 151 <= 1.45 x 110 = 159.5");
    assert_eq!(form_packs(&c, 0.0, &engine).len(), 1);
    // Run for 2 iterations, the first job's iteration in the pack is 151 + 20 / 2 = 161 s.
    c[0].iterations = Some(2);
    let refs: Vec<&Candidate> = c.iter().collect();
    assert!((c[0].in_pack(t) - (t.rollout.max(t.train).as_secs_f64() + 10.0)).abs() < 1e-6);
    assert!(!weave_place::lora::allowed(&refs, 0.0, &engine));
    assert_eq!(form_packs(&c, 0.0, &engine).len(), 2);
    // For 4 iterations, 151 + 5 = 156 s fits; what the group may add is its allowance over
    // that iteration: 159.5 / 156, not 159.5 / 151.
    c[0].iterations = Some(4);
    let refs: Vec<&Candidate> = c.iter().collect();
    assert!(weave_place::lora::allowed(&refs, 0.0, &engine));
    let slo = pack_slo(&refs, t);
    assert!((slo - 1.45 * 110.0 / (t.rollout.max(t.train).as_secs_f64() + 5.0)).abs() < 1e-9, "{slo}");
}

fn arb_candidates() -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec((0u8..3, 1u32..3, 20u64..300, 5u64..100, 100u32..=200), 1..12).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(index, (base, width, roll, train, slo))| Candidate {
                index,
                key: (format!("base{base}"), width, 1),
                slo: f64::from(slo) / 100.0,
                alone: PhaseTimes { rollout: Micros::from_secs(roll), train: Micros::from_secs(train) },
                iterations: None,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn packs_partition_the_jobs_and_keep_each_members_slack(c in arb_candidates(), headroom in 0.0f64..1.0) {
        let packs = form_packs(&c, headroom, &engine);
        let mut seen: Vec<usize> = packs.iter().flatten().copied().collect();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..c.len()).collect::<Vec<_>>());
        for pack in packs.iter().filter(|p| p.len() > 1) {
            let members: Vec<&Candidate> = pack.iter().map(|&i| &c[i]).collect();
            prop_assert!(members.iter().all(|m| m.key == members[0].key), "one base and width per pack");
            let t = engine(&members).unwrap();
            let period = t.rollout.max(t.train).as_secs_f64();
            for m in &members {
                let allowance = m.slo * m.alone.solo().as_secs_f64();
                prop_assert!(period * (1.0 + headroom * (m.slo - 1.0)) <= allowance + 1e-6);
            }
            // The placer's view: the pack's SLO leaves each member within its own.
            let slo = pack_slo(&members, t);
            prop_assert!(members.iter().all(|m| slo * period <= m.slo * m.alone.solo().as_secs_f64() + 1e-6));
        }
    }
}
