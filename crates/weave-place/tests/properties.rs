//! Placement invariants on random workloads.

mod common;

use common::{config, of_model};
use proptest::prelude::*;
use weave_core::{Bytes, JobId};
use weave_place::optimal::{brute_force, optimal, Prices};
use weave_place::{PlaceJob, PlacePolicy, Placer};

fn arb_job(id: u32) -> impl Strategy<Value = PlaceJob> {
    (30u64..600, 30u64..600, 100u32..200, prop::sample::select(vec![3u32, 7, 14, 32]), 0u8..10).prop_map(
        move |(roll, train, slo, model, wide)| {
            let mut j = of_model(id, roll, train, slo as f64 / 100.0, model);
            if wide == 0 {
                j.rollout_width = 2;
                j.train_width = 2;
                j.rollout_state = Bytes(j.rollout_state.0 / 2);
            }
            j
        },
    )
}

fn arb_jobs(max: usize) -> impl Strategy<Value = Vec<PlaceJob>> {
    (1..=max).prop_flat_map(|n| (0..n as u32).map(arb_job).collect::<Vec<_>>())
}

fn prices() -> Prices {
    let c = config(PlacePolicy::Weave);
    Prices { rollout_node: c.rollout_node_price, train_node: c.train_node_price }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Every admission leaves every group within DRAM and every member of the receiving group
    /// within its SLO under the model, and no group mixes spot and on-demand jobs; isolated
    /// provisioning always exists, so admission in elastic mode never fails.
    #[test]
    fn admissions_respect_memory_and_slo(jobs in arb_jobs(16), departures in prop::collection::vec(any::<u16>(), 0..6),
                                         policy in prop::sample::select(vec![PlacePolicy::Weave, PlacePolicy::Random, PlacePolicy::MostIdle]),
                                         try_saturated in any::<bool>(), spots in prop::collection::vec(any::<bool>(), 16)) {
        let mut cfg = config(policy);
        cfg.skip_saturated = !try_saturated;
        cfg.spot_rollout_node_price = Some(weave_core::Money(cfg.rollout_node_price.0 * 2 / 5));
        let res = cfg.residency;
        let mut p = Placer::new(cfg);
        for (i, mut j) in jobs.into_iter().enumerate() {
            j.spot = spots[i];
            let d = p.admit(j).expect("isolated provisioning is always possible");
            let g = p.group(d.group).unwrap();
            for (k, m) in g.members.iter().enumerate() {
                prop_assert!(g.prediction.coexec[k].0 as f64 <= m.job.slo * m.job.solo().0 as f64 + 1.0,
                    "member {:?} over its SLO", m.job.id);
            }
            for g in p.groups() {
                prop_assert!(g.members.iter().all(|m| m.job.spot == g.spot()), "group {:?} mixes tiers", g.id);
                prop_assert!(g.blocks.iter().all(|b| b.used <= res.rollout_dram));
                prop_assert!(g.train_used <= res.train_dram);
                let used: u64 = g.members.iter().map(|m| m.job.train_state_total.0 / g.train_width() as u64).sum();
                prop_assert_eq!(used, g.train_used.0);
            }
            if let Some(&x) = departures.get(i) {
                let victim = JobId(x as u32 % (i as u32 + 1));
                if p.group_of(victim).is_some() {
                    p.depart(victim).unwrap();
                }
            }
        }
        let (r, t) = p.nodes_in_use();
        let held: u32 = p.groups().map(|g| g.rollout_node_count()).sum();
        prop_assert_eq!(r, held);
        prop_assert_eq!(t, p.groups().map(|g| g.train_width()).sum::<u32>());
    }

    /// With fixed pools and an environment pool, the placed agentic jobs' sandboxes never hold
    /// more than the pool's cores, whatever arrives and departs; a job refused for the
    /// environment is refused only when its cores do not fit in what is left.
    #[test]
    fn the_environment_pool_is_never_oversubscribed(jobs in arb_jobs(16), cores in prop::collection::vec(0u8..5, 16),
                                                    departures in prop::collection::vec(any::<u16>(), 0..8)) {
        const POOL: f64 = 256.0;
        let mut cfg = config(PlacePolicy::Weave);
        cfg.capacity = Some((64, 64));
        cfg.env_cores = Some(POOL);
        let mut p = Placer::new(cfg);
        for (i, mut j) in jobs.into_iter().enumerate() {
            j.env_cores = cores[i] as f64 * 48.0;
            let (needs, before) = (j.env_cores, p.env_cores_held());
            match p.admit(j) {
                Ok(_) => {}
                Err(weave_place::PlaceError::NoEnvironment { .. }) => prop_assert!(before + needs > POOL),
                Err(e) => prop_assert!(false, "unexpected refusal: {e}"),
            }
            prop_assert!(p.env_cores_held() <= POOL, "{} cores held of {POOL}", p.env_cores_held());
            if let Some(&x) = departures.get(i) {
                let victim = JobId(x as u32 % (i as u32 + 1));
                if p.group_of(victim).is_some() {
                    p.depart(victim).unwrap();
                }
            }
        }
    }

    /// The exact optimiser is never worse than the online heuristic.
    #[test]
    fn optimiser_never_worse_than_heuristic(jobs in arb_jobs(7), try_saturated in any::<bool>()) {
        let mut cfg = config(PlacePolicy::Weave);
        cfg.skip_saturated = !try_saturated;
        let res = cfg.residency;
        let mut p = Placer::new(cfg);
        for j in jobs.clone() {
            p.admit(j).unwrap();
        }
        let opt = optimal(&jobs, prices(), &res).expect("every job fits alone");
        prop_assert!(opt.cost_per_hour <= p.hourly_cost(), "optimal {:?} > heuristic {:?}", opt.cost_per_hour, p.hourly_cost());
        let covered: usize = opt.groups.iter().map(|g| g.jobs.len()).sum();
        prop_assert_eq!(covered, jobs.len());
    }

    /// The optimiser's dynamic programme with pruning equals plain enumeration.
    #[test]
    fn optimiser_equals_brute_force(jobs in arb_jobs(5)) {
        let res = config(PlacePolicy::Weave).residency;
        let opt = optimal(&jobs, prices(), &res).map(|p| p.cost_per_hour);
        prop_assert_eq!(opt, brute_force(&jobs, prices(), &res));
    }
}
