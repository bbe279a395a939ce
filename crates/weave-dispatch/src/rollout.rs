//! A rollout request by request, and long-tail migration.
//!
//! A rollout is a batch of requests whose response lengths are long-tailed and capped at the
//! max length. The job's workers (one engine per GPU group on its H20 nodes) pull requests
//! from the job's queue into at most `slots` concurrent sequences each; one decode step
//! advances every active sequence on a worker by one token and costs
//! `step_base x (1 + step_per_active x active)` seconds (memory-bound decode reads the weights
//! once per step plus each sequence's KV cache). The phase ends when the last request ends,
//! so late in a rollout most workers sit idle behind a few long responses.
//!
//! Long-tail migration: once a trigger fires (a fraction of the requests is done, or the
//! remaining requests fit in `k` workers' slots), the unfinished requests move to `k`
//! destination workers and are re-generated there: no KV cache moves, so each moved request
//! first re-computes its prompt and the tokens it had produced, at prefill speed
//! (`prefill_speedup` times faster per token than decoding a lone sequence). The other
//! workers are released at once, and the next job's rollout can start on them.
//!
//! The constants are assumptions (the brief gives the mechanism, not these numbers); the step
//! base is calibrated per job so a rollout without migration lasts its profiled duration.

mod loan;

pub use loan::{simulate_with_loan, Loan};
use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RolloutConfig {
    pub requests: u32,
    pub max_tokens: u32,
    pub workers: u32,
    /// Concurrent sequences per worker.
    pub slots: u32,
    /// Median response length as a fraction of the max.
    pub median_fraction: f64,
    /// Log-space spread of response lengths.
    pub sigma: f64,
    /// Seconds per decode step of a lone sequence.
    pub step_base: f64,
    /// Extra step cost per active sequence, relative to `step_base`.
    pub step_per_active: f64,
    /// Prefill processes tokens this many times faster than decoding a lone sequence.
    pub prefill_speedup: f64,
}

impl RolloutConfig {
    /// A job on `nodes` 8-GPU H20 nodes with tensor parallelism `tp`: `8 x nodes / tp`
    /// workers sharing `requests`.
    pub fn for_job(requests: u32, max_tokens: u32, nodes: u32, tp: u32) -> Self {
        let workers = (8 * nodes / tp.max(1)).max(1);
        RolloutConfig {
            requests,
            max_tokens,
            workers,
            slots: requests.div_ceil(workers).max(1),
            median_fraction: 0.35,
            sigma: 0.6,
            step_base: 1.0,
            step_per_active: 1.0 / 64.0,
            prefill_speedup: 100.0,
        }
    }

    /// Tensor parallelism of a model's rollout engine: 32B and larger span two GPUs [paper,
    /// Table 2].
    pub fn tensor_parallel(model: weave_core::ModelSize) -> u32 {
        if model.params_b() >= 32.0 {
            2
        } else {
            1
        }
    }

    fn step(&self, active: usize) -> f64 {
        self.step_base * (1.0 + self.step_per_active * active as f64)
    }

