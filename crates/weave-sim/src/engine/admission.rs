//! Admission inside the replay: a job's current estimate and placement view, the placer's
//! decision turned into a dispatcher member (its state created on the first admission), and
//! the jobs waiting for capacity.

use super::job_run::MemberRun;
use super::{median, Engine, JobRun, Placed, What, CLASS_OTHER};
use crate::dynamics::exp_wait;
use crate::workload::SoloPipeline;
use std::collections::{BTreeMap, VecDeque};
use weave_core::{GroupId, Micros, PhaseTimes};
use weave_dispatch::{Dispatcher, GroupLimits, Input};
use weave_model::named_stream;
use weave_place::{PlaceError, PlaceJob, Target};

impl Engine<'_> {
    pub(super) fn admit_or_wait(&mut self, i: usize) {
        if self.never_fits(i) {
            // As the server refuses it (409): waiting, it would hold up the queue for good.
            self.metrics.rejected += 1;
            return;
        }
        if self.sharing() {
            self.waiting.push_back(i);
            self.schedule_queue();
            return;
        }
        if self.join_running_pack(i) {
            return;
        }
        if self.pair_on_arrival(i) {
            return;
        }
        if self.admit(i).is_err() {
            self.waiting.push_back(i);
        }
    }

    /// Whether job `i` needs more nodes than the fixed pools have.
    pub(super) fn never_fits(&self, i: usize) -> bool {
        let s = &self.jobs[i].spec;
        self.placer.config().capacity.is_some_and(|(r, t)| s.rollout_nodes > r || s.train_nodes > t)
    }

    /// The estimate admission uses: conservative at first, re-estimated from measurements.
    pub(super) fn estimate(&self, i: usize) -> PhaseTimes {
        let job = &self.jobs[i];
        match self.states[i].as_ref() {
            Some(s) if self.cfg.reestimate && !s.measured.is_empty() => median(&s.measured),
            _ => job.place.times,
        }
    }

    /// Job `i`'s placement view with its current estimate.
    pub(super) fn place_job(&self, i: usize) -> PlaceJob {
        self.place_view(i, &self.jobs[i], self.estimate(i), self.variations[i].clone())
    }

    /// `job`'s placement view as job `i`: `times` its estimate, `variation` what admission
    /// knows of its variation, on its rollout tier.
    pub(super) fn place_view(
        &self,
        i: usize,
        job: &crate::SimJob,
        times: PhaseTimes,
        variation: weave_place::Variation,
    ) -> PlaceJob {
        let mut place = job.place.clone();
        place.times = times;
        place.variation = variation;
        if let Some(spot) = &self.spot {
            match self.states[i].as_ref().and_then(|s| s.spot) {
                Some(tier) => spot.keep_tier(&mut place, tier, self.cfg.slo_epsilon),
                None => spot.choose_tier(&mut place, self.cfg.slo_epsilon, &self.placer),
            }
        }
        place
    }

    /// Tries to place job `i`; `Err` when it must wait for capacity.
    pub(super) fn admit(&mut self, i: usize) -> Result<(), ()> {
        self.admit_at(i, None)
    }

    /// Places job `i` where admission decides (`target` = `None`) or at `target`; `Err` when
    /// it must wait for capacity or the target is not feasible.
    pub(super) fn admit_at(&mut self, i: usize, target: Option<Target>) -> Result<(), ()> {
        let place = self.place_job(i);
        let spot = place.spot;
        let placed = match target {
            None => self.placer.admit(place),
            Some(t) => self.placer.admit_to(place, t),
        };
        let decision = match placed {
            Ok(d) => d,
            Err(PlaceError::NoCapacity(_) | PlaceError::NoEnvironment { .. }) => return Err(()),
            Err(PlaceError::Infeasible { .. }) => return Err(()),
            Err(_) => {
                self.metrics.rejected += 1;
                return Ok(());
            }
        };
        let colocated = decision.kind == weave_place::DecisionKind::Colocated;
        // The admission split counts where jobs start; moves and restarts are counted apart.
        if self.states[i].as_ref().is_none_or(|s| s.epoch == 0) {
            self.metrics.admitted(decision.kind);
            if let Some(s) = self.spot.as_mut().filter(|_| spot && !colocated) {
                s.counts.spot_jobs += 1;
            }
        }
        self.record_nodes();
        // A newcomer may need its block at once: whatever the group lent comes back now.
        self.reclaim_from(decision.group);
        let placed = Placed {
            group: decision.group,
            block: decision.block,
            block_width: decision.rollout_nodes.len() as u32,
            pool_width: decision.training_nodes.len() as u32,
            colocated,
        };
        let now = self.now;
        let seed = self.cfg.seed;
        let s = self.states[i].get_or_insert_with(|| JobRun::admitted(&self.jobs[i], seed, i, now));
        // The tier is the job's from its first placement on rollout nodes: a move planned on
        // one tier is carried out on it (co-located, it holds none and stays open to both).
        if !colocated {
            s.spot.get_or_insert(spot);
        }
        // Queueing delay counts the first admission only (epoch 0: never placed before).
        let first = s.epoch == 0;
        if first {
            self.metrics.queue_delays.push(now.saturating_sub(self.jobs[i].spec.arrival));
        }
        s.admitted_at = now;
        s.placed = Some(placed);
        s.predicted = decision.slowdowns.iter().find(|(j, _)| j.0 as usize == i).map_or(0.0, |(_, x)| *x);
        s.epoch += 1;
        s.fresh = true;
        s.last_train_end = now;
        let start_iteration = s.done;
        self.running += 1;
        if first {
            self.share_first_admission(i, now.saturating_sub(self.jobs[i].spec.arrival));
        }
        if first && self.cfg.fixed_lifetimes {
            let over = self.jobs[i].spec.arrival + self.jobs[i].lifetime();
            self.push(over, CLASS_OTHER, i, What::LifetimeOver, 0);
        }
        if let Some(f) = self.cfg.failures {
            let s = self.states[i].as_mut().expect("just set");
            let wait = exp_wait(f.job_rate_per_hour, &mut s.fail_rng);
            self.push(now + wait, CLASS_OTHER, i, What::JobFailure, 0);
        }
        // Fixed lifetimes: the job runs until its lifetime is over.
        let job = &self.jobs[i];
        let iterations = (!self.cfg.fixed_lifetimes).then_some(job.iterations);
        let spec = job.place.member(&decision, self.resident, iterations, start_iteration);
        let limits = GroupLimits {
            rollout_dram: self.cluster.rollout.host_dram(),
            train_dram: self.cluster.training.host_dram(),
        };
        let logging = self.cfg.events;
        let d = self.dispatchers.entry(decision.group).or_insert_with(|| {
            let mut d = Dispatcher::new(limits);
            d.set_logging(logging);
            d
        });
        let actions =
            d.handle(self.now, Input::Join(spec)).expect("the placer checked residency with the same figures");
        self.apply(decision.group, actions);
        self.follow_order(decision.group);
        Ok(())
    }

    /// The group's dispatcher follows the cyclic order of the placer's current prediction
    /// (what admission predicted is what runs).
    pub(super) fn follow_order(&mut self, g: GroupId) {
        let (Some(group), Some(d)) = (self.placer.group(g), self.dispatchers.get_mut(&g)) else { return };
        let Some(reorder) = group.reorder(d) else { return };
        let actions = d.handle(self.now, reorder).expect("a reorder is always accepted");
        self.apply(g, actions);
    }

    pub(super) fn admit_waiting(&mut self) {
        if self.sharing() {
            self.schedule_queue();
            return;
        }
        while let Some(&next) = self.waiting.front() {
            if self.admit(next).is_err() {
                break;
            }
            self.waiting.pop_front();
        }
    }
}

