//! Phase durations per iteration.
//!
//! Calibration source: [data] `rollmux/profile.json`, the authors' measured seconds per
//! iteration for 16 job types (copied below, unchanged, from wutianyuan1/ROLL
//! `global_scheduler/trace/profile.json`, Apache-2.0). `disagg` = rollout on 8x H20, training
//! on 8x H800; `colo` = both phases on 8x H800. 32B rows ran on two nodes per phase.
//!
//! Other job shapes are predicted by scaling the nearest measured type with power laws whose
//! exponents were fitted (least squares in log space) to the same table:
//! disaggregated rollout node-time ~ P^0.47 L^1.00 and training ~ P^0.84 L^0.92; co-located
//! rollout ~ P^0.34 L^0.72 and training ~ P^0.81 L^0.94 (P = parameters, L = max tokens).
//! Rollout is decode-bound by the longest response (time ~ L); training is FLOP-bound
//! (time ~ P x tokens). Batch scaling is not covered by any published figure: we assume
//! training ~ B (FLOPs) and rollout ~ B^0.5 (memory-bound decode gets only partly slower with
//! a larger batch). Width (nodes per phase) scales data-parallel: time ~ 1 / width.

use serde::Deserialize;
use std::collections::BTreeMap;
use thiserror::Error;
use weave_core::{JobSpec, JobType, Micros, ModelSize, PhaseTimes};

/// Responses per iteration the profile table is taken to have been measured at (assumed:
/// 64 prompts x 8 samples, a common GRPO setting; the data does not say).
pub const REFERENCE_BATCH: u32 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Deployment {
    /// Rollout on H20, training on H800.
    Disagg,
    /// Both phases on the same H800 node(s).
    Colo,
}

/// (model B, max tokens k, generate s, train s) [data] disagg.
const DISAGG: &[(u32, u32, f64, f64)] = &[
    (3, 4, 79.33333333333333, 47.0),
    (3, 8, 128.33333333333334, 71.33333333333333),
    (4, 4, 121.5, 51.25),
    (4, 8, 262.5, 86.75),
    (4, 16, 496.0, 180.33333333333334),
    (4, 32, 734.3333333333334, 464.6666666666667),
    (7, 4, 80.5, 77.0),
    (7, 8, 133.8, 112.8),
    (8, 4, 140.57142857142858, 70.85714285714286),
    (8, 8, 310.125, 120.5),
    (8, 16, 580.5, 241.0),
    (8, 32, 888.0, 559.5),
    (14, 4, 145.0, 126.66666666666667),
    (14, 8, 238.6, 197.4),
    (32, 4, 165.33333333333334, 219.33333333333334),
    (32, 8, 267.6, 271.3333333333333),
];

/// (model B, max tokens k, generate s, train s) [data] colo.
const COLO: &[(u32, u32, f64, f64)] = &[
    (3, 4, 157.0, 48.0),
    (3, 8, 202.0, 69.4),
    (4, 4, 105.8, 51.2),
    (4, 8, 188.33333333333334, 86.66666666666667),
    (4, 16, 349.5, 185.0),
    (4, 32, 587.0, 465.5),
    (7, 4, 138.8, 65.4),
    (7, 8, 159.6, 98.2),
    (8, 4, 101.6, 72.8),
    (8, 8, 189.0, 119.33333333333333),
    (8, 16, 354.0, 238.33333333333334),
    (8, 32, 607.5, 559.5),
    (14, 4, 136.2, 112.4),
    (14, 8, 182.4, 173.6),
    (32, 4, 173.66666666666666, 204.33333333333334),
    (32, 8, 277.0, 271.3333333333333),
];

/// Fitted exponents (model size, max length) per deployment and phase.
struct Exponents {
    roll_p: f64,
    roll_l: f64,
    train_p: f64,
    train_l: f64,
}

const DISAGG_EXP: Exponents = Exponents { roll_p: 0.47, roll_l: 1.00, train_p: 0.84, train_l: 0.92 };
const COLO_EXP: Exponents = Exponents { roll_p: 0.34, roll_l: 0.72, train_p: 0.81, train_l: 0.94 };
const ROLLOUT_BATCH_EXP: f64 = 0.5;
const TRAIN_BATCH_EXP: f64 = 1.0;

#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("profile JSON: {0}")]
    Json(String),
    #[error("profile entry `{key}`: {reason}")]
    Entry { key: String, reason: String },
}

/// Where an estimate came from, so operators can see how much to trust it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum EstimateSource {
    /// Straight from the measured table.
    Measured,
    /// The nearest measured type scaled by the analytic model.
    Scaled { anchor: JobType },
    /// Durations given with the job (trace or client).
    Explicit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Estimate {
    pub times: PhaseTimes,
    pub source: EstimateSource,
}

