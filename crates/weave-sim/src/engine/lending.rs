//! Lending idle rollout nodes across groups (Weave with lending on).
//!
//! A rollout block is idle for a predictable window when every member on it waits for a
//! training of its own before its next rollout (`Dispatcher::rollout_hold`): the window ends
//! when the earliest of those trainings can end (a running one's end is known, a waiting one
//! lasts at least its drawn duration; its sync after it is margin). A rollout that starts in
//! another group may borrow such a block: the lender's engine sleeps (a warm switch), the
//! borrower's is loaded (warm where the lender's nodes have host DRAM to spare for the
//! borrower's state, kept there and synced with its own nodes; cold otherwise), the borrower's
//! requests are spread onto it, and at the reclaim (the window's end less the lender's warm wake) the
//! requests still there move back. How much that shortens the rollout comes from the
//! request-level model (`weave_dispatch::rollout::simulate_with_loan`), not from a guess; a
//! loan is taken only where it gains at least [`MIN_GAIN`].
//!
//! The lender is never delayed: a member joining or leaving the lender's group reclaims its
//! loans at once (the borrower pays what that costs it, by the same model), and a lender
//! rollout that starts while its block is still lent is counted (`lender_delays`; the tests
//! hold it at 0).

use super::{Engine, Placed};
use crate::metrics::LendingCounts;
use std::collections::BTreeMap;
use weave_core::{Bytes, GroupId, Micros, Pool};
use weave_dispatch::rollout::{simulate_with_loan, Loan as LentWorkers, RolloutConfig};
use weave_dispatch::RolloutHold;
use weave_model::named_stream;

/// Loan windows are rounded to this many steps of the rollout (start up, reclaim down).
const STEPS: u32 = 32;
/// Sampled batches behind each window's gain.
const SAMPLES: usize = 3;
/// A loan must shorten the rollout by at least this share to be worth the moves.
const MIN_GAIN: f64 = 0.01;

/// What the request-level model needs of a rollout and a loan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    requests: u32,
    max_tokens: u32,
    nodes: u32,
    tp: u32,
    lent_nodes: u32,
}

/// A sampled batch's response lengths and how long it lasts without a loan (seconds of the
/// request-level model).
type Batch = (Vec<u32>, f64);

#[derive(Clone, Copy)]
struct Loan {
    borrower: usize,
    epoch: u32,
    gpus: u32,
    shape: Shape,
    /// When the rollout started (and the loan was made), when the lent workers took requests,
    /// and when the loan is reclaimed.
    start: Micros,
    from: Micros,
    until: Micros,
    /// The rollout's duration without the loan, the window in steps, and its factor.
    plain: Micros,
    steps: (u32, u32),
    factor: f64,
}

pub(super) struct Lending {
    loans: BTreeMap<(GroupId, u32), Loan>,
    factors: BTreeMap<(Shape, u32, u32), f64>,
    /// Per rollout shape (requests, max tokens, nodes, tensor parallelism): its sampled batches.
    batches: BTreeMap<(u32, u32, u32, u32), Vec<Batch>>,
    seed: u64,
    pub(super) counts: LendingCounts,
}

impl Lending {
    pub(super) fn new(seed: u64) -> Lending {
        Lending {
            loans: BTreeMap::new(),
            factors: BTreeMap::new(),
            batches: BTreeMap::new(),
            seed,
            counts: LendingCounts::default(),
        }
    }

    /// The rollout's duration with the loan over its plain one, for a window of `steps`
    /// (from, until) in `STEPS`ths of the plain rollout (`until` = `STEPS`: to the end).
    fn factor(&mut self, shape: Shape, steps: (u32, u32)) -> f64 {
        if steps.0 >= steps.1 {
            return 1.0;
        }
        if let Some(&f) = self.factors.get(&(shape, steps.0, steps.1)) {
            return f;
        }
        let cfg = RolloutConfig::for_job(shape.requests, shape.max_tokens, shape.nodes, shape.tp);
        let workers = RolloutConfig::for_job(shape.requests, shape.max_tokens, shape.lent_nodes, shape.tp).workers;
        let mut sum = 0.0;
        for (lengths, plain) in self.batches(shape, &cfg) {
            let at = |k: u32| if k >= STEPS { f64::INFINITY } else { plain * k as f64 / STEPS as f64 };
            let loan = LentWorkers { workers, from: at(steps.0), until: at(steps.1) };
            sum += simulate_with_loan(&cfg, lengths, loan) / plain.max(1e-9);
        }
        let f = sum / SAMPLES as f64;
        self.factors.insert((shape, steps.0, steps.1), f);
        f
    }

