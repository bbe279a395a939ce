//! Lending idle rollout blocks across groups: which block a starting rollout borrows, and
//! until when. Written once for the replay (the engine) and the server (the plane), each
//! behind [`LendingDriver`].
//!
//! A rollout block is idle for a predictable window when every member on it waits for a
//! training of its own before its next rollout (`Dispatcher::rollout_hold`): the window ends
//! when the earliest of those trainings can end, less the members' warm wake. A rollout that
//! starts in another group may borrow such a block: the lender's engine sleeps, the borrower's
//! loads (warm where the lender's nodes have host DRAM to spare for the borrower's state, else
//! cold), the borrower's requests are spread onto it, and at the reclaim the requests still
//! there move back. How much that shortens the rollout comes from the request-level model
//! (`weave_dispatch::rollout::simulate_with_loan`); a loan is taken only where it gains at
//! least [`MIN_GAIN`].

use crate::Placer;
use std::collections::BTreeMap;
use weave_core::{Bytes, GroupId, JobId, Micros};
use weave_dispatch::rollout::{simulate_with_loan, Loan as LentWorkers, RolloutConfig};
use weave_dispatch::{Dispatcher, RolloutHold};
use weave_model::named_stream;

/// Loan windows are rounded to this many steps of the rollout (start up, reclaim down).
pub const STEPS: u32 = 32;
/// Sampled batches behind each window's gain.
const SAMPLES: usize = 3;
/// A loan must shorten the rollout by at least this share to be worth the moves.
pub const MIN_GAIN: f64 = 0.01;

/// What the request-level model needs of a rollout and a loan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub requests: u32,
    pub max_tokens: u32,
    pub nodes: u32,
    pub tp: u32,
    pub lent_nodes: u32,
}

/// A sampled batch's response lengths and how long it lasts without a loan (seconds of the
/// request-level model).
type Batch = (Vec<u32>, f64);

/// The request-level model's answers, cached: how much a loan window shortens a rollout shape.
#[derive(Clone, Debug)]
pub struct LoanModel {
    factors: BTreeMap<(Shape, u32, u32), f64>,
    /// Per rollout shape (requests, max tokens, nodes, tensor parallelism): its sampled batches.
    batches: BTreeMap<(u32, u32, u32, u32), Vec<Batch>>,
    seed: u64,
}

impl LoanModel {
    /// Batches are drawn from the named stream `lending-shape` of `seed`.
    pub fn new(seed: u64) -> LoanModel {
        LoanModel { factors: BTreeMap::new(), batches: BTreeMap::new(), seed }
    }

