//! Seeded synthetic workloads.
//!
//! - `production`: a mix like the authors' production tenant: model sizes 3B..32B, max
//!   lengths 4k..32k, log-normal lifetimes of hours to days (mean ~28 h, like `wild.trace`),
//!   SLO uniform in [1, 2] [paper].
//! - profile classes: balanced, rollout-heavy (agentic multi-turn rollouts run 3-4x longer
//!   than training [paper]) and training-heavy jobs, small / medium / large models.
//!
//! Every job's attributes come from its own named stream, so changing the job count does not
//! change the jobs already there.

use crate::Trace;
use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Serialize;
use weave_core::{Algorithm, JobId, JobSpec, JobType, Lifetime, Micros, PhaseTimes, Slo};
use weave_model::{named_stream, Deployment, ProfileModel, Stream, REFERENCE_BATCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeClass {
    Small,
    Medium,
    Large,
    Mixed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileClass {
    Balanced,
    RolloutHeavy,
    TrainingHeavy,
    Mixed,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum GenMode {
    Production,
    Classes { profile: ProfileClass, size: SizeClass },
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Arrivals {
    /// Exponential inter-arrival times.
    Poisson { per_hour: f64 },
    /// Evenly spaced.
    Even { per_hour: f64 },
    /// Everything at time zero.
    Batch,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GenConfig {
    pub mode: GenMode,
    pub jobs: usize,
    pub arrivals: Arrivals,
    pub seed: u64,
    /// Median solo lifetime, hours (log-normal, sigma 1.05: mean ~1.73x the median).
    pub lifetime_median_h: f64,
}

impl GenConfig {
    /// The built-in default workload of `weave simulate`.
    pub fn default_workload() -> Self {
        GenConfig {
            mode: GenMode::Production,
            jobs: 60,
            arrivals: Arrivals::Poisson { per_hour: 1.5 },
            seed: 2026,
            lifetime_median_h: 16.0,
        }
    }
}

const LIFETIME_SIGMA: f64 = 1.05;
const MIN_LIFETIME_H: f64 = 0.5;
const MAX_LIFETIME_H: f64 = 7.0 * 24.0;

/// (model B, weight) and (max tokens k, weight) of the production mix; 7B and 8k dominate as
/// in the authors' tenant.
const PRODUCTION_MODELS: &[(u32, u32)] = &[(3, 6), (4, 4), (7, 45), (8, 22), (14, 13), (32, 10)];
const PRODUCTION_LENGTHS: &[(u32, u32)] = &[(4, 20), (8, 50), (16, 12), (32, 18)];

fn weighted<R: Rng>(table: &[(u32, u32)], rng: &mut R) -> u32 {
    let total: u32 = table.iter().map(|(_, w)| w).sum();
    let mut x = rng.random_range(0..total);
    for &(v, w) in table {
        if x < w {
            return v;
        }
        x -= w;
    }
    table[table.len() - 1].0
}

fn sizes(class: SizeClass) -> &'static [u32] {
    match class {
        SizeClass::Small => &[3, 4],
        SizeClass::Medium => &[7, 8],
        SizeClass::Large => &[14, 32],
        SizeClass::Mixed => &[3, 4, 7, 8, 14, 32],
    }
}

/// Share of the solo iteration spent in rollout.
fn rollout_share(class: ProfileClass, rng: &mut Stream) -> f64 {
    match class {
        ProfileClass::Balanced => 0.5,
        ProfileClass::RolloutHeavy => 0.78, // 3.5x longer than training
        ProfileClass::TrainingHeavy => 0.33,
        ProfileClass::Mixed => [0.5, 0.78, 0.33][rng.random_range(0..3)],
    }
}

/// Generates a trace; deterministic for a given config.
pub fn generate(cfg: &GenConfig, profile: &ProfileModel) -> Trace {
    let arrivals = arrival_times(cfg);
    let jobs = arrivals.into_iter().enumerate().map(|(i, arrival)| make_job(cfg, profile, i, arrival)).collect();
    Trace::from_jobs(describe(cfg), jobs, None)
}

fn describe(cfg: &GenConfig) -> String {
    let mode = match cfg.mode {
        GenMode::Production => "production".to_string(),
        GenMode::Classes { profile, size } => format!("{profile:?}/{size:?}").to_lowercase(),
    };
    format!("generated({mode}, {} jobs, seed {})", cfg.jobs, cfg.seed)
}

fn arrival_times(cfg: &GenConfig) -> Vec<Micros> {
    let mut rng = named_stream(cfg.seed, "trace-arrivals", 0);
    let mut t = 0.0f64;
    (0..cfg.jobs)
        .map(|i| match cfg.arrivals {
            Arrivals::Batch => Micros::ZERO,
            Arrivals::Even { per_hour } => Micros::from_secs_f64(i as f64 * 3_600.0 / per_hour.max(1e-9)),
            Arrivals::Poisson { per_hour } => {
                if i > 0 {
                    let gap_h = Exp::new(per_hour.max(1e-9)).map(|d| d.sample(&mut rng)).unwrap_or(1.0);
                    t += gap_h * 3_600.0;
                }
                Micros::from_secs_f64(t)
            }
        })
        .collect()
}

fn make_job(cfg: &GenConfig, profile: &ProfileModel, index: usize, arrival: Micros) -> JobSpec {
    let mut rng = named_stream(cfg.seed, "trace-job", index as u64);
    let (job_type, phase_times) = match cfg.mode {
        GenMode::Production => {
            let ty = JobType::new(weighted(PRODUCTION_MODELS, &mut rng), weighted(PRODUCTION_LENGTHS, &mut rng));
            (ty, None)
        }
        GenMode::Classes { profile: class, size } => {
            let options = sizes(size);
            let ty = JobType::new(options[rng.random_range(0..options.len())], 8);
            let width = JobSpec::default_width(ty.model);
            let solo = profile.predict(Deployment::Disagg, ty, REFERENCE_BATCH, (width, width)).times.solo();
            let share = rollout_share(class, &mut rng);
            let rollout = solo.scale(share);
            (ty, Some(PhaseTimes { rollout, train: solo - rollout }))
        }
    };
    let width = JobSpec::default_width(job_type.model);
    let mut job = JobSpec {
        id: JobId(index as u32),
        name: format!("job{index}"),
        arrival,
        job_type,
        batch: REFERENCE_BATCH,
        algorithm: Algorithm::Grpo,
        rollout_nodes: width,
        train_nodes: width,
        slo: Slo::new(rng.random_range(1.0..=2.0)).ok(),
        lifetime: Lifetime::Iterations(1),
        phase_times,
        tenant: None,
        priority: Default::default(),
    };
    let life_h = LogNormal::new(cfg.lifetime_median_h.max(0.01).ln(), LIFETIME_SIGMA)
        .map(|d| d.sample(&mut rng))
        .unwrap_or(cfg.lifetime_median_h)
        .clamp(MIN_LIFETIME_H, MAX_LIFETIME_H);
    let solo = profile.estimate(Deployment::Disagg, &job).times.solo();
    let iterations = (life_h * 3_600.0 / solo.as_secs_f64().max(1.0)).round().max(1.0) as u64;
    job.lifetime = Lifetime::Iterations(iterations);
    job
}