    /// The sampled batches of a rollout shape and how long each lasts without a loan: drawn
    /// once per shape (the same for every window and loan size, so windows compare fairly).
    fn batches(&mut self, shape: Shape, cfg: &RolloutConfig) -> &[Batch] {
        let key = (shape.requests, shape.max_tokens, shape.nodes, shape.tp);
        let seed = self.seed;
        self.batches.entry(key).or_insert_with(|| {
            let stream = (shape.max_tokens as u64) << 32 | (shape.requests as u64) << 8 | shape.nodes as u64;
            let mut rng = named_stream(seed, "lending-shape", stream);
            let none = LentWorkers { workers: 0, from: 0.0, until: 0.0 };
            (0..SAMPLES)
                .map(|_| {
                    let lengths = cfg.draw_lengths(&mut rng);
                    let plain = simulate_with_loan(cfg, &lengths, none);
                    (lengths, plain)
                })
                .collect()
        })
    }
}

/// A block another group could lend now: its nodes, and when it must be back (its members'
/// earliest next rollout, less their wake).
struct Lendable {
    key: (GroupId, u32),
    nodes: u32,
    /// Host DRAM per node its own members' states leave free.
    free_dram: Bytes,
    until: Micros,
    wake: Micros,
}

impl Engine<'_> {
    /// Turns lending on (Weave only; spot groups neither lend nor borrow).
    pub fn with_lending(mut self, on: bool) -> Self {
        self.lending = on.then(|| Lending::new(self.cfg.seed));
        self
    }

    /// Job `i` starts a rollout of plain duration `d` on its own block: borrows the idle block
    /// of another group that shortens it most, if any gains enough. Returns its duration.
    pub(super) fn borrow(&mut self, i: usize, p: Placed, d: Micros) -> Micros {
        if self.lending.is_none() || d == Micros::ZERO || self.on_spot(p.group) {
            return d;
        }
        let Some(loan) = self.best_loan(i, p, d).filter(|(l, _)| l.factor <= 1.0 - MIN_GAIN) else { return d };
        let (loan, key) = loan;
        let lending = self.lending.as_mut().expect("checked");
        lending.loans.insert(key, loan);
        let shorter = d.scale(loan.factor);
        lending.counts.loans += 1;
        lending.counts.saved_us += (d - shorter).0;
        shorter
    }

    /// The loan of a lendable block that would shorten job `i`'s rollout of `d` starting now
    /// the most, and the block's key.
    fn best_loan(&mut self, i: usize, p: Placed, d: Micros) -> Option<(Loan, (GroupId, u32))> {
        let job = &self.jobs[i];
        let tp = RolloutConfig::tensor_parallel(job.spec.job_type.model);
        let (state, costs) = (job.place.rollout_state, job.place.costs);
        let (requests, max_tokens) = (job.spec.batch, job.spec.job_type.max_tokens);
        let (now, gpus) = (self.now, self.gpus().0);
        let epoch = self.states[i].as_ref().map_or(0, |s| s.epoch);
        let mut best: Option<(Loan, (GroupId, u32))> = None;
        for lendable in self.lendable(p.group) {
            // Warm where the lender's nodes have host DRAM to spare for the borrower's state
            // (kept there, its sync plan adding them as destinations), else cold.
            let load = if state <= lendable.free_dram { costs.rollout_warm } else { costs.rollout_cold };
            let from = now + lendable.wake + load;
            if lendable.until <= from {
                continue;
            }
            let steps = (
                ((from - now).0 as u128 * STEPS as u128).div_ceil(d.0 as u128).min(STEPS as u128) as u32,
                ((lendable.until - now).0 as u128 * STEPS as u128 / d.0 as u128).min(STEPS as u128) as u32,
            );
            let shape = Shape { requests, max_tokens, nodes: p.block_width, tp, lent_nodes: lendable.nodes };
            let factor = self.lending.as_mut().expect("checked").factor(shape, steps);
            if best.as_ref().is_none_or(|(b, _)| factor < b.factor) {
                let gpus = lendable.nodes * gpus;
                let until = lendable.until;
                let loan = Loan { borrower: i, epoch, gpus, shape, start: now, from, until, plain: d, steps, factor };
                best = Some((loan, lendable.key));
            }
        }
        best
    }

    /// Whether `g` is a spot group (spot groups neither lend nor borrow).
    fn on_spot(&self, g: GroupId) -> bool {
        self.spot.is_some() && self.placer.group(g).is_some_and(|grp| grp.spot())
    }

    /// Every block of a group other than `borrower` that is idle until a known time and not
    /// already lent, in placement order.
    fn lendable(&self, borrower: GroupId) -> Vec<Lendable> {
        let Some(lending) = self.lending.as_ref() else { return Vec::new() };
        let mut out = Vec::new();
        let dram = self.cluster.rollout.host_dram();
        for g in self.placer.groups().filter(|g| g.id != borrower && !g.colocated && !self.on_spot(g.id)) {
            for b in &g.blocks {
                let key = (g.id, b.id);
                let stragglers = self.stragglers.get(&key).is_some_and(|&(until, _)| until > self.now);
                if lending.loans.contains_key(&key) || stragglers {
                    continue;
                }
                if let Some((until, wake)) = self.idle_until(g.id, b.id) {
                    let (nodes, free_dram) = (b.nodes.len() as u32, Bytes(dram.0.saturating_sub(b.used.0)));
                    out.push(Lendable { key, nodes, free_dram, until: until.saturating_sub(wake), wake });
                }
            }
        }
        out
    }

    /// When block `block` of `g` may next be needed by one of its members, and the longest
    /// warm wake among them; `None` if a member may need it soon.
    fn idle_until(&self, g: GroupId, block: u32) -> Option<(Micros, Micros)> {
        let group = self.placer.group(g)?;
        let disp = self.dispatchers.get(&g)?;
        let (mut until, mut wake) = (Micros::MAX, Micros::ZERO);
        for m in group.members.iter().filter(|m| m.block == block) {
            let i = m.job.id.0 as usize;
            let s = self.states[i].as_ref()?;
            let placed = s.placed?;
            if let RolloutHold::Training { running, iteration } = disp.rollout_hold(m.job.id)? {
                let t = self.training_time(i, placed, iteration);
                until = until.min(if running { s.train_started + t } else { self.now + t });
            }
            wake = wake.max(m.job.costs.rollout_warm);
        }
        (until != Micros::MAX).then_some((until, wake))
    }

    /// Job `i`'s rollout ended or it left: the blocks it borrowed go back.
    pub(super) fn return_loans(&mut self, i: usize) {
        for loan in self.take_loans(|_, l| l.borrower == i) {
            self.charge_loan(&loan);
        }
    }

    /// Group `g` changed (a member joined or left): its lent blocks are taken back now, and
    /// each borrower's rollout runs on without them from here, as the model says.
    pub(super) fn reclaim_from(&mut self, g: GroupId) {
        for loan in self.take_loans(|&(lender, _), _| lender == g) {
            self.charge_loan(&loan);
            if self.now < loan.until {
                self.cut_short(&loan);
            }
        }
    }

    /// Removes the loans `pick` chooses, in block order.
    fn take_loans(&mut self, pick: impl Fn(&(GroupId, u32), &Loan) -> bool) -> Vec<Loan> {
        let Some(lending) = self.lending.as_mut() else { return Vec::new() };
        let keys: Vec<_> = lending.loans.iter().filter(|(k, l)| pick(k, l)).map(|(k, _)| *k).collect();
        keys.iter().filter_map(|k| lending.loans.remove(k)).collect()
    }

    /// A lender's member starts a rollout on block `block` of `g`: a loan still running there
    /// past its reclaim and wake would have delayed it (counted; never expected).
    pub(super) fn lender_starts(&mut self, g: GroupId, block: u32) {
        let Some(lending) = self.lending.as_mut() else { return };
        let Some(loan) = lending.loans.remove(&(g, block)) else { return };
        if self.now < loan.until {
            lending.counts.lender_delays += 1;
            self.cut_short(&loan);
        }
        self.charge_loan(&loan);
    }

    /// The borrower of `loan` loses it now, before its reclaim: its rollout ends later by what
    /// the shorter window gives up.
    fn cut_short(&mut self, loan: &Loan) {
        let current = self.states[loan.borrower].as_ref().is_some_and(|s| s.epoch == loan.epoch && s.rolling);
        let lending = self.lending.as_mut().expect("lending");
        lending.counts.reclaimed_early += 1;
        if !current {
            return;
        }
        let at = ((self.now - loan.start).0 as u128 * STEPS as u128 / loan.plain.0.max(1) as u128) as u32;
        let factor = lending.factor(loan.shape, (loan.steps.0, at.min(loan.steps.1)));
        let delay = loan.plain.scale(factor).saturating_sub(loan.plain.scale(loan.factor));
        lending.counts.saved_us = lending.counts.saved_us.saturating_sub(delay.0);
        if let Some(s) = self.states[loan.borrower].as_mut() {
            s.rollout_extra += delay;
        }
    }

    /// Charges the lent GPUs up to now (or the reclaim): loading while the lender slept and
    /// the borrower's engine came up, then busy for the borrower.
    fn charge_loan(&mut self, loan: &Loan) {
        let end = self.now.min(loan.until);
        let loading = end.min(loan.from).saturating_sub(loan.start);
        let used = end.saturating_sub(loan.from);
        self.metrics.switching(Pool::Rollout, loan.gpus, loading);
        self.metrics.busy(Pool::Rollout, loan.gpus, used);
        let counts = &mut self.lending.as_mut().expect("lending").counts;
        counts.loading_gpu_us += loan.gpus as u128 * loading.0 as u128;
        counts.lent_gpu_us += loan.gpus as u128 * used.0 as u128;
    }
}
