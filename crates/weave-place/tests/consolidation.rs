//! Co-located mode and consolidation: invariants on random workloads.

mod common;

use common::{config, job, of_model};
use proptest::prelude::*;
use weave_core::{JobId, Micros, PhaseTimes};
use weave_place::consolidate::{self, Churn, ChurnLimits, Movable, MoveCost};
use weave_place::{DecisionKind, PlaceJob, PlacePolicy, Placer, Target};

/// A job with a co-located profile between 0.7x and 1.4x of its disaggregated phases.
fn arb_job(id: u32) -> impl Strategy<Value = PlaceJob> {
    (30u64..600, 30u64..600, 100u32..200, prop::sample::select(vec![3u32, 7, 14, 32]), 70u64..140).prop_map(
        move |(roll, train, slo, model, colo)| {
            let mut j = of_model(id, roll, train, slo as f64 / 100.0, model);
            j.colo =
                Some(PhaseTimes { rollout: Micros::from_secs(roll * colo / 100), train: Micros::from_secs(train) });
            j
        },
    )
}

fn arb_jobs(max: usize) -> impl Strategy<Value = Vec<PlaceJob>> {
    (1..=max).prop_flat_map(|n| (0..n as u32).map(arb_job).collect::<Vec<_>>())
}

fn placer() -> Placer {
    let mut cfg = config(PlacePolicy::Weave);
    cfg.colocate = true;
    Placer::new(cfg)
}

/// Every job that runs alone may move, with a day of work left.
fn all_movable(p: &Placer) -> Movable {
    let mut churn = Churn::new(ChurnLimits { cooldown: Micros(0), max_moves_per_hour: u32::MAX });
    consolidate::movable(p, &mut churn, Micros(0), |_| Some(consolidate::Progress { remaining: 400, slack: None }))
}

/// Every group within DRAM and every member within its SLO under the model.
fn check_groups(p: &Placer) -> Result<(), TestCaseError> {
    let res = p.config().residency;
    for g in p.groups() {
        prop_assert!(g.blocks.iter().all(|b| b.used <= res.rollout_dram));
        prop_assert!(g.train_used <= res.train_dram);
    }
    Ok(())
}

