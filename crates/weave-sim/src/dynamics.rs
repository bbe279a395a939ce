//! What changes under a running job: drift of its phase durations, failures of jobs and nodes,
//! and the re-grouping policies that respond (issue: drift, failures and re-grouping).

use crate::workload::SimJob;
use rand::Rng;
use serde::{Deserialize, Serialize};
use weave_core::Micros;
use weave_model::{named_stream, Drift};

/// How jobs' response lengths drift over their lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DriftScenario {
    #[default]
    None,
    /// Every job lengthens by `extent` (scaled down for small models) over its life.
    Increasing { extent: f64 },
    /// Every job shortens by `extent` (scaled down for small models).
    Decreasing { extent: f64 },
    /// Each job drawn from none / increasing / decreasing with this extent.
    Mixed { extent: f64 },
}

impl DriftScenario {
    pub fn name(&self) -> String {
        match self {
            DriftScenario::None => "none".into(),
            DriftScenario::Increasing { extent } => format!("increasing {:.0}%", extent * 100.0),
            DriftScenario::Decreasing { extent } => format!("decreasing {:.0}%", extent * 100.0),
            DriftScenario::Mixed { extent } => format!("mixed {:.0}%", extent * 100.0),
        }
    }
}

/// Smaller models drift less: a 3B model drifts ~half as much as a 14B one and more.
fn size_factor(params_b: f64) -> f64 {
    (params_b / 14.0).clamp(0.0, 1.0).sqrt()
}

/// Gives every job its drift curve; seeded, the same for every policy.
pub fn assign_drift(jobs: &mut [SimJob], scenario: DriftScenario, seed: u64) {
    for j in jobs {
        let f = size_factor(j.spec.job_type.model.params_b());
        j.drift = match scenario {
            DriftScenario::None => Drift::None,
            DriftScenario::Increasing { extent } => Drift::Increasing { extent: extent * f },
            DriftScenario::Decreasing { extent } => Drift::Decreasing { extent: extent * f },
            DriftScenario::Mixed { extent } => match named_stream(seed, "drift", j.spec.id.0 as u64).random_range(0..3)
            {
                0 => Drift::None,
                1 => Drift::Increasing { extent: extent * f },
                _ => Drift::Decreasing { extent: extent * f },
            },
        };
    }
}

/// Consolidation (policies with co-located mode): how often lone jobs are looked at and how
/// much churn is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Consolidation {
    /// Besides arrivals and departures, lone jobs are reconsidered this often.
    pub interval: Micros,
    /// Per-job cooldown and moves per hour.
    pub churn: weave_place::consolidate::ChurnLimits,
}

impl Default for Consolidation {
    fn default() -> Self {
        Consolidation { interval: weave_place::consolidate::PASS_INTERVAL, churn: Default::default() }
    }
}

/// What happens when a group's members drift out of their SLOs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Regroup {
    /// Place on arrival, never move (the research prototype).
    #[default]
    Static,
    /// Every `interval`: move jobs out of violating groups, and re-pack everything when the
    /// saving over `horizon` beats the migration cost.
    Periodic { interval: Micros, horizon: Micros },
    /// On every finished iteration: if the job's group now violates a member's SLO (with
    /// re-estimated durations), move one member out. No clock.
    Incremental,
}

impl Regroup {
    pub fn name(&self) -> &'static str {
        match self {
            Regroup::Static => "static",
            Regroup::Periodic { .. } => "periodic",
            Regroup::Incremental => "incremental",
        }
    }

    pub fn periodic_default() -> Regroup {
        Regroup::Periodic { interval: Micros(6 * Micros::PER_HOUR), horizon: Micros(24 * Micros::PER_HOUR) }
    }
}

/// Seeded failure injection.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failures {
    /// Failures per job-hour of each running job.
    pub job_rate_per_hour: f64,
    /// Failures per node-hour of every node held.
    pub node_rate_per_hour: f64,
    /// A job checkpoints every this many iterations; a failure loses what came after.
    pub checkpoint_every: u64,
    /// Time before a failed job is admitted again.
    pub restart_delay: Micros,
    /// After this many failures a job is reported failed permanently.
    pub max_restarts: u32,
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            job_rate_per_hour: 0.01,
            node_rate_per_hour: 0.001,
            checkpoint_every: 10,
            restart_delay: Micros::from_secs(300),
            max_restarts: 20,
        }
    }
}

/// An exponential waiting time for `rate` events per hour (`MAX` for rate 0).
pub fn exp_wait<R: Rng + ?Sized>(rate_per_hour: f64, rng: &mut R) -> Micros {
    if rate_per_hour <= 0.0 {
        return Micros::MAX;
    }
    let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    Micros::from_secs_f64(-u.ln() / rate_per_hour * 3_600.0)
}
