//! A rollout that borrows idle workers for a while (lending across groups): the request-level
//! model with `workers` more workers from `from` to `until` (seconds from the rollout's start).
//!
//! When the lent workers arrive, the unfinished requests are spread evenly over all workers;
//! each moved request first re-computes the tokens it had produced on its new worker (no KV
//! cache moves, as in long-tail migration). When the loan is reclaimed, the requests still on
//! the lent workers move back the same way, each onto the own worker with the fewest. Decode is
//! memory-bound, so a worker gains only because its step is cheaper with fewer active
//! sequences (`step_per_active`), and a long tail of a few sequences gains nothing: the model
//! does not let extra workers help more than that.

use super::{fill, RolloutConfig, Seq, Worker};
use std::collections::VecDeque;

/// Extra workers lent to one rollout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loan {
    pub workers: u32,
    /// When they can take requests (after they loaded the job's weights), and when they are
    /// taken back, in seconds from the rollout's start.
    pub from: f64,
    pub until: f64,
}

/// When the last request of `lengths` finishes on the job's own workers (all available at
/// time 0) helped by `loan`.
pub fn simulate_with_loan(cfg: &RolloutConfig, lengths: &[u32], loan: Loan) -> f64 {
    let mut queue: VecDeque<u32> = lengths.iter().copied().collect();
    let mut own: Vec<Worker> = (0..cfg.workers.max(1)).map(|_| Worker { clock: 0.0, active: Vec::new() }).collect();
    for w in &mut own {
        fill(w, &mut queue, cfg.slots);
    }
    let mut end = 0.0f64;
    if loan.workers == 0 || loan.until <= loan.from {
        run_until(&mut own, &mut queue, cfg, f64::INFINITY, &mut end);
        return end;
    }
    run_until(&mut own, &mut queue, cfg, loan.from, &mut end);
    let own_count = own.len();
    let mut all = own;
    all.extend((0..loan.workers).map(|_| Worker { clock: loan.from, active: Vec::new() }));
    spread(&mut all, own_count, cfg);
    run_until(&mut all, &mut queue, cfg, loan.until, &mut end);
    let lent = all.split_off(own_count);
    let mut own = all;
    for s in lent.into_iter().flat_map(|w| w.active) {
        let w = own.iter_mut().min_by_key(|w| w.active.len()).expect("a job has a worker");
        w.clock = w.clock.max(loan.until) + regeneration(cfg, &s);
        w.active.push(s);
    }
    run_until(&mut own, &mut queue, cfg, f64::INFINITY, &mut end);
    end
}

/// Seconds a moved sequence spends re-computing what it had produced.
fn regeneration(cfg: &RolloutConfig, s: &Seq) -> f64 {
    s.generated as f64 * cfg.step_base / cfg.prefill_speedup
}

/// Moves sequences from the first `own` workers onto the lent ones after them until no worker
/// holds more than an even share.
fn spread(workers: &mut [Worker], own: usize, cfg: &RolloutConfig) {
    let total: usize = workers.iter().map(|w| w.active.len()).sum();
    let share = total.div_ceil(workers.len());
    let (own_workers, lent) = workers.split_at_mut(own);
    for w in own_workers {
        while w.active.len() > share {
            let Some(dest) = lent.iter_mut().filter(|l| l.active.len() < share).min_by_key(|l| l.active.len()) else {
                return;
            };
            let s = w.active.pop().expect("more than a share");
            dest.clock += regeneration(cfg, &s);
            dest.active.push(s);
        }
    }
}

