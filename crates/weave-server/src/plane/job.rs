//! A job as the plane holds it: its admission, its gate, and what it measured of itself
//! (re-estimation and the SLO statistic of each finished iteration).

use super::{ev, Gate, Plane, PlaneEvent, SubmitSpec};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use weave_core::{JobId, JobSpec, Micros, PhaseTimes};
use weave_dispatch::{Input, Phase};
use weave_place::{Decision, Variation};

/// Measured phases kept per job for re-estimation.
const MEASURED_KEPT: usize = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for room in fixed pools (see [`Plane::queue`]).
    Queued,
    Running,
    Completed,
    Cancelled,
    Failed,
    /// This admission was preempted for another job; the job waits in the queue again and
    /// resumes from its last completed iteration.
    Preempted,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobEntry {
    pub name: String,
    pub tenant: String,
    pub id: JobId,
    pub spec: JobSpec,
    pub slo: f64,
    /// `None`: runs until cancelled.
    pub iterations: Option<u64>,
    pub state: JobState,
    pub decision: Option<Decision>,
    /// What the job may run now and ask for next (one phase at a time on-policy; with
    /// staleness a rollout beside a training).
    pub gate: Gate,
    pub completed_iterations: u64,
    pub failure: Option<String>,
    pub submitted_us: u64,
    /// Current estimate (conservative at first, then re-estimated from measured phases).
    pub estimate: PhaseTimes,
    /// The submission as made (re-admission after a node failure resubmits it).
    pub submit: SubmitSpec,
    #[serde(skip)]
    pub(super) measured: Measured,
    /// Switches the job reported with its phases (`meta.switch`, `meta.switch_s`): once it has
    /// some, its re-admissions and moves are placed with them in place of the model's.
    #[serde(default, skip_serializing_if = "SwitchSamples::is_empty")]
    pub switches: SwitchSamples,
    /// Host memory the job's runtime last reported holding (`meta.host_bytes` with a phase):
    /// held against the state the ledger models for it (see `views::HostMemoryView`).
    #[serde(default, skip_serializing_if = "HostBytes::is_empty")]
    pub host: HostBytes,
    /// What an agentic job's rollouts reported of their environments (`meta.agentic`).
    #[serde(default, skip_serializing_if = "super::agentic::EnvironmentSamples::is_empty")]
    pub environment: super::agentic::EnvironmentSamples,
    /// Recent finishes, (phase, iteration, time), oldest first: a lane is ready for a phase
    /// once the phases it depends on have finished (`lane_ready`), which with staleness is not
    /// the job's last finish (the other lane's may come in between).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(super) finishes: VecDeque<(Phase, u64, u64)>,
    /// When its current iteration started (admission or its last training finish).
    #[serde(skip)]
    pub(super) iteration_started_us: u64,
    /// The admission an execution backend launched (`Record::Launched`): a launch the cluster
    /// manager no longer lists is then one that ended, across restarts of the server too,
    /// never one to make again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched: Option<u32>,
    /// A launched job admitted but not yet started (no phase asked for): its member joins the
    /// group's dispatcher when it first asks (`Record::Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pending_join: Option<weave_dispatch::MemberSpec>,
    /// When its running training was granted (lending reads when it should end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) train_granted_us: Option<u64>,
    /// A LoRA job's pack and adapter slot (it runs in the pack's shared engine; see `lora`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<super::AdapterSlot>,
}

/// Recent measured (rollout, training) durations.
pub(super) type Measured = (VecDeque<Micros>, VecDeque<Micros>);

/// Recent switches a job measured of its own state (both pools together, as a submission
/// declares them): warm from host memory, cold from a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SwitchSamples {
    warm: VecDeque<Micros>,
    cold: VecDeque<Micros>,
}

impl SwitchSamples {
    pub fn is_empty(&self) -> bool {
        self.warm.is_empty() && self.cold.is_empty()
    }