    /// The rollout's duration with the loan over its plain one, for a window of `steps`
    /// (from, until) in `STEPS`ths of the plain rollout (`until` = `STEPS`: to the end).
    pub fn factor(&mut self, shape: Shape, steps: (u32, u32)) -> f64 {
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

/// What the lending policy asks of whoever drives the groups (the replay's engine, the
/// server's plane).
pub trait LendingDriver {
    fn placer(&self) -> &Placer;
    fn dispatcher(&self, g: GroupId) -> Option<&Dispatcher>;
    /// When `job`'s training of `iteration` ends at the earliest (`running`: it has started),
    /// `None` if the driver cannot tell.
    fn training_end(&self, job: JobId, running: bool, iteration: u64) -> Option<Micros>;
    /// Whether block `block` of `g` may not be lent now (lent already, still busy, spot).
    fn withheld(&self, g: GroupId, block: u32) -> bool;
    /// Host DRAM of a rollout node.
    fn rollout_host_dram(&self) -> Bytes;
}

/// A block another group could lend now: its nodes, and when it must be back (its members'
/// earliest next rollout, less their wake).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lendable {
    pub group: GroupId,
    pub block: u32,
    pub nodes: u32,
    /// Host DRAM per node its own members' states leave free.
    pub free_dram: Bytes,
    pub until: Micros,
    pub wake: Micros,
}

/// Every block of a group other than `borrower` that is idle until a known time and not
/// withheld, in placement order.
pub fn lendable(d: &impl LendingDriver, borrower: GroupId) -> Vec<Lendable> {
    let mut out = Vec::new();
    let dram = d.rollout_host_dram();
    for g in d.placer().groups().filter(|g| g.id != borrower && !g.colocated) {
        for b in &g.blocks {
            if d.withheld(g.id, b.id) {
                continue;
            }
            if let Some((until, wake)) = idle_until(d, g.id, b.id) {
                let (nodes, free_dram) = (b.nodes.len() as u32, Bytes(dram.0.saturating_sub(b.used.0)));
                out.push(Lendable {
                    group: g.id,
                    block: b.id,
                    nodes,
                    free_dram,
                    until: until.saturating_sub(wake),
                    wake,
                });
            }
        }
    }
    out
}

/// When block `block` of `g` may next be needed by one of its members, and the longest warm
/// wake among them; `None` if a member may need it soon.
fn idle_until(d: &impl LendingDriver, g: GroupId, block: u32) -> Option<(Micros, Micros)> {
    let group = d.placer().group(g)?;
    let disp = d.dispatcher(g)?;
    let (mut until, mut wake) = (Micros::MAX, Micros::ZERO);
    for m in group.members.iter().filter(|m| m.block == block) {
        if let RolloutHold::Training { running, iteration } = disp.rollout_hold(m.job.id)? {
            until = until.min(d.training_end(m.job.id, running, iteration)?);
        }
        wake = wake.max(m.job.costs.rollout_warm);
    }
    (until != Micros::MAX).then_some((until, wake))
}

/// The rollout that may borrow: its shape and what loading it on another block costs.
#[derive(Clone, Copy, Debug)]
pub struct Borrower {
    pub requests: u32,
    pub max_tokens: u32,
    /// Its own block's nodes and its tensor parallelism.
    pub nodes: u32,
    pub tp: u32,
    /// Its rollout state per node, and its warm and cold loads.
    pub state: Bytes,
    pub warm: Micros,
    pub cold: Micros,
}

impl Borrower {
    /// Job `spec`, placed as `place`, rolling out on a block of `nodes` nodes.
    pub fn of(spec: &weave_core::JobSpec, place: &crate::PlaceJob, nodes: u32) -> Borrower {
        Borrower {
            requests: spec.batch,
            max_tokens: spec.job_type.max_tokens,
            nodes,
            tp: RolloutConfig::tensor_parallel(spec.job_type.model),
            state: place.rollout_state,
            warm: place.costs.rollout_warm,
            cold: place.costs.rollout_cold,
        }
    }
}

/// A loan worth taking: the block, when the lent workers take requests (`from`) and when it
/// is reclaimed (`until`), the window in steps, and the rollout's duration with it over without.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoanChoice {
    pub lender: Lendable,
    pub from: Micros,
    pub until: Micros,
    pub shape: Shape,
    pub steps: (u32, u32),
    pub factor: f64,
}

/// The loan of one of `offers` that shortens `b`'s rollout of plain duration `d`, starting
/// `now`, the most (the first among equals), if it gains at least [`MIN_GAIN`].
pub fn best_loan(
    model: &mut LoanModel,
    offers: &[Lendable],
    b: &Borrower,
    now: Micros,
    d: Micros,
) -> Option<LoanChoice> {
    if d == Micros::ZERO {
        return None;
    }
    let mut best: Option<LoanChoice> = None;
    for lender in offers {
        // Warm where the lender's nodes have host DRAM to spare for the borrower's state
        // (kept there, its sync plan adding them as destinations), else cold.
        let load = if b.state <= lender.free_dram { b.warm } else { b.cold };
        let from = now + lender.wake + load;
        if lender.until <= from {
            continue;
        }
        let steps = (
            ((from - now).0 as u128 * STEPS as u128).div_ceil(d.0 as u128).min(STEPS as u128) as u32,
            ((lender.until - now).0 as u128 * STEPS as u128 / d.0 as u128).min(STEPS as u128) as u32,
        );
        let shape = Shape {
            requests: b.requests,
            max_tokens: b.max_tokens,
            nodes: b.nodes,
            tp: b.tp,
            lent_nodes: lender.nodes,
        };
        let factor = model.factor(shape, steps);
        if best.as_ref().is_none_or(|c| factor < c.factor) {
            best = Some(LoanChoice { lender: *lender, from, until: lender.until, shape, steps, factor });
        }
    }
    best.filter(|c| c.factor <= 1.0 - MIN_GAIN)
}

/// The step of a rollout of plain duration `plain`, started at `start`, that `now` falls in.
pub fn step_at(start: Micros, plain: Micros, now: Micros) -> u32 {
    ((now.saturating_sub(start)).0 as u128 * STEPS as u128 / plain.0.max(1) as u128) as u32
}
