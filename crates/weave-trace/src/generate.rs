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

use crate::agentic_classes::AgenticClass;
use crate::draws::weighted;
use crate::Trace;
use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Serialize;
use std::collections::BTreeMap;
use weave_core::{JobId, JobSpec, JobType, Lifetime, Micros, PhaseTimes, Priority, Slo};
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
    Classes {
        profile: ProfileClass,
        size: SizeClass,
    },
    /// Agentic jobs (synthetic; see [`crate::agentic_classes`]).
    Agentic {
        class: AgenticClass,
    },
    /// Small LoRA RL jobs on three bases, in bursts (synthetic; see [`crate::lora_mix`]).
    Lora,
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
/// Trajectories per agentic iteration (RollArt's SWE run: 128).
const AGENTIC_BATCH: u32 = 128;
const MIN_LIFETIME_H: f64 = 0.5;
const MAX_LIFETIME_H: f64 = 7.0 * 24.0;

/// (model B, weight) and (max tokens k, weight) of the production mix; 7B and 8k dominate as
/// in the authors' tenant.
const PRODUCTION_MODELS: &[(u32, u32)] = &[(3, 6), (4, 4), (7, 45), (8, 22), (14, 13), (32, 10)];
const PRODUCTION_LENGTHS: &[(u32, u32)] = &[(4, 20), (8, 50), (16, 12), (32, 18)];

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
    if cfg.mode == GenMode::Lora {
        let per_hour = match cfg.arrivals {
            Arrivals::Poisson { per_hour } | Arrivals::Even { per_hour } => per_hour,
            Arrivals::Batch => f64::INFINITY,
        };
        let mix = crate::lora_mix::MixConfig {
            jobs: cfg.jobs,
            seed: cfg.seed,
            per_hour,
            lifetime_median_h: cfg.lifetime_median_h,
        };
        return Trace::from_jobs(describe(cfg), crate::lora_mix::jobs(&mix, profile), None);
    }
    let arrivals = arrival_times(cfg);
    let mut rollouts = BTreeMap::new();
    let jobs = arrivals
        .into_iter()
        .enumerate()
        .map(|(i, arrival)| make_job(cfg, profile, i, arrival, &mut rollouts))
        .collect();
    Trace::from_jobs(describe(cfg), jobs, None)
}

fn describe(cfg: &GenConfig) -> String {
    let mode = match cfg.mode {
        GenMode::Production => "production".to_string(),
        GenMode::Classes { profile, size } => format!("{profile:?}/{size:?}").to_lowercase(),
        GenMode::Agentic { class } => format!("synthetic agentic {class:?}").to_lowercase(),
        GenMode::Lora => "synthetic lora".to_string(),
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

/// Agentic jobs' mean rollouts, by class and type (for their lifetimes in iterations).
type MeanRollouts = BTreeMap<(u8, JobType), f64>;

fn make_job(
    cfg: &GenConfig,
    profile: &ProfileModel,
    index: usize,
    arrival: Micros,
    rollouts: &mut MeanRollouts,
) -> JobSpec {
    let mut rng = named_stream(cfg.seed, "trace-job", index as u64);
    let mut agentic = None;
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
        GenMode::Agentic { class } => {
            let class = class.pick(rng.random_range(0..3));
            let (models, k) = class.models();
            let ty = JobType::new(models[rng.random_range(0..models.len())], k);
            let rollout = |t: JobType| {
                let width = JobSpec::default_width(t.model);
                profile.predict(Deployment::Disagg, t, AGENTIC_BATCH, (width, width)).times.rollout.as_secs_f64()
            };
            let scale = rollout(ty) / rollout(JobType::new(8, 8)).max(1e-9);
            agentic = Some((class, class.spec(scale)));
            (ty, None)
        }
        GenMode::Lora => unreachable!("generate() builds LoRA mixes in lora_mix"),
    };
    let batch = if agentic.is_some() { AGENTIC_BATCH } else { REFERENCE_BATCH };
    let mut job = JobSpec {
        arrival,
        slo: Slo::new(rng.random_range(1.0..=2.0)).ok(),
        phase_times,
        agentic: agentic.as_ref().map(|(_, spec)| spec.clone()),
        ..JobSpec::new(JobId(index as u32), format!("job{index}"), job_type, batch)
    };
    let life_h = LogNormal::new(cfg.lifetime_median_h.max(0.01).ln(), LIFETIME_SIGMA)
        .map(|d| d.sample(&mut rng))
        .unwrap_or(cfg.lifetime_median_h)
        .clamp(MIN_LIFETIME_H, MAX_LIFETIME_H);
    let mut solo = profile.estimate(Deployment::Disagg, &job).times.solo();
    if let Some((class, spec)) = &agentic {
        let times = profile.estimate(Deployment::Disagg, &job).times;
        let mean = *rollouts.entry((*class as u8, job.job_type)).or_insert_with(|| {
            let how = weave_model::agentic::Interaction::Trajectory;
            weave_model::agentic::mean_rollout(spec, AGENTIC_BATCH, AGENTIC_BATCH, how, cfg.seed, 4).duration_s
        });
        solo = times.train + Micros::from_secs_f64(mean);
    }
    let iterations = (life_h * 3_600.0 / solo.as_secs_f64().max(1.0)).round().max(1.0) as u64;
    job.lifetime = Lifetime::Iterations(iterations);
    job
}

/// One team in a generated multi-tenant workload.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantMix {
    pub name: String,
    /// Relative share of the jobs.
    pub weight: f64,
    /// Shares of its jobs that are `high` and `low` priority (the rest `normal`).
    pub high: f64,
    pub low: f64,
    /// Its jobs arrive in bursts of this many at once (1: one by one).
    pub burst: usize,
}