/// Runs every worker's request completions up to `t` (pulling queued requests as slots free),
/// then brings the busy ones to `t`; `end` is the latest completion seen.
fn run_until(workers: &mut [Worker], queue: &mut VecDeque<u32>, cfg: &RolloutConfig, t: f64, end: &mut f64) {
    loop {
        let next = workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.next_finish(cfg).map(|f| (f, i)))
            .filter(|&(f, _)| f <= t)
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some((at, i)) = next else { break };
        let w = &mut workers[i];
        let min = w.active.iter().map(|s| s.remaining).min().unwrap_or(0);
        w.advance(min, cfg);
        w.active.retain(|s| s.remaining > 0);
        *end = end.max(at);
        fill(w, queue, cfg.slots);
    }
    if t.is_finite() {
        for w in workers.iter_mut().filter(|w| !w.active.is_empty()) {
            w.advance_to(t, cfg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{simulate_rollout, MigrationTrigger};
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn cfg() -> RolloutConfig {
        RolloutConfig::for_job(512, 8192, 1, 1)
    }

    fn lengths(seed: u64) -> Vec<u32> {
        cfg().draw_lengths(&mut Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    #[test]
    fn without_a_loan_it_is_the_plain_rollout() {
        let c = cfg();
        for seed in 0..4 {
            let l = lengths(seed);
            let plain = simulate_rollout(&c, &l, &[0.0; 8], MigrationTrigger::Never).end;
            let none = Loan { workers: 0, from: 0.0, until: 1e9 };
            assert_eq!(simulate_with_loan(&c, &l, none), plain);
            let empty = Loan { workers: 8, from: 5.0, until: 5.0 };
            assert_eq!(simulate_with_loan(&c, &l, empty), plain);
        }
        // A queue longer than the slots: requests wait for slots in the same order.
        let small = RolloutConfig { slots: 8, ..c };
        let l = lengths(9);
        let plain = simulate_rollout(&small, &l, &[0.0; 8], MigrationTrigger::Never).end;
        assert_eq!(simulate_with_loan(&small, &l, Loan { workers: 0, from: 0.0, until: 0.0 }), plain);
    }

    #[test]
    fn a_doubled_fleet_gains_what_the_cheaper_step_gives_and_no_more() {
        // 64 sequences per worker: a step costs 2x a lone one; spread over twice the workers,
        // 1.5x. Lent for the whole rollout from the start, nothing has been produced yet, so
        // nothing is re-computed: the rollout can be at most 1.5/2 as long, and the tail
        // (a few sequences, steps near 1x) gains nearly nothing, so it is longer than that.
        let c = cfg();
        let l = lengths(1);
        let plain = simulate_rollout(&c, &l, &[0.0; 8], MigrationTrigger::Never).end;
        let lent = simulate_with_loan(&c, &l, Loan { workers: 8, from: 0.0, until: f64::INFINITY });
        assert!(lent < plain, "{lent} vs {plain}");
        assert!(lent >= plain * 0.75 - 1e-9, "{lent} vs {plain}");
    }

    #[test]
    fn a_late_or_short_loan_helps_less_and_a_reclaim_costs_the_moves_back() {
        let c = cfg();
        let l = lengths(2);
        let plain = simulate_rollout(&c, &l, &[0.0; 8], MigrationTrigger::Never).end;
        let whole = simulate_with_loan(&c, &l, Loan { workers: 8, from: 0.0, until: f64::INFINITY });
        let late = simulate_with_loan(&c, &l, Loan { workers: 8, from: plain * 0.3, until: f64::INFINITY });
        let short = simulate_with_loan(&c, &l, Loan { workers: 8, from: 0.0, until: plain * 0.3 });
        assert!(whole < late && late < plain, "{whole} {late} {plain}");
        assert!(whole < short, "{whole} {short}");
        // Lent only after the rollout has ended: nothing changes.
        let after = simulate_with_loan(&c, &l, Loan { workers: 8, from: plain + 1.0, until: plain + 9.0 });
        assert_eq!(after, plain);
    }

    #[test]
    fn every_request_is_finished_exactly_once() {
        // With every request the same length the end is known by hand: 512 requests of 100
        // tokens on 8 workers (64 each, step 2.0 x base) lent 8 more at 50 steps: 32 move to
        // each lent worker, which re-computes 50 tokens each (32 x 50 / 100 = 16 base) and
        // then decodes 50 steps of 32 sequences at 1.5; the own workers decode 50 steps at 1.5.
        let c = RolloutConfig { step_base: 1.0, ..cfg() };
        let l = vec![100; 512];
        let from = 50.0 * 2.0;
        let run = simulate_with_loan(&c, &l, Loan { workers: 8, from, until: f64::INFINITY });
        let expected = from + 16.0 + 50.0 * 1.5;
        assert!((run - expected).abs() < 1e-9, "{run} vs {expected}");
    }
}