/// The measured table plus the analytic scaling around it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileModel {
    disagg: BTreeMap<JobType, PhaseTimes>,
    colo: BTreeMap<JobType, PhaseTimes>,
}

fn table(rows: &[(u32, u32, f64, f64)]) -> BTreeMap<JobType, PhaseTimes> {
    rows.iter()
        .map(|&(m, l, g, t)| {
            let times = PhaseTimes { rollout: Micros::from_secs_f64(g), train: Micros::from_secs_f64(t) };
            (JobType::new(m, l), times)
        })
        .collect()
}

impl Default for ProfileModel {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ProfileModel {
    /// The embedded measured table.
    pub fn builtin() -> Self {
        ProfileModel { disagg: table(DISAGG), colo: table(COLO) }
    }

    /// Reads the authors' format: `{"colo"|"disagg": {"<type>": {"generate": s, "train": s}}}`.
    pub fn from_json(text: &str) -> Result<Self, ProfileError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Row {
            generate: f64,
            train: f64,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            colo: BTreeMap<String, Row>,
            disagg: BTreeMap<String, Row>,
        }
        let file: File = serde_json::from_str(text).map_err(|e| ProfileError::Json(e.to_string()))?;
        let convert = |rows: BTreeMap<String, Row>| -> Result<BTreeMap<JobType, PhaseTimes>, ProfileError> {
            rows.into_iter()
                .map(|(key, row)| {
                    let ty: JobType = key.parse().map_err(|e: weave_core::JobSpecError| ProfileError::Entry {
                        key: key.clone(),
                        reason: e.to_string(),
                    })?;
                    let ok = |v: f64| v.is_finite() && v > 0.0;
                    if !ok(row.generate) || !ok(row.train) {
                        return Err(ProfileError::Entry { key, reason: "durations must be positive seconds".into() });
                    }
                    let times = PhaseTimes {
                        rollout: Micros::from_secs_f64(row.generate),
                        train: Micros::from_secs_f64(row.train),
                    };
                    Ok((ty, times))
                })
                .collect()
        };
        Ok(ProfileModel { disagg: convert(file.disagg)?, colo: convert(file.colo)? })
    }

    fn rows(&self, dep: Deployment) -> &BTreeMap<JobType, PhaseTimes> {
        match dep {
            Deployment::Disagg => &self.disagg,
            Deployment::Colo => &self.colo,
        }
    }

    /// The measured entry for a type, if any.
    pub fn measured(&self, dep: Deployment, ty: JobType) -> Option<PhaseTimes> {
        self.rows(dep).get(&ty).copied()
    }