impl TenantMix {
    /// Parses each of `specs` ([`TenantMix::parse`]); each tenant may be named once.
    pub fn parse_all(specs: &[String]) -> Result<Vec<TenantMix>, String> {
        let tenants = specs.iter().map(|t| TenantMix::parse(t)).collect::<Result<Vec<_>, _>>()?;
        let mut names: Vec<&str> = tenants.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        match names.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(format!("{}: each tenant once", w[0])),
            None => Ok(tenants),
        }
    }

    /// Parses `NAME:WEIGHT[:high=P][:low=P][:burst=N]` (e.g. `team-a:50:high=0.1:burst=5`).
    pub fn parse(text: &str) -> Result<TenantMix, String> {
        let mut parts = text.split(':');
        let name = parts.next().unwrap_or_default().to_string();
        let ok_name = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok_name {
            return Err(format!("`{text}`: the name must be 1-64 letters, digits, `-`, `_` or `.`"));
        }
        let weight: f64 = parts
            .next()
            .and_then(|w| w.parse().ok())
            .filter(|w: &f64| w.is_finite() && *w > 0.0)
            .ok_or_else(|| format!("`{text}`: NAME:WEIGHT needs a positive weight"))?;
        let mut mix = TenantMix { name, weight, high: 0.0, low: 0.0, burst: 1 };
        for p in parts {
            let (key, value) = p.split_once('=').ok_or_else(|| format!("`{text}`: `{p}` is not KEY=VALUE"))?;
            let share = || value.parse::<f64>().ok().filter(|v| (0.0..=1.0).contains(v));
            match key {
                "high" => mix.high = share().ok_or_else(|| format!("`{text}`: high must be in [0, 1]"))?,
                "low" => mix.low = share().ok_or_else(|| format!("`{text}`: low must be in [0, 1]"))?,
                "burst" => {
                    mix.burst = value
                        .parse()
                        .ok()
                        .filter(|b| (1..=10_000).contains(b))
                        .ok_or_else(|| format!("`{text}`: burst must be 1..=10000 jobs"))?
                }
                _ => return Err(format!("`{text}`: unknown key `{key}` (high, low, burst)")),
            }
        }
        if mix.high + mix.low > 1.0 + 1e-9 {
            return Err(format!("`{text}`: high + low exceed 1"));
        }
        Ok(mix)
    }
}

/// A multi-tenant workload: the jobs of [`generate`], each given to a tenant by weight and a
/// priority by its tenant's mix (one seeded draw per job), then a bursty tenant's jobs re-timed
/// to arrive in groups of `burst` at the first one's time (its rate stays the same, its
/// arrivals clump). Deterministic for a given config and mix.
pub fn generate_tenants(cfg: &GenConfig, tenants: &[TenantMix], profile: &ProfileModel) -> Trace {
    let base = generate(cfg, profile);
    if tenants.is_empty() {
        return base;
    }
    let total: f64 = tenants.iter().map(|t| t.weight).sum();
    let mut jobs = base.jobs;
    let mut of_tenant: Vec<Vec<usize>> = vec![Vec::new(); tenants.len()];
    for (i, job) in jobs.iter_mut().enumerate() {
        let mut rng = named_stream(cfg.seed, "trace-tenant", i as u64);
        let mut x = rng.random_range(0.0..total);
        let t = tenants
            .iter()
            .position(|t| {
                x -= t.weight;
                x < 0.0
            })
            .unwrap_or(tenants.len() - 1);
        let p: f64 = rng.random_range(0.0..1.0);
        job.priority = if p < tenants[t].high {
            weave_core::Priority::High
        } else if p < tenants[t].high + tenants[t].low {
            weave_core::Priority::Low
        } else {
            weave_core::Priority::Normal
        };
        job.tenant = Some(tenants[t].name.clone());
        of_tenant[t].push(i);
    }
    for (t, members) in of_tenant.iter().enumerate() {
        for burst in members.chunks(tenants[t].burst) {
            let first = jobs[burst[0]].arrival;
            for &i in burst {
                jobs[i].arrival = first;
            }
        }
    }
    for (i, job) in jobs.iter_mut().enumerate() {
        job.name = format!("job{i}");
    }
    let names: Vec<String> = tenants.iter().map(|t| t.name.clone()).collect();
    Trace::from_jobs(format!("{} for tenants {}", describe(cfg), names.join(", ")), jobs, None)
}