    /// Keeps the switch a phase's metadata reports, if it reports one that makes sense (a kind
    /// of `warm` or `cold` and non-negative seconds below a day); anything else is ignored.
    fn record(&mut self, meta: Option<&serde_json::Value>) {
        let Some(m) = meta else { return };
        let secs = m.get("switch_s").and_then(serde_json::Value::as_f64).filter(|s| (0.0..86_400.0).contains(s));
        let kept = match m.get("switch").and_then(serde_json::Value::as_str) {
            Some("warm") => &mut self.warm,
            Some("cold") => &mut self.cold,
            _ => return,
        };
        if let Some(s) = secs {
            kept.push_back(Micros::from_secs_f64(s));
            if kept.len() > MEASURED_KEPT {
                kept.pop_front();
            }
        }
    }

    /// The medians of the warm and the cold switches reported, where there are any.
    pub fn medians(&self) -> (Option<Micros>, Option<Micros>) {
        let median = |v: &VecDeque<Micros>| {
            let mut v: Vec<Micros> = v.iter().copied().collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied()
        };
        (median(&self.warm), median(&self.cold))
    }
}

/// Bytes of state a job's runtime reported holding in host memory on a node of each pool, as
/// of its last phase there (the rollout worker's copy of the weights; the trainer's weights
/// and optimizer state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostBytes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<u64>,
}

/// More than any node holds: a report above it is not believed.
const HOST_BYTES_MAX: u64 = 1 << 50;

impl HostBytes {
    pub fn is_empty(&self) -> bool {
        self.rollout.is_none() && self.train.is_none()
    }

    /// Keeps what a phase's metadata reports (`host_bytes`, a whole number of bytes below a
    /// petabyte); anything else is ignored.
    fn record(&mut self, phase: Phase, meta: Option<&serde_json::Value>) {
        let Some(b) = meta.and_then(|m| m.get("host_bytes")).and_then(serde_json::Value::as_u64) else { return };
        if b < HOST_BYTES_MAX {
            *if phase == Phase::Rollout { &mut self.rollout } else { &mut self.train } = Some(b);
        }
    }
}

impl JobEntry {
    /// `submit` admitted at `time_us` as admission `id` (its spec `spec`), running from its
    /// gate's position with `estimate`; nothing placed, measured or reported yet.
    pub(super) fn running(
        submit: &SubmitSpec,
        tenant: &str,
        (id, spec): (JobId, JobSpec),
        time_us: u64,
        gate: Gate,
        estimate: PhaseTimes,
    ) -> JobEntry {
        JobEntry {
            name: submit.id.clone(),
            tenant: tenant.into(),
            id,
            spec,
            slo: submit.allowed_slowdown(),
            iterations: submit.job.iterations,
            state: JobState::Running,
            decision: None,
            completed_iterations: gate.trained,
            gate,
            launched: None,
            failure: None,
            submitted_us: time_us,
            estimate,
            submit: submit.clone(),
            measured: Default::default(),
            switches: Default::default(),
            host: Default::default(),
            environment: Default::default(),
            finishes: Default::default(),
            iteration_started_us: time_us,
            pending_join: None,
            train_granted_us: None,
            adapter: None,
        }
    }

    /// Running with a driver of its own, whose heartbeats keep it alive (a LoRA job in a pack
    /// has none: its pack's driver runs it).
    pub fn watched(&self) -> bool {
        self.state == JobState::Running && self.adapter.is_none()
    }

    /// Admitted for a backend to launch, and no phase asked for yet (see `Record::Ready`).
    pub fn starting(&self) -> bool {
        self.state == JobState::Running && self.pending_join.is_some()
    }

    /// The phase granted now, rollout first (on-policy the only one; see `gate.grants()`).
    pub fn granted(&self) -> Option<(Phase, u64)> {
        self.gate.grants().first().copied()
    }

    /// The next phase in iteration order (on-policy: the barrier's one next phase).
    pub fn next(&self) -> (Phase, u64) {
        self.gate.next()
    }

    /// How much longer its SLO allows this admission to have taken than it has: its allowed
    /// slowdown times its solo time for the iterations done (at its current estimate, with its
    /// staleness), less the time from admission to its last training's end. Slack banked by
    /// earlier admissions is not carried (a move is judged more strictly, never less).
    pub fn banked_slack(&self) -> Micros {
        let done = self.completed_iterations.saturating_sub(self.submit.server.resume_from.unwrap_or(0));
        let solo = weave_dispatch::timing::solo_period(self.estimate.rollout, self.estimate.train, self.gate.staleness);
        let allowed = Micros(solo.0.saturating_mul(done)).scale(self.slo);
        let taken = if done == 0 { 0 } else { self.iteration_started_us.saturating_sub(self.submitted_us) };
        allowed.saturating_sub(Micros(taken))
    }