    /// Draws one batch of response lengths (tokens, capped at the max).
    pub fn draw_lengths<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<u32> {
        let median = (self.median_fraction * self.max_tokens as f64).max(1.0);
        let dist = LogNormal::new(median.ln(), self.sigma.max(1e-9)).ok();
        (0..self.requests)
            .map(|_| {
                let x = dist.map(|d| d.sample(rng)).unwrap_or(median);
                (x.round() as u32).clamp(1, self.max_tokens)
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum MigrationTrigger {
    Never,
    /// Migrate once this fraction of the requests has finished.
    FractionDone(f64),
    /// Migrate once the unfinished requests fit into this many workers' slots.
    FitsInWorkers(u32),
}

/// The outcome of one rollout.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RolloutRun {
    /// When the last request finished.
    pub end: f64,
    /// When each worker was released for other work.
    pub released: Vec<f64>,
    /// When migration happened, if it did.
    pub migrated_at: Option<f64>,
    pub migrated_requests: u32,
}

#[derive(Clone, Debug)]
struct Seq {
    remaining: u32,
    generated: u32,
}

#[derive(Clone, Debug)]
struct Worker {
    clock: f64,
    active: Vec<Seq>,
}

impl Worker {
    /// Time of this worker's next request completion.
    fn next_finish(&self, cfg: &RolloutConfig) -> Option<f64> {
        let min = self.active.iter().map(|s| s.remaining).min()?;
        Some(self.clock + min as f64 * cfg.step(self.active.len()))
    }

    /// Decodes `tokens` steps (no sequence finishes before the last one).
    fn advance(&mut self, tokens: u32, cfg: &RolloutConfig) {
        self.clock += tokens as f64 * cfg.step(self.active.len());
        for s in &mut self.active {
            s.remaining -= tokens;
            s.generated += tokens;
        }
    }

    /// Advances to `t` (before its next finish): whole steps only.
    fn advance_to(&mut self, t: f64, cfg: &RolloutConfig) {
        if self.active.is_empty() || t <= self.clock {
            self.clock = self.clock.max(t);
            return;
        }
        let steps = ((t - self.clock) / cfg.step(self.active.len())).floor() as u32;
        let steps = steps.min(self.active.iter().map(|s| s.remaining).min().unwrap_or(0));
        self.advance(steps, cfg);
        self.clock = self.clock.max(t);
    }
}

/// Simulates one rollout of `lengths` on workers that become available at `start[w]`.
pub fn simulate_rollout(cfg: &RolloutConfig, lengths: &[u32], start: &[f64], trigger: MigrationTrigger) -> RolloutRun {
    let mut queue: std::collections::VecDeque<u32> = lengths.iter().copied().collect();
    let mut workers: Vec<Worker> = start.iter().map(|&t| Worker { clock: t, active: Vec::new() }).collect();
    // Workers pull requests only once they are available, so a worker that arrives late
    // (still finishing another job's stragglers) does not hold requests hostage.
    let mut arrived = vec![false; workers.len()];
    let total = lengths.len();
    let mut done = 0usize;
    let mut now = f64::NEG_INFINITY;
    loop {
        if should_migrate(cfg, trigger, done, total, &workers) {
            return migrate(cfg, trigger, workers, queue, now);
        }
        // The earliest next event: a worker arriving while requests wait, or a request
        // finishing (ties: arrivals first, then lowest index).
        let next = workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match arrived[i] {
                false if !queue.is_empty() => Some((w.clock, 0u8, i)),
                false => None,
                true => w.next_finish(cfg).map(|t| (t, 1u8, i)),
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let Some((t, kind, i)) = next else { break };
        now = t;
        let w = &mut workers[i];
        if kind == 0 {
            arrived[i] = true;
        } else {
            let min = w.active.iter().map(|s| s.remaining).min().unwrap_or(0);
            w.advance(min, cfg);
            let before = w.active.len();
            w.active.retain(|s| s.remaining > 0);
            done += before - w.active.len();
        }
        fill(w, &mut queue, cfg.slots);
    }
    let released: Vec<f64> = workers.iter().map(|w| w.clock).collect();
    let end = released.iter().copied().fold(0.0, f64::max);
    RolloutRun { end, released, migrated_at: None, migrated_requests: 0 }
}

fn fill(w: &mut Worker, queue: &mut std::collections::VecDeque<u32>, slots: u32) {
    while w.active.len() < slots as usize {
        match queue.pop_front() {
            Some(len) => w.active.push(Seq { remaining: len, generated: 0 }),
            None => break,
        }
    }
}

/// Whether the trigger has fired and migrating would free at least one busy worker.
fn should_migrate(
    cfg: &RolloutConfig,
    trigger: MigrationTrigger,
    done: usize,
    total: usize,
    workers: &[Worker],
) -> bool {
    let left = total - done;
    let fired = match trigger {
        MigrationTrigger::Never => false,
        MigrationTrigger::FractionDone(f) => done as f64 >= f * total as f64,
        MigrationTrigger::FitsInWorkers(k) => left as u64 <= k as u64 * cfg.slots as u64,
    };
    let busy = workers.iter().filter(|w| !w.active.is_empty()).count();
    fired && left > 0 && busy > dest_count(cfg, trigger, left)
}

fn dest_count(cfg: &RolloutConfig, trigger: MigrationTrigger, left: usize) -> usize {
    let need = left.div_ceil(cfg.slots.max(1) as usize).max(1);
    match trigger {
        MigrationTrigger::FitsInWorkers(k) => (k as usize).max(need).min(cfg.workers as usize),
        _ => need.min(cfg.workers as usize),
    }
}

fn migrate(
    cfg: &RolloutConfig,
    trigger: MigrationTrigger,
    mut workers: Vec<Worker>,
    queue: std::collections::VecDeque<u32>,
    t: f64,
) -> RolloutRun {
    // A worker that only becomes available later is released when it would have arrived.
    let mut released: Vec<f64> = workers.iter().map(|w| w.clock.max(t)).collect();
    for w in &mut workers {
        w.advance_to(t, cfg);
    }
    let mut moved: Vec<Seq> = Vec::new();
    for w in &mut workers {
        moved.append(&mut w.active);
    }
    moved.extend(queue.into_iter().map(|len| Seq { remaining: len, generated: 0 }));
    let moved_count = moved.len() as u32;
    let k = dest_count(cfg, trigger, moved.len());
    // Destinations: the first k workers. Longest work first, dealt round-robin.
    moved.sort_by_key(|s| std::cmp::Reverse(s.remaining));
    let mut dest: Vec<Vec<Seq>> = vec![Vec::new(); k];
    for (i, s) in moved.into_iter().enumerate() {
        dest[i % k].push(s);
    }
    let mut end = t;
    for (i, seqs) in dest.into_iter().enumerate() {
        // Re-generation: prefill of every moved prompt's produced tokens, before decoding.
        let regen: u64 = seqs.iter().map(|s| s.generated as u64).sum();
        let clock = released[i] + regen as f64 * cfg.step_base / cfg.prefill_speedup;
        let lengths: Vec<u32> = seqs.iter().map(|s| s.remaining).collect();
        let sub = RolloutConfig { workers: 1, ..*cfg };
        let run = simulate_rollout(&sub, &lengths, &[clock], MigrationTrigger::Never);
        released[i] = run.end;
        end = end.max(run.end);
    }
    RolloutRun { end, released, migrated_at: Some(t), migrated_requests: moved_count }
}

/// Scales `cfg.step_base` so the mean rollout without migration over `samples` draws lasts
/// `target_s` seconds.
pub fn calibrate<R: Rng + ?Sized>(cfg: &RolloutConfig, target_s: f64, samples: usize, rng: &mut R) -> RolloutConfig {
    let unit = RolloutConfig { step_base: 1.0, ..*cfg };
    let starts = vec![0.0; cfg.workers as usize];
    let mean: f64 = (0..samples.max(1))
        .map(|_| simulate_rollout(&unit, &unit.draw_lengths(rng), &starts, MigrationTrigger::Never).end)
        .sum::<f64>()
        / samples.max(1) as f64;
    RolloutConfig { step_base: target_s / mean.max(1e-9), ..*cfg }
}

/// Two jobs alternating rollouts on the same workers, `rounds` rollouts each, with a warm
/// switch before every rollout. Returns the time until the last rollout ends.
pub fn alternate_pair<R: Rng + ?Sized>(
    jobs: [&RolloutConfig; 2],
    switch_s: [f64; 2],
    rounds: u32,
    trigger: MigrationTrigger,
    rng: &mut R,
) -> f64 {
    let workers = jobs[0].workers.min(jobs[1].workers) as usize;
    let mut free = vec![0.0f64; workers];
    let mut end = 0.0f64;
    for r in 0..rounds * 2 {
        let j = (r % 2) as usize;
        let cfg = RolloutConfig { workers: workers as u32, ..*jobs[j] };
        let start: Vec<f64> = free.iter().map(|t| t + switch_s[j]).collect();
        let run = simulate_rollout(&cfg, &cfg.draw_lengths(rng), &start, trigger);
        free = run.released;
        end = end.max(run.end);
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn cfg() -> RolloutConfig {
        RolloutConfig::for_job(512, 8192, 1, 1)
    }

    #[test]
    fn every_request_finishes_and_the_phase_ends_with_the_longest() {
        let c = RolloutConfig { slots: 2, workers: 2, requests: 4, ..cfg() };
        let run = simulate_rollout(&c, &[10, 10, 10, 10], &[0.0, 0.0], MigrationTrigger::Never);
        // Two sequences per worker: 10 steps at 1 + 2/64 each.
        assert!((run.end - 10.0 * (1.0 + 2.0 / 64.0)).abs() < 1e-9, "{}", run.end);
        let run = simulate_rollout(&c, &[10, 10, 10, 10, 5], &[0.0, 0.0], MigrationTrigger::Never);
        // The fifth request waits for a slot on worker 0 and runs alone for 5 steps.
        assert!((run.end - (10.0 * (1.0 + 2.0 / 64.0) + 5.0 * (1.0 + 1.0 / 64.0))).abs() < 1e-9, "{}", run.end);
    }

    #[test]
    fn migration_releases_workers_early() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let c = cfg();
        let lengths = c.draw_lengths(&mut rng);
        let starts = vec![0.0; 8];
        let plain = simulate_rollout(&c, &lengths, &starts, MigrationTrigger::Never);
        let mig = simulate_rollout(&c, &lengths, &starts, MigrationTrigger::FractionDone(0.8));
        let t = mig.migrated_at.expect("migrates");
        assert!(t < plain.end);
        let early = mig.released.iter().filter(|r| **r <= t + 1e-9).count();
        assert!(early >= 6, "{early} workers released at migration");
        // The stragglers finish after the migration, within the worst case of re-generating
        // everything moved to one destination and then decoding a max-length response at full
        // slot occupancy.
        let regen_all: f64 = lengths.iter().map(|l| *l as f64).sum::<f64>() / c.prefill_speedup;
        let bound = t + regen_all + c.max_tokens as f64 * c.step(c.slots as usize);
        assert!(mig.end > t && mig.end <= bound, "{} not in ({t}, {bound}]", mig.end);
        assert_eq!(mig.migrated_requests as usize, lengths.len() - (0.8 * lengths.len() as f64).ceil() as usize);
    }

    #[test]
    fn calibration_hits_the_target() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        let c = calibrate(&cfg(), 133.8, 20, &mut rng);
        let starts = vec![0.0; 8];
        let mean: f64 = (0..50)
            .map(|_| simulate_rollout(&c, &c.draw_lengths(&mut rng), &starts, MigrationTrigger::Never).end)
            .sum::<f64>()
            / 50.0;
        assert!((mean / 133.8 - 1.0).abs() < 0.03, "{mean}");
    }
}
