//! The placement view of a job: its conservative estimate and what it costs to host.

use serde::{Deserialize, Serialize};
use weave_core::{Bytes, ClusterConfig, JobId, JobSpec, Micros, PhaseTimes};
use weave_dispatch::from_model::{job_sync, switch_costs};
use weave_dispatch::{MemberSpec, SwitchCosts, TimingMember};
use weave_model::{job_rollout_state, job_training_state, Deployment, ProfileModel};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlaceJob {
    pub id: JobId,
    /// Conservative (max-length) per-iteration durations at the job's own widths.
    pub times: PhaseTimes,
    /// Allowed slowdown.
    pub slo: f64,
    pub rollout_width: u32,
    pub train_width: u32,
    /// Cached rollout state on each of its rollout nodes.
    pub rollout_state: Bytes,
    /// Cached training state summed over its training nodes (spread over the group's pool).
    pub train_state_total: Bytes,
    pub costs: SwitchCosts,
    pub sync: Micros,
    /// Per-iteration durations when the job runs co-located on its own training nodes (both
    /// phases there, the veRL way); `None` when no co-located profile is known.
    pub colo: Option<PhaseTimes>,
    /// How the job's iterations vary around `times`, for admission's SLO check.
    pub variation: Variation,
    /// Bounded staleness k (0: on-policy). Its slowdown is against its own solo run with the
    /// same staleness (rollout and training overlapping), except co-located, which is
    /// on-policy.
    pub staleness: u32,
    /// Its rollout runs on the preemptible (spot) tier: it shares groups only with jobs on
    /// that tier, and its SLO as admission sees it has room left for preemption delays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
    /// Environment cores an agentic job's sandboxes hold at most (0: not agentic); with fixed
    /// pools they are reserved in the environment pool while the job is placed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub env_cores: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What admission knows about a job's run-time variation: sampled iterations relative to the
/// estimate (from the runtime model in the simulator, from measured phases in the server),
/// how many iterations its life average runs over, and how sure the promise must be.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Variation {
    /// (rollout, training) factors of sampled iterations; empty: deterministic. (Shared: a
    /// job's samples are cloned into every candidate group admission evaluates.)
    #[serde(with = "shared_samples")]
    pub samples: std::sync::Arc<[(f64, f64)]>,
    /// Iterations the job's slowdown is averaged over (its life).
    pub iterations: u64,
    /// Standard-normal quantile of the allowed risk: `P(life slowdown > SLO) <= epsilon`
    /// gives `z = Phi^-1(1 - epsilon)` (2.33 for 1%).
    pub z: f64,
}

/// Serde for the shared sample slice (as a plain sequence; serde's `rc` feature would pull
/// in identity-losing `Arc` handling for every type).
mod shared_samples {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(v: &Arc<[(f64, f64)]>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[(f64, f64)]>, D::Error> {
        Vec::<(f64, f64)>::deserialize(d).map(Arc::from)
    }
}

impl Variation {
    /// `z` for a risk `epsilon` in (0, 0.5] (Acklam's rational approximation of the normal
    /// quantile; relative error below 1.2e-9).
    pub fn z_for(epsilon: f64) -> f64 {
        let p = 1.0 - epsilon.clamp(1e-12, 0.5);
        normal_quantile(p)
    }
}

fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

impl PlaceJob {
    /// The dispatcher member `decision` places, as admission saw the job (the replay and the
    /// server build it here): co-located, both phases take turns on the same GPUs, so the
    /// update is local (no sync) and the job runs on-policy; the training state is split over
    /// the group's training nodes.
    pub fn member(
        &self,
        decision: &crate::Decision,
        resident: bool,
        iterations: Option<u64>,
        start_iteration: u64,
    ) -> MemberSpec {
        let colocated = decision.kind == crate::DecisionKind::Colocated;
        let pool = decision.training_nodes.len().max(1) as u64;
        MemberSpec {
            job: self.id,
            rollout_nodes: vec![decision.block],
            costs: self.costs,
            sync: if colocated { Micros::ZERO } else { self.sync },
            resident,
            staleness: if colocated { 0 } else { self.staleness },
            rollout_state: self.rollout_state,
            train_state: Bytes(self.train_state_total.0 / pool),
            iterations,
            start_iteration,
        }
    }

    /// Builds the placement view; `slo` is the job's own or the one the replay drew.
    pub fn from_spec(job: &JobSpec, slo: f64, profile: &ProfileModel, cluster: &ClusterConfig) -> PlaceJob {
        PlaceJob {
            id: job.id,
            times: profile.estimate(Deployment::Disagg, job).times,
            slo,
            rollout_width: job.rollout_nodes,
            train_width: job.train_nodes,
            rollout_state: job_rollout_state(job),
            train_state_total: Bytes(job_training_state(job).0 * job.train_nodes as u64),
            costs: switch_costs(job.job_type.model),
            sync: job_sync(job, cluster),
            colo: Some(profile.estimate(Deployment::Colo, job).times),
            variation: Variation::default(),
            staleness: job.staleness,
            spot: false,
            env_cores: job.agentic.as_ref().map_or(0.0, |a| a.cores_held(job.batch, job.staleness)),
        }
    }

    /// Takes measured phase durations, which include the job's own switches and sync.
    pub fn set_measured(&mut self, times: PhaseTimes) {
        self.times = times;
        self.costs = SwitchCosts::default();
        self.sync = Micros(0);
    }

    /// Co-located iteration on its own training nodes (the weight update is local: no sync).
    pub fn colo_iteration(&self) -> Option<Micros> {
        self.colo.map(|c| c.rollout + c.train)
    }

    /// Solo iteration on its own nodes: no switches; with staleness its rollout overlaps the
    /// training of earlier iterations (the period of the solo-async run).
    pub fn solo(&self) -> Micros {
        weave_dispatch::timing::solo_period(self.times.rollout, self.times.train + self.sync, self.staleness)
    }

    /// Training time on a pool of `pool_width` nodes (data parallelism adjusted to the pool).
    pub fn train_on(&self, pool_width: u32) -> Micros {
        Micros(self.times.train.0 * self.train_width as u64 / pool_width.max(1) as u64)
    }

    /// The timing model's view of this job in a group whose training pool has `pool_width`
    /// nodes, its rollout on block `block`.
    pub fn timing_member(&self, block: u32, pool_width: u32, resident: bool) -> TimingMember {
        TimingMember {
            job: self.id,
            rollout: self.times.rollout,
            train: self.train_on(pool_width),
            nodes: vec![block],
            costs: self.costs,
            sync: self.sync,
            resident,
            staleness: self.staleness,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Variation;

    #[test]
    fn normal_quantiles() {
        assert!((Variation::z_for(0.01) - 2.326348).abs() < 1e-5);
        assert!((Variation::z_for(0.05) - 1.644854).abs() < 1e-5);
        assert!(Variation::z_for(0.5).abs() < 1e-9);
        assert!((Variation::z_for(0.001) - 3.090232).abs() < 1e-5);
    }
}