    /// When the lane of `phase` became ready for `iteration`: rollout n once rollout n - 1 and
    /// training n - k - 1 have finished (k its staleness), training n once rollout n and training
    /// n - 1 have; a phase of before this admission counts as done at its start. A grant's wait
    /// (what sharing the group cost the job) is measured from here.
    pub fn lane_ready(&self, phase: Phase, iteration: u64) -> u64 {
        let done = |p: Phase, n: Option<u64>| {
            let Some(n) = n else { return self.submitted_us };
            let found = self.finishes.iter().rev().find(|(fp, fi, _)| *fp == p && *fi == n).map(|f| f.2);
            found.unwrap_or(self.submitted_us)
        };
        let before = |d: u64| iteration.checked_sub(d);
        match phase {
            Phase::Rollout => {
                done(Phase::Rollout, before(1)).max(done(Phase::Train, before(self.gate.staleness as u64 + 1)))
            }
            Phase::Train => done(Phase::Rollout, Some(iteration)).max(done(Phase::Train, before(1))),
        }
    }

    /// Whether the estimate comes from the job's own measurements (both phases seen).
    pub fn measured_estimate(&self) -> bool {
        !self.measured.0.is_empty() && !self.measured.1.is_empty()
    }

    /// The job's re-admission from its last completed iteration (after a node failure or a
    /// consolidation move): its submission resuming there, and what it measured of itself,
    /// which outlives its nodes and places the new admission.
    pub(super) fn resubmission(&self) -> (SubmitSpec, Option<(PhaseTimes, Measured)>) {
        let mut resubmit = self.submit.clone();
        resubmit.server.resume_from = (self.completed_iterations > 0).then_some(self.completed_iterations);
        // What it measured of its switches replaces what it declared (or the model's).
        let (warm, cold) = self.switches.medians();
        resubmit.server.switch_warm_s = warm.map(Micros::as_secs_f64).or(resubmit.server.switch_warm_s);
        resubmit.server.switch_cold_s = cold.map(Micros::as_secs_f64).or(resubmit.server.switch_cold_s);
        // So do what its drivers reported of their environments (planned from them).
        if let Some((turns, step_s, startup_s, _)) = self.environment.medians() {
            resubmit.server.measured_environment = Some(weave_core::agentic::EnvMeasured {
                turns_per_trajectory: turns.max(1.0),
                env_step_s: step_s,
                startup_s_per_trajectory: startup_s,
            });
        }
        let carried = self.measured_estimate().then(|| (self.estimate, self.measured.clone()));
        (resubmit, carried)
    }
}