fn check_slo(p: &Placer, g: weave_core::GroupId) -> Result<(), TestCaseError> {
    let g = p.group(g).unwrap();
    for (k, m) in g.members.iter().enumerate() {
        prop_assert!(
            g.prediction.coexec[k].0 as f64 <= m.job.slo * m.job.solo().0 as f64 + 1.0,
            "{:?} over its SLO",
            m.job.id
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// What admission takes costs no more per unit of work than any other feasible option in
    /// an open group, co-located or isolated: co-located mode is never chosen when something
    /// cheaper exists (a direct option with positive work costs nothing and always wins).
    #[test]
    fn admission_takes_the_cheapest_option_per_unit_of_work(jobs in arb_jobs(14)) {
        let mut p = placer();
        for j in jobs {
            let chosen = p.best_option(&j).unwrap();
            let mut targets = vec![Target::Isolated, Target::Colocated];
            for g in p.groups().filter(|g| !g.colocated && !g.prediction.saturated) {
                targets.extend(g.blocks.iter().map(|b| Target::Group { group: g.id, block: Some(b.id) }));
                targets.push(Target::Group { group: g.id, block: None });
            }
            for t in targets {
                if let Some(o) = p.option_at(&j, t) {
                    prop_assert!(chosen.score() <= o.score() + 1e-9, "chose {:?} ({}) over {:?} ({})", chosen.kind, chosen.score(), t, o.score());
                }
            }
            let d = p.admit(j).unwrap();
            prop_assert_eq!(d.kind, chosen.kind);
            if d.kind == DecisionKind::Colocated {
                prop_assert_eq!(&d.rollout_nodes, &d.training_nodes);
                prop_assert_eq!(p.group(d.group).unwrap().members.len(), 1);
            }
        }
        check_groups(&p)?;
    }

    /// Consolidation moves, carried out as the replay and the server do (leave, then admit at
    /// the target), never break residency or the SLO of any member of the receiving group.
    #[test]
    fn consolidation_keeps_memory_and_slo(jobs in arb_jobs(14), departures in prop::collection::vec(any::<u16>(), 1..14)) {
        let mut p = placer();
        let n = jobs.len() as u32;
        for j in jobs {
            p.admit(j).unwrap();
        }
        for x in departures {
            let victim = JobId(x as u32 % n);
            let Some(g) = p.group_of(victim) else { continue };
            p.depart(victim).unwrap();
            let movable = all_movable(&p);
            let Some(m) = consolidate::for_lone_group(&p, g, &movable) else { continue };
            prop_assert!(m.after < m.before);
            let gid = p.group_of(m.job).unwrap();
            let mover = p.group(gid).unwrap().members.iter().find(|x| x.job.id == m.job).unwrap().job.clone();
            p.depart(m.job).unwrap();
            let d = p.admit_to(mover, m.target).expect("a planned target takes the job");
            check_slo(&p, d.group)?;
            check_groups(&p)?;
        }
    }

    /// Jobs that moved are never movable again inside their cooldown, and the hourly budget
    /// caps the moves.
    #[test]
    fn movable_respects_cooldown_and_budget(jobs in arb_jobs(10), moves in prop::collection::vec((any::<u16>(), 0u64..20_000), 0..30)) {
        let mut p = placer();
        let n = jobs.len() as u32;
        for j in jobs {
            p.admit(j).unwrap();
        }
        let limits = ChurnLimits { cooldown: Micros::from_secs(3_600), max_moves_per_hour: 5 };
        let mut churn = Churn::new(limits);
        let mut now = Micros(0);
        let mut history: Vec<(JobId, Micros)> = Vec::new();
        for (x, dt) in moves {
            now += Micros::from_secs(dt);
            let movable = consolidate::movable(&p, &mut churn, now, |_| Some(consolidate::Progress { remaining: 10, slack: None }));
            let recent = history.iter().filter(|(_, t)| now.saturating_sub(*t) < Micros::from_secs(3_600)).count();
            if recent >= 5 {
                prop_assert!(movable.is_empty(), "budget spent");
            }
            for (job, t) in &history {
                if now.saturating_sub(*t) < limits.cooldown {
                    prop_assert!(!movable.contains_key(job), "{:?} moved at {:?}, now {:?}", job, t, now);
                }
            }
            let job = JobId(x as u32 % n);
            if movable.contains_key(&job) {
                churn.record(job, now);
                history.push((job, now));
            }
        }
    }
}

#[test]
fn a_move_costs_a_cold_start_and_half_an_iteration_on_the_jobs_own_nodes() {
    let j = job(0, 100, 100, 1.5);
    let c = config(PlacePolicy::Weave);
    let m = MoveCost::estimate(
        &j,
        consolidate::Progress { remaining: 10, slack: None },
        (c.rollout_node_price, c.train_node_price),
    );
    // 7B: 38.8 s + 32.7 s cold; solo 200.9 s (0.9 s sync) -> 100.45 s; at $57.04/h.
    assert_eq!(m.horizon, Micros(10 * 200_900_000));
    let lost = 71.5 + 100.45;
    assert!((m.once.as_dollars() - lost * 57.04 / 3600.0).abs() < 1e-5, "{:?}", m.once);
}

/// Predictions are shared between jobs of equal shape: a stale job and its on-policy twin
/// time differently, so their shapes differ (a shared prediction gave one the other's period).
#[test]
fn staleness_is_part_of_a_jobs_shape() {
    let a = job(0, 100, 100, 1.5);
    let mut b = a.clone();
    b.staleness = 1;
    assert_ne!(weave_place::group::shape(&a), weave_place::group::shape(&b));
    assert!(b.solo() < a.solo(), "solo-async overlaps the phases");
}

/// A move costs the mover its cold start and a lost half iteration: its SLO must absorb
/// that from the slack it banked plus what the target leaves on each remaining iteration.
#[test]
fn a_move_must_fit_in_the_movers_slo() {
    let j = job(0, 100, 100, 1.5); // solo 200.9 s, allowed 301.35 s an iteration
    let cost = |remaining, slack| {
        MoveCost::estimate(&j, consolidate::Progress { remaining, slack }, (Default::default(), Default::default()))
    };
    let delay = cost(10, None).delay;
    assert_eq!(delay, Micros(71_500_000 + 100_450_000));
    // Unknown slack (the server): not checked.
    assert!(cost(0, None).affordable(&j, Micros::from_secs(10_000)));
    // A target at the SLO's limit leaves nothing: the banked slack alone must pay.
    let at_limit = Micros(301_350_000);
    assert!(!cost(100, Some(Micros(delay.0 - 1))).affordable(&j, at_limit));
    assert!(cost(100, Some(delay)).affordable(&j, at_limit));
    // A faster target pays the move back over the remaining iterations (100.45 s each here).
    let solo_pace = Micros(200_900_000);
    assert!(!cost(1, Some(Micros::ZERO)).affordable(&j, solo_pace));
    assert!(cost(2, Some(Micros::ZERO)).affordable(&j, solo_pace));
}
