//! Lending idle rollout blocks across groups in the replay (Weave with lending on). Which
//! block a rollout borrows is `weave_place::lending` (the server runs the same policy); this
//! module keeps the loans, charges them, and reclaims them.
//!
//! The lender is never delayed: a member joining or leaving the lender's group reclaims its
//! loans at once (the borrower pays what that costs it, by the same model), and a lender
//! rollout that starts while its block is still lent is counted (`lender_delays`; the tests
//! hold it at 0).

use super::{Engine, Placed};
use crate::metrics::LendingCounts;
use std::collections::BTreeMap;
use weave_core::{Bytes, GroupId, JobId, Micros, Pool};
use weave_dispatch::{Dispatcher, EventRecord, LogEntry, LogKind, Phase};
use weave_place::lending::{best_loan, lendable, step_at, Borrower, LendingDriver, LoanModel, Shape};
use weave_place::Placer;

#[derive(Clone, Copy)]
struct Loan {
    borrower: usize,
    epoch: u32,
    /// The borrower's rollout iteration (for the event log).
    iteration: u64,
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
    model: LoanModel,
    pub(super) counts: LendingCounts,
}

impl Lending {
    pub(super) fn new(seed: u64) -> Lending {
        Lending { loans: BTreeMap::new(), model: LoanModel::new(seed), counts: LendingCounts::default() }
    }
}

impl LendingDriver for Engine<'_> {
    fn placer(&self) -> &Placer {
        &self.placer
    }

    fn dispatcher(&self, g: GroupId) -> Option<&Dispatcher> {
        self.dispatchers.get(&g)
    }

    fn training_end(&self, job: JobId, running: bool, iteration: u64) -> Option<Micros> {
        let i = job.0 as usize;
        let s = self.states[i].as_ref()?;
        let t = self.training_time(i, s.placed?, iteration);
        Some(if running { s.train_started + t } else { self.now + t })
    }

    fn withheld(&self, g: GroupId, block: u32) -> bool {
        let key = (g, block);
        let stragglers = self.stragglers.get(&key).is_some_and(|&(until, _)| until > self.now);
        let lent = self.lending.as_ref().is_none_or(|l| l.loans.contains_key(&key));
        lent || stragglers || self.on_spot(g)
    }

    fn rollout_host_dram(&self) -> Bytes {
        self.cluster.rollout.host_dram()
    }
}

impl Engine<'_> {
    /// Turns lending on (Weave only; spot groups neither lend nor borrow).
    pub fn with_lending(mut self, on: bool) -> Self {
        self.lending = on.then(|| Lending::new(self.cfg.seed));
        self
    }

    /// Job `i` starts a rollout of plain duration `d` on its own block: borrows the idle block
    /// of another group that shortens it most, if any gains enough. Returns its duration.
    pub(super) fn borrow(&mut self, i: usize, iteration: u64, p: Placed, d: Micros) -> Micros {
        if self.lending.is_none() || d == Micros::ZERO || self.on_spot(p.group) {
            return d;
        }
        let borrower = Borrower::of(&self.jobs[i].spec, &self.jobs[i].place, p.block_width);
        let offers = lendable(&*self, p.group);
        let (now, gpus) = (self.now, self.gpus().0);
        let epoch = self.states[i].as_ref().map_or(0, |s| s.epoch);
        let lending = self.lending.as_mut().expect("checked");
        let Some(c) = best_loan(&mut lending.model, &offers, &borrower, now, d) else { return d };
        let gpus = c.lender.nodes * gpus;
        let (from, until, steps, factor, shape) = (c.from, c.until, c.steps, c.factor, c.shape);
        let loan =
            Loan { borrower: i, epoch, iteration, gpus, shape, start: now, from, until, plain: d, steps, factor };
        lending.loans.insert((c.lender.group, c.lender.block), loan);
        self.log_loan((c.lender.group, c.lender.block), &loan, LogKind::Lent);
        let lending = self.lending.as_mut().expect("checked");
        let shorter = d.scale(factor);
        lending.counts.loans += 1;
        lending.counts.saved_us += (d - shorter).0;
        shorter
    }

    /// Whether `g` is a spot group (spot groups neither lend nor borrow).
    fn on_spot(&self, g: GroupId) -> bool {
        self.spot.is_some() && self.placer.group(g).is_some_and(|grp| grp.spot())
    }

    /// Job `i`'s rollout ended or it left: the blocks it borrowed go back.
    pub(super) fn return_loans(&mut self, i: usize) {
        for (key, loan) in self.take_loans(|_, l| l.borrower == i) {
            self.log_loan(key, &loan, LogKind::LoanEnded);
            self.charge_loan(&loan);
        }
    }

    /// Group `g` changed (a member joined or left): its lent blocks are taken back now, and
    /// each borrower's rollout runs on without them from here, as the model says.
    pub(super) fn reclaim_from(&mut self, g: GroupId) {
        for (key, loan) in self.take_loans(|&(lender, _), _| lender == g) {
            self.log_loan(key, &loan, LogKind::LoanEnded);
            self.charge_loan(&loan);
            if self.now < loan.until {
                self.cut_short(&loan);
            }
        }
    }

    /// Removes the loans `pick` chooses, in block order.
    fn take_loans(&mut self, pick: impl Fn(&(GroupId, u32), &Loan) -> bool) -> Vec<((GroupId, u32), Loan)> {
        let Some(lending) = self.lending.as_mut() else { return Vec::new() };
        let keys: Vec<_> = lending.loans.iter().filter(|(k, l)| pick(k, l)).map(|(k, _)| *k).collect();
        keys.iter().filter_map(|&k| Some((k, lending.loans.remove(&k)?))).collect()
    }

    /// Writes a loan made (`Lent`, with its deadline) or ended early (`LoanEnded`) into the
    /// event log, so a reader can check the lender against it without the engine's counters.
    /// A loan the lender's own rollout takes back is not logged: whether that came too early
    /// is what such a reader decides.
    fn log_loan(&mut self, (group, block): (GroupId, u32), loan: &Loan, kind: LogKind) {
        if !self.cfg.events {
            return;
        }
        let until = (kind == LogKind::Lent).then_some(loan.until);
        let entry = LogEntry {
            time: self.now,
            job: JobId(loan.borrower as u32),
            kind,
            phase: Some(Phase::Rollout),
            iteration: loan.iteration,
            nodes: vec![block],
            switch: None,
            until,
        };
        self.events.push(EventRecord { group, entry });
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
        let at = step_at(loan.start, loan.plain, self.now);
        let factor = lending.model.factor(loan.shape, (loan.steps.0, at.min(loan.steps.1)));
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