impl Plane {
    pub(super) fn finish(
        &mut self,
        time_us: u64,
        name: &str,
        phase: Phase,
        iteration: u64,
        duration: Micros,
        meta: Option<serde_json::Value>,
    ) {
        if phase == Phase::Rollout {
            self.return_loan(time_us, name, "its rollout finished");
        }
        let j = self.jobs.get_mut(name).map(Arc::make_mut).expect("checked");
        j.gate.finish(phase, iteration);
        j.switches.record(meta.as_ref());
        j.host.record(phase, meta.as_ref());
        if phase == Phase::Rollout && j.spec.agentic.is_some() {
            j.environment.record(meta.as_ref());
        }
        let kept = if phase == Phase::Rollout { &mut j.measured.0 } else { &mut j.measured.1 };
        kept.push_back(duration);
        if kept.len() > MEASURED_KEPT {
            kept.pop_front();
        }
        j.finishes.push_back((phase, iteration, time_us));
        // Enough for the oldest dependency a lane can have (training n - k - 1).
        while j.finishes.len() > 2 * (j.gate.staleness as usize + 2) {
            j.finishes.pop_front();
        }
        if phase == Phase::Train {
            j.completed_iterations = iteration + 1;
            // Its own iteration: what the job would take alone (pipelined with its staleness),
            // against the time since its last training ended.
            // Its first iteration has nothing to overlap with.
            let roll = j.measured.0.back().copied().unwrap_or(Micros::ZERO);
            let first = iteration == j.submit.server.resume_from.unwrap_or(0);
            let own = weave_dispatch::timing::solo_period(roll, duration, if first { 0 } else { j.gate.staleness });
            let wall = time_us.saturating_sub(j.iteration_started_us);
            self.stats.iterations += 1;
            if wall as f64 <= j.slo * own.0 as f64 {
                self.stats.iterations_within_slo += 1;
            }
            j.iteration_started_us = time_us;
        }
        // Robust re-estimation: the median of recent measurements, once there are some.
        if let Some(est) = PhaseTimes::median_of(j.measured.0.iter().copied(), j.measured.1.iter().copied()) {
            j.estimate = est;
            let (id, est) = (j.id, j.estimate);
            let remaining = j.iterations.map(|n| n.saturating_sub(j.completed_iterations));
            let variation = measured_variation(&j.measured, est, remaining, self.slo_z);
            Arc::make_mut(&mut self.placer).update_measured(id, est);
            Arc::make_mut(&mut self.placer).update_variation(id, variation);
        }
        let (id, group) = (self.jobs[name].id, self.group_of(name));
        self.event(PlaneEvent { meta, ..ev(time_us, name, "finish", Some(phase), Some(iteration), group) });
        // A move deferred for the job takes effect at its training's finish, before the
        // dispatcher grants it anything more (then it leaves the group instead).
        if phase == Phase::Train && self.deferred_move_due(time_us, name) {
            return;
        }
        if let Some(g) = group {
            self.drive(time_us, g, Input::PhaseFinished { job: id, phase, iteration });
        }
    }
}

/// What a job's own measurements say about its variation: each measured iteration as factors
/// of the median estimate (rollouts and trainings paired by age); empty until three of each.
pub(super) fn measured_variation(measured: &Measured, est: PhaseTimes, remaining: Option<u64>, z: f64) -> Variation {
    let n = measured.0.len().min(measured.1.len());
    let samples: Vec<(f64, f64)> = if n < 3 {
        Vec::new()
    } else {
        let f = |m: Micros, e: Micros| m.0 as f64 / e.0.max(1) as f64;
        measured
            .0
            .iter()
            .rev()
            .zip(measured.1.iter().rev())
            .map(|(r, t)| (f(*r, est.rollout), f(*t, est.train)))
            .collect()
    };
    Variation { samples: samples.into(), iterations: remaining.unwrap_or(100).max(1), z }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::{Plane, Record, SubmitSpec};
    use weave_core::ClusterConfig;
    use weave_place::{PlacePolicy, PlacerConfig};

    /// With two lanes the job's last finish may be the other lane's: the rollout lane ran ahead
    /// while training waited for the pool. Each lane is ready when its own dependencies are.
    #[test]
    fn a_lane_is_ready_when_its_dependencies_finished_not_at_the_last_finish() {
        let cluster = ClusterConfig::default();
        let mut p = Plane::new(cluster.clone(), PlacerConfig::for_cluster(&cluster, PlacePolicy::Weave, true, true, 0));
        let job: SubmitSpec = serde_json::from_value(serde_json::json!({
            "id": "a", "type": "7B_8k", "iterations": 9, "slo": 2.0, "rollout_s": 100, "train_s": 80, "staleness": 1
        }))
        .unwrap();
        p.apply(&Record::Submit { time_us: 10, tenant: "t".into(), job }).unwrap();
        let mut j = p.job("a").unwrap().clone();
        let (r, t) = (Phase::Rollout, Phase::Train);
        j.finishes = [(r, 0, 100), (t, 0, 150), (r, 1, 160), (r, 2, 200)].into_iter().collect();
        assert_eq!(j.lane_ready(t, 1), 160, "rollout 1 and training 0 done; not rollout 2's finish");
        j.finishes.push_back((t, 1, 230));
        assert_eq!(j.lane_ready(r, 3), 230, "rollout 2, and training 1 (k = 1) the later");
        assert_eq!(j.lane_ready(r, 2), 160, "rollout 1 and training 0");
        assert_eq!(j.lane_ready(t, 0), 100);
        assert_eq!(j.lane_ready(r, 0), 10, "the first phase of an admission: ready at its start");
    }
}