    pub fn measured_types(&self, dep: Deployment) -> impl Iterator<Item = (JobType, PhaseTimes)> + '_ {
        self.rows(dep).iter().map(|(t, p)| (*t, *p))
    }

    /// Conservative per-iteration estimate used at admission (see `runtime` for how actual
    /// iterations vary around it).
    pub fn estimate(&self, dep: Deployment, job: &JobSpec) -> Estimate {
        let width = match dep {
            Deployment::Disagg => (job.rollout_nodes, job.train_nodes),
            Deployment::Colo => (job.train_nodes, job.train_nodes),
        };
        if let Some(times) = job.phase_times {
            let times = match dep {
                Deployment::Disagg => times,
                // Explicit durations describe the disaggregated run; carry them over to H800
                // with the measured colo/disagg ratio of the job's nearest type.
                Deployment::Colo => self.colo_from_disagg(job.job_type, times),
            };
            return Estimate { times, source: EstimateSource::Explicit };
        }
        let estimate = self.predict(dep, job.job_type, job.batch, width);
        match job.lora.as_ref().and_then(|l| l.base_model()) {
            // An adapter's own model: the roofline to its batch, two thirds of the training.
            Some(base) => {
                let gpu = match dep {
                    Deployment::Disagg => weave_core::GpuKind::H20,
                    Deployment::Colo => weave_core::GpuKind::H800,
                };
                let reference =
                    (REFERENCE_BATCH, self.predict(dep, job.job_type, REFERENCE_BATCH, width).times.rollout);
                let times = crate::lora::adapter_times(base, job, gpu, width.0, reference, estimate.times.train);
                Estimate { times, ..estimate }
            }
            None => estimate,
        }
    }

    /// Predicts the durations of `ty` at `batch` with (rollout, training) widths in nodes.
    pub fn predict(&self, dep: Deployment, ty: JobType, batch: u32, width: (u32, u32)) -> Estimate {
        let rows = self.rows(dep);
        let anchor = match rows.contains_key(&ty) {
            true => ty,
            false => nearest(rows.keys().copied(), ty).unwrap_or(ty),
        };
        let Some(base) = rows.get(&anchor).copied() else {
            // An empty table (custom profile file) leaves nothing to scale from.
            return Estimate {
                times: PhaseTimes { rollout: Micros::MAX, train: Micros::MAX },
                source: EstimateSource::Measured,
            };
        };
        let exp = match dep {
            Deployment::Disagg => &DISAGG_EXP,
            Deployment::Colo => &COLO_EXP,
        };
        let ref_width = JobSpec::default_width(anchor.model) as f64;
        let p = ty.model.params_b() / anchor.model.params_b();
        let l = ty.max_tokens as f64 / anchor.max_tokens as f64;
        let b = batch as f64 / REFERENCE_BATCH as f64;
        let roll = p.powf(exp.roll_p) * l.powf(exp.roll_l) * b.powf(ROLLOUT_BATCH_EXP) * ref_width / width.0 as f64;
        let train = p.powf(exp.train_p) * l.powf(exp.train_l) * b.powf(TRAIN_BATCH_EXP) * ref_width / width.1 as f64;
        let times = PhaseTimes { rollout: base.rollout.scale(roll), train: base.train.scale(train) };
        let source = if anchor == ty && roll == 1.0 && train == 1.0 {
            EstimateSource::Measured
        } else {
            EstimateSource::Scaled { anchor }
        };
        Estimate { times, source }
    }

    fn colo_from_disagg(&self, ty: JobType, disagg: PhaseTimes) -> PhaseTimes {
        let anchor = nearest(self.colo.keys().copied().filter(|t| self.disagg.contains_key(t)), ty);
        match anchor {
            Some(a) => {
                let (c, d) = (self.colo[&a], self.disagg[&a]);
                let ratio = |x: Micros, y: Micros| x.as_secs_f64() / y.as_secs_f64();
                PhaseTimes {
                    rollout: disagg.rollout.scale(ratio(c.rollout, d.rollout)),
                    train: disagg.train.scale(ratio(c.train, d.train)),
                }
            }
            None => disagg,
        }
    }
}

/// The measured type closest to `ty` in log model size plus log length (ties: table order).
fn nearest(candidates: impl Iterator<Item = JobType>, ty: JobType) -> Option<JobType> {
    let log_gap = |a: f64, b: f64| (a.ln() - b.ln()).abs();
    let dist = |a: JobType| {
        log_gap(a.model.params_b(), ty.model.params_b()) + log_gap(a.max_tokens as f64, ty.max_tokens as f64)
    };
    candidates.min_by(|a, b| dist(*a).total_cmp(&dist(*b)))
}

/// The model sizes the profile table covers, for generators.
pub fn measured_model_sizes() -> Vec<ModelSize> {
    let mut v: Vec<ModelSize> = DISAGG.iter().map(|r| ModelSize::billions(r.0)).collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_types_come_back_exactly() {
        let m = ProfileModel::builtin();
        let e = m.predict(Deployment::Disagg, JobType::new(7, 8), REFERENCE_BATCH, (1, 1));
        assert_eq!(e.source, EstimateSource::Measured);
        assert_eq!(e.times.rollout, Micros(133_800_000));
        let e = m.predict(Deployment::Disagg, JobType::new(32, 8), REFERENCE_BATCH, (2, 2));
        assert_eq!(e.source, EstimateSource::Measured);
        assert_eq!(e.times.train, Micros::from_secs_f64(271.3333333333333));
    }

    #[test]
    fn unknown_types_scale_from_the_nearest_anchor() {
        let m = ProfileModel::builtin();
        let e = m.predict(Deployment::Disagg, JobType::new(7, 16), REFERENCE_BATCH, (1, 1));
        assert_eq!(e.source, EstimateSource::Scaled { anchor: JobType::new(8, 16) });
        assert_eq!(e.times.rollout, Micros::from_secs_f64(580.5 * (7.0f64 / 8.0).powf(0.47)));
        // Four times the batch: rollout x2 (exponent 0.5), training x4 (FLOPs).
        let big = m.predict(Deployment::Disagg, JobType::new(7, 8), 4 * REFERENCE_BATCH, (1, 1));
        assert_eq!(big.times.rollout, Micros(267_600_000));
        assert_eq!(big.times.train, Micros(451_200_000));
        // Twice the nodes halves the time.
        let wide = m.predict(Deployment::Disagg, JobType::new(7, 8), REFERENCE_BATCH, (2, 2));
        assert_eq!(wide.times.rollout, Micros(66_900_000));
    }
}
