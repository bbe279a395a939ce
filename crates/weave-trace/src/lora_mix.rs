//! `weave trace generate --mode lora`: a synthetic (and labelled so) mix of small LoRA RL jobs
//! on three bases, the way a fine-tuning service sees them:
//!
//! - **Bursts**: a team submits a sweep (ranks, batch sizes) at once: bursts of 1-6 jobs
//!   (uniform), the bursts a Poisson process at the job rate over the mean burst; a burst's
//!   jobs share a base and a generation length.
//! - **Bases**: Qwen2.5-7B (half), Llama-3.1-8B (three in ten), Qwen3-4B (one in five);
//!   generation length 4k (60%) or 8k.
//! - **Adapters**: all linear layers ("LoRA Without Regret", Thinking Machines 2025, and TRL's
//!   reproduction of it, which trains GRPO at rank 1 on all linear layers); ranks 1, 8, 16, 32
//!   or 64 (rank 1 suffices for RL there; 32 is the common default of LoRA tooling).
//! - **Batches**: 8, 16, 32 or 64 prompts x 8 generations (the reproduction's
//!   `num_generations = 8`): 64-512 sequences, at most the profile table's reference batch:
//!   small jobs.
//! - **Lifetimes**: minutes to hours, log-normal around `lifetime_median_h` (sigma 1.05, cut to
//!   [5 min, 24 h]); SLO uniform in [1, 2] as in every generated workload.

use crate::draws::weighted;
use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use weave_core::lora::LoraSpec;
use weave_core::{JobId, JobSpec, JobType, Lifetime, Micros, Slo};
use weave_model::{named_stream, Deployment, ProfileModel};

/// (base, model size B, weight).
const BASES: &[(&str, u32, u32)] = &[("qwen2.5-7b", 7, 50), ("llama-3.1-8b", 8, 30), ("qwen3-4b", 4, 20)];
const RANKS: &[(u32, u32)] = &[(1, 20), (8, 15), (16, 15), (32, 35), (64, 15)];
const PROMPTS: &[u32] = &[8, 16, 32, 64];
const GENERATIONS: u32 = 8;
const LIFETIME_SIGMA: f64 = 1.05;
const MIN_LIFETIME_H: f64 = 5.0 / 60.0;
const MAX_LIFETIME_H: f64 = 24.0;
const BURST_MAX: u32 = 6;

/// What a LoRA mix is drawn from.
#[derive(Clone, Copy, Debug)]
pub struct MixConfig {
    pub jobs: usize,
    pub seed: u64,
    /// Job arrivals per hour (bursts arrive at this over the mean burst).
    pub per_hour: f64,
    pub lifetime_median_h: f64,
}

/// The mix's jobs, in arrival order; deterministic for a given config.
pub fn jobs(cfg: &MixConfig, profile: &ProfileModel) -> Vec<JobSpec> {
    let per_hour = cfg.per_hour;
    let mut arrivals = named_stream(cfg.seed, "trace-lora-bursts", 0);
    let mean_burst = f64::from(1 + BURST_MAX) / 2.0;
    let gap = Exp::new((per_hour / mean_burst).max(1e-9)).ok();
    let mut out = Vec::with_capacity(cfg.jobs);
    let mut t_h = 0.0f64;
    let mut burst = 0u64;
    while out.len() < cfg.jobs {
        if burst > 0 {
            t_h += gap.map(|g| g.sample(&mut arrivals)).unwrap_or(1.0);
        }
        let mut shared = named_stream(cfg.seed, "trace-lora-burst", burst);
        let size = shared.random_range(1..=BURST_MAX) as usize;
        let bases: Vec<((&str, u32), u32)> = BASES.iter().map(|&(n, b, w)| ((n, b), w)).collect();
        let (base, model_b) = weighted(&bases, &mut shared);
        let tokens_k = if shared.random_range(0..10) < 6 { 4 } else { 8 };
        for _ in 0..size.min(cfg.jobs - out.len()) {
            let index = out.len();
            let arrival = Micros::from_secs_f64(t_h * 3_600.0);
            out.push(job(cfg, profile, index, arrival, JobType::new(model_b, tokens_k), base));
        }
        burst += 1;
    }
    out
}

fn job(cfg: &MixConfig, profile: &ProfileModel, index: usize, arrival: Micros, ty: JobType, base: &str) -> JobSpec {
    let mut rng = named_stream(cfg.seed, "trace-lora-job", index as u64);
    let rank = weighted(RANKS, &mut rng);
    let prompts = PROMPTS[rng.random_range(0..PROMPTS.len())];
    let mut job = JobSpec {
        arrival,
        slo: Slo::new(rng.random_range(1.0..=2.0)).ok(),
        lora: Some(LoraSpec { base: base.into(), rank, targets: vec!["all-linear".into()] }),
        ..JobSpec::new(JobId(index as u32), format!("job{index}"), ty, prompts * GENERATIONS)
    };
    let life_h = LogNormal::new(cfg.lifetime_median_h.max(0.01).ln(), LIFETIME_SIGMA)
        .map(|d| d.sample(&mut rng))
        .unwrap_or(cfg.lifetime_median_h)
        .clamp(MIN_LIFETIME_H, MAX_LIFETIME_H);
    let solo = profile.estimate(Deployment::Disagg, &job).times.solo();
    job.lifetime = Lifetime::Iterations((life_h * 3_600.0 / solo.as_secs_f64().max(1.0)).round().max(1.0) as u64);
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(seed: u64, jobs: usize) -> MixConfig {
        MixConfig { jobs, seed, per_hour: 20.0, lifetime_median_h: 1.0 }
    }

    #[test]
    fn the_mix_is_valid_bursty_small_and_reproducible() {
        let p = ProfileModel::builtin();
        let a = jobs(&cfg(1, 300), &p);
        assert_eq!(a, jobs(&cfg(1, 300), &p));
        assert_ne!(a, jobs(&cfg(2, 300), &p));
        assert_eq!(a.len(), 300);
        for j in &a {
            j.validate().unwrap_or_else(|e| panic!("{}: {e}", j.name));
            assert!(j.batch <= weave_model::REFERENCE_BATCH);
        }
        let same_instant = a.windows(2).filter(|w| w[0].arrival == w[1].arrival).count();
        assert!(same_instant > 100, "bursts: {same_instant} jobs arrive with the one before");
        let bases: std::collections::BTreeSet<&str> =
            a.iter().map(|j| j.lora.as_ref().unwrap().base.as_str()).collect();
        assert_eq!(bases.len(), 3);
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
}