/// Tenants and priorities for a trace that carries none (`weave experiment tenants`): each job
/// goes to a tenant with probability proportional to its `weight`, and is `high` with
/// probability `high_share`, `low` with `low_share`; one seeded draw per job (named stream
/// `tenant-assignment`). A trace that names any tenant or priority is left as it is.
pub fn assign_tenants(trace: &mut Trace, tenants: &[(&str, f64)], high_share: f64, low_share: f64, seed: u64) {
    let carries = trace.jobs.iter().any(|j| j.tenant.is_some() || j.priority != Priority::Normal);
    if carries || tenants.is_empty() {
        return;
    }
    let total: f64 = tenants.iter().map(|t| t.1).sum::<f64>().max(1e-9);
    for j in &mut trace.jobs {
        let mut rng = named_stream(seed, "tenant-assignment", j.id.0 as u64);
        let mut u = rng.random_range(0.0..total);
        let pick = tenants.iter().position(|t| {
            u -= t.1;
            u < 0.0
        });
        j.tenant = Some(tenants[pick.unwrap_or(tenants.len() - 1)].0.to_string());
        let p: f64 = rng.random_range(0.0..1.0);
        j.priority = if p < high_share {
            Priority::High
        } else if p < high_share + low_share {
            Priority::Low
        } else {
            Priority::Normal
        };
    }
}

#[cfg(test)]
mod tenant_tests {
    use super::*;

    fn mix(text: &str) -> TenantMix {
        TenantMix::parse(text).unwrap()
    }

    #[test]
    fn tenant_mixes_parse_or_say_what_is_wrong() {
        assert_eq!(mix("a:50"), TenantMix { name: "a".into(), weight: 50.0, high: 0.0, low: 0.0, burst: 1 });
        assert_eq!(mix("team-b:30:high=0.2:low=0.1:burst=5").burst, 5);
        for (bad, says) in [
            ("", "name"),
            ("a", "weight"),
            ("a:-1", "weight"),
            ("a:1:high=2", "high"),
            ("a:1:burst=0", "burst"),
            ("a:1:colour=red", "unknown key"),
            ("a:1:high=0.6:low=0.6", "exceed"),
        ] {
            assert!(TenantMix::parse(bad).unwrap_err().contains(says), "{bad}");
        }
    }

    #[test]
    fn jobs_split_by_weight_with_priorities_and_bursts() {
        let profile = ProfileModel::builtin();
        let cfg = GenConfig { jobs: 2000, ..GenConfig::default_workload() };
        let tenants = [mix("big:70:burst=10"), mix("small:30:high=0.5:low=0.25")];
        let trace = generate_tenants(&cfg, &tenants, &profile);
        assert_eq!(trace, generate_tenants(&cfg, &tenants, &profile), "deterministic");
        assert_eq!(trace.jobs.len(), 2000);
        let of = |name: &str| trace.jobs.iter().filter(|j| j.tenant.as_deref() == Some(name)).collect::<Vec<_>>();
        let (big, small) = (of("big"), of("small"));
        assert!((1300..1500).contains(&big.len()), "{}", big.len());
        assert!(big.iter().all(|j| j.priority == weave_core::Priority::Normal));
        let high = small.iter().filter(|j| j.priority == weave_core::Priority::High).count() as f64;
        assert!((high / small.len() as f64 - 0.5).abs() < 0.06, "{high} of {}", small.len());
        // The big tenant's jobs arrive ten at a time; the small one's one by one.
        let distinct = |v: &[&JobSpec]| v.iter().map(|j| j.arrival).collect::<std::collections::BTreeSet<_>>().len();
        assert_eq!(distinct(&big), big.len().div_ceil(10));
        assert_eq!(distinct(&small), small.len());
        // Same jobs as the single-tenant workload, only owned and re-timed.
        let base = generate(&cfg, &profile);
        let types = |t: &Trace| {
            let mut v: Vec<_> = t.jobs.iter().map(|j| (j.job_type, j.lifetime)).collect();
            v.sort_by_key(|x| format!("{x:?}"));
            v
        };
        assert_eq!(types(&trace), types(&base));
    }
}
