//! A counterexample to "FIFO round-robin achieves T_cycle = max_j T_solo(j) in every
//! unsaturated group" (the brief's Theorem 1 applied to our dispatcher), and to "no other
//! periodic phase order beats round-robin", kept as a test.
//!
//! Job B spans rollout nodes {2, 3}; A runs on {2} and C on {3}. Loads: training 462 s,
//! node 2 420 s, node 3 427 s, against T_cycle = 475 s (C alone): unsaturated. The dispatcher
//! settles into a 611 s meta-iteration first-come, yet a periodic schedule with period 475 s
//! exists (built and checked below). Admission therefore predicts neither with the closed form
//! nor from first-come: the dispatcher follows a cyclic order chosen for the group, and the
//! prediction is that order's exact period (its event graph's maximum cycle mean).

use weave_core::{JobId, Micros};
use weave_dispatch::cycle::Period;
use weave_dispatch::order;
use weave_dispatch::timing::{
    closed_form, evaluate, run_group_first_come, run_group_unlogged, settled_period, simulate,
};
use weave_dispatch::Fairness;
use weave_dispatch::{SwitchCosts, TimingMember};

fn member(job: u32, roll: u64, train: u64, nodes: &[u32]) -> TimingMember {
    TimingMember {
        job: JobId(job),
        rollout: Micros::from_secs(roll),
        train: Micros::from_secs(train),
        nodes: nodes.to_vec(),
        costs: SwitchCosts::default(),
        sync: Micros::ZERO,
        resident: true,
        staleness: 0,
    }
}

fn group() -> Vec<TimingMember> {
    vec![member(0, 197, 4, &[2]), member(1, 223, 187, &[2, 3]), member(2, 204, 271, &[3])]
}

#[test]
fn fifo_round_robin_settles_slower_than_t_cycle() {
    let g = group();
    let cf = closed_form(&g).expect("the group is unsaturated");
    assert_eq!(cf.meta_iteration, Micros::from_secs(475));
    assert_eq!(cf.t_load, Micros::from_secs(462));
    // First-come settles into one chain that runs through every member's phases but C's,
    // back to back: B trains (187 s), A's training queues behind it (4 s), A rolls out on
    // node 2 (197 s), and B's rollout, which needs node 2 as well, waits for it (223 s) before
    // B trains again. C's phases fit in that chain's slack. The period is the chain's sum.
    let (a, b) = (&g[0], &g[1]);
    let chain = b.train + a.train + a.rollout + b.rollout;
    assert_eq!(chain, Micros::from_secs(611));
    for iterations in [100, 400] {
        let run = run_group_first_come(&g, iterations);
        let settled = settled_period(&run.train_ends[&JobId(0)], 8).expect("settled");
        assert_eq!(Micros(settled.ceil_micros()), chain, "after {iterations} iterations");
    }
}

/// The cyclic order admission chooses reaches the 475 s lower bound, and the dispatcher
/// following it settles there (first-come: 611 s).
#[test]
fn the_chosen_order_runs_at_its_exact_period() {
    let g = group();
    let (_, period) = order::best(&g);
    assert_eq!(period, Period::new(475_000_000, 1), "T_cycle, the lower bound, is reached");
    assert_eq!(evaluate(&g).meta_iteration, Micros(period.ceil_micros()));
    assert_eq!(simulate(&g, 400).meta_iteration, Micros(period.ceil_micros()));
    let run = run_group_unlogged(&g, 400, Fairness::RoundRobin);
    for m in &g {
        assert_eq!(settled_period(&run.train_ends[&m.job], 8), Some(period));
    }
}

/// The counterexample to "equal node sets: Theorem 1's closed form is what runs": two
/// members on one node, no switch costs. First-come settles at 7 s; the chosen order runs the
/// 6 s the closed form promises, and admission predicts exactly that.
#[test]
fn shared_node_first_come_loses_a_second_the_order_does_not() {
    let mut a = member(0, 3, 1, &[0]);
    a.sync = Micros::ZERO;
    let mut b = member(1, 1, 2, &[0]);
    b.sync = Micros::from_secs(3);
    let g = vec![a, b];
    assert_eq!(closed_form(&g).expect("unsaturated").meta_iteration, Micros::from_secs(6));
    let first = run_group_first_come(&g, 300);
    assert_eq!(
        settled_period(&first.train_ends[&JobId(0)], 4).map(|p| Micros(p.ceil_micros())),
        Some(Micros::from_secs(7))
    );
    let (_, period) = order::best(&g);
    assert_eq!(Micros(period.ceil_micros()), Micros::from_secs(6));
    let run = run_group_unlogged(&g, 300, Fairness::RoundRobin);
    for m in &g {
        assert_eq!(settled_period(&run.train_ends[&m.job], 4), Some(period));
    }
    assert_eq!(evaluate(&g).meta_iteration, Micros::from_secs(6));
}

/// A periodic schedule with period 475 s, checked for exclusive resources and each job's
/// barrier.
#[test]
fn a_475_second_periodic_schedule_exists() {
    const P: i64 = 475;
    let g = group();
    // (rollout start, training start) per job, modulo P.
    let starts: [(i64, i64); 3] = [(465, 190), (204, 0), (0, 204)];
    let secs = |t: Micros| (t.0 / 1_000_000) as i64;
    for (m, (r, t)) in g.iter().zip(starts) {
        let (roll, train) = (secs(m.rollout), secs(m.train));
        let train_at = if t >= r { t } else { t + P }; // the first training slot after the rollout
        assert!(train_at >= r + roll, "job {:?}: training at {train_at} before its rollout ends", m.job);
        assert!(r + P >= train_at + train, "job {:?}: next rollout before its training ends", m.job);
    }
    let overlaps = |a: (i64, i64), b: (i64, i64)| (-2..=2).any(|k| a.0 + k * P < b.1 && b.0 < a.1 + k * P);
    for i in 0..g.len() {
        for j in i + 1..g.len() {
            let ti = (starts[i].1, starts[i].1 + secs(g[i].train));
            let tj = (starts[j].1, starts[j].1 + secs(g[j].train));
            assert!(!overlaps(ti, tj), "trainings of {i} and {j} overlap");
            if g[i].nodes.iter().any(|n| g[j].nodes.contains(n)) {
                let ri = (starts[i].0, starts[i].0 + secs(g[i].rollout));
                let rj = (starts[j].0, starts[j].0 + secs(g[j].rollout));
                assert!(!overlaps(ri, rj), "rollouts of {i} and {j} overlap on a shared node");
            }
        }
    }
}