impl JobRun {
    /// The state of job `i` (`job`) at its first admission, `now`.
    fn admitted(job: &crate::SimJob, seed: u64, i: usize, now: Micros) -> JobRun {
        JobRun {
            rng: job.runtime_stream(seed),
            fail_rng: named_stream(seed, "job-failure", i as u64),
            draws: BTreeMap::new(),
            lag: (0, 0),
            first_admitted: now,
            last_train_end: now,
            solo_sum: Micros::ZERO,
            within_slo: 0,
            solo_pipeline: SoloPipeline::default(),
            at_checkpoint: (Micros::ZERO, 0, SoloPipeline::default()),
            preempted: (0, 0),
            train_busy_unsaved: 0,
            done: 0,
            checkpoint: 0,
            fresh: true,
            placed: None,
            epoch: 0,
            measured: VecDeque::new(),
            restarts: 0,
            last_move: None,
            admitted_at: now,
            excused: false,
            predicted: 0.0,
            rollout_started: Micros::ZERO,
            rollout_plain: Micros::ZERO,
            train_started: Micros::ZERO,
            rolling: false,
            rollout_extra: Micros::ZERO,
            spot: None,
            members: job
                .pack
                .as_ref()
                .map_or_else(Vec::new, |p| vec![MemberRun { admitted: now, ..Default::default() }; p.members.len()]),
        }
    }
}
