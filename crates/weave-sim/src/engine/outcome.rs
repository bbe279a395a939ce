//! A job's iterations and its end: the SLO statistic and re-estimation of each finished
//! iteration, completion, a fixed lifetime's end, and the outcome it leaves in the metrics.

use super::job_run::MemberRun;
use super::{median, Engine, JobRun, MEASURED_KEPT};
use crate::metrics::JobOutcome;
use crate::workload::SoloPipeline;
use weave_core::{JobId, Micros};

impl Engine<'_> {
    pub(super) fn iteration_done(&mut self, i: usize, iteration: u64) {
        let job = &self.jobs[i];
        let s = self.states[i].as_mut().expect("running job");
        let took = self.now.saturating_sub(s.last_train_end);
        let (drawn, _) = s.draws.remove(&iteration).unwrap_or((job.disagg, job.colo));
        let restart = s.fresh && iteration > 0 && s.excused;
        let solo = if job.spec.staleness == 0 {
            let solo = job.solo_iteration(drawn, iteration);
            // A restart after a failure paid a cold start, as a solo restart would.
            solo + if restart { job.cold_start } else { Micros::ZERO }
        } else {
            if restart {
                // A solo run restarting from its checkpoint refills its pipeline too.
                s.solo_pipeline = SoloPipeline::default();
            }
            let mut d = drawn;
            if iteration == 0 || restart {
                // Each lane loads its state cold before its first phase, as the solo run's do.
                d.rollout += job.place.costs.rollout_cold;
                d.train += job.place.costs.train_cold;
            }
            s.solo_pipeline.next(job.spec.staleness, d, job.sync_after(iteration))
        };
        s.fresh = false;
        s.excused = false;
        s.solo_sum += solo;
        if took.0 as f64 <= job.slo * solo.0 as f64 {
            s.within_slo += 1;
        }
        s.done = iteration + 1;
        s.last_train_end = self.now;
        let every = match (&self.cfg.failures, &self.cfg.share) {
            (Some(f), _) => Some(f.checkpoint_every),
            (None, Some(p)) => Some(p.checkpoint_every),
            _ => None,
        };
        if every.is_some_and(|e| s.done.is_multiple_of(e.max(1))) {
            s.save_checkpoint();
        }
        if let Some(pack) = &job.pack {
            let now = self.now;
            let outcomes = &mut self.metrics.jobs;
            for ((m, first), run) in pack.members.iter().zip(&pack.firsts).zip(s.members.iter_mut()) {
                if run.done >= m.iterations || iteration < *first {
                    continue;
                }
                let solo = m.solo_iteration(pack.member_draw(m, drawn, iteration), iteration);
                run.solo_sum += solo;
                if took.0 as f64 <= m.slo * solo.0 as f64 {
                    run.within_slo += 1;
                }
                run.done += 1;
                if run.done == m.iterations {
                    run.recorded = true;
                    outcomes.push(member_outcome(m, run, now, member_predicted(job, m, s.predicted)));
                }
            }
        }
        s.measured.push_back(drawn);
        if s.measured.len() > MEASURED_KEPT {
            s.measured.pop_front();
        }
        if self.cfg.reestimate {
            let est = median(&s.measured);
            self.placer.update_times(JobId(i as u32), est);
        }
    }

    pub(super) fn complete(&mut self, job: JobId) {
        let i = job.0 as usize;
        self.forget_drain(i);
        let s = self.states[i].take().expect("running job");
        self.record_outcome(i, &s, false);
        let g = s.placed.expect("placed").group;
        self.release(job, g);
    }

    /// Fixed lifetimes: job `i` leaves now, with the iterations it finished (its current one
    /// is cut); true if it was still there.
    pub(super) fn lifetime_over(&mut self, i: usize) -> bool {
        if self.states[i].is_none() {
            return false;
        }
        self.unplace(i);
        self.waiting.retain(|&w| w != i);
        let s = self.states[i].take().expect("known job");
        self.record_outcome(i, &s, false);
        true
    }

    pub(super) fn record_outcome(&mut self, i: usize, s: &JobRun, failed: bool) {
        let spec = &self.jobs[i];
        if let Some(pack) = &spec.pack {
            // A pack's members are the jobs: those still running end here with what they did.
            for (m, run) in pack.members.iter().zip(&s.members).filter(|(_, r)| !r.recorded) {
                let predicted = member_predicted(spec, m, s.predicted);
                self.metrics.jobs.push(member_outcome(m, run, self.now, predicted));
                if failed {
                    self.metrics.events.failed_permanently += 1;
                }
            }
            self.metrics.end = self.now;
            return;
        }
        let life = self.now.saturating_sub(s.first_admitted);
        self.metrics.jobs.push(JobOutcome {
            name: spec.spec.name.clone(),
            slo: spec.slo,
            iterations: s.done,
            slowdown: life.0 as f64 / s.solo_sum.0.max(1) as f64,
            iterations_within_slo: s.within_slo,
            queued: s.first_admitted.saturating_sub(spec.spec.arrival),
            predicted_slowdown: s.predicted,
            placements: s.epoch.div_ceil(2).max(1),
            reclaimed: s.preempted.0,
            outranked: s.preempted.1,
            passed_over: self.share.as_ref().is_some_and(|sh| sh.passed_over.contains(&i)),
            staleness: spec.spec.staleness,
            versions_behind: (spec.spec.staleness > 0).then(|| s.lag.0 as f64 / s.lag.1.max(1) as f64),
        });
        if failed {
            self.metrics.events.failed_permanently += 1;
        }
        self.metrics.end = self.now;
    }
}

/// A member's own predicted slowdown: the pack's, which admission predicted against the
/// pack's solo period, taken against the member's solo iteration instead.
fn member_predicted(pack: &crate::SimJob, m: &crate::SimJob, pack_predicted: f64) -> f64 {
    let pack_solo = pack.solo_iteration(pack.disagg, 1).0 as f64;
    pack_predicted * pack_solo / m.solo_iteration(m.disagg, 1).0.max(1) as f64
}

/// A pack member's outcome: judged against its own SLO and solo run.
fn member_outcome(m: &crate::SimJob, run: &MemberRun, now: Micros, predicted: f64) -> JobOutcome {
    let admitted = run.admitted;
    JobOutcome::placed_once(
        m.spec.name.clone(),
        m.slo,
        (run.done, run.within_slo),
        now.saturating_sub(admitted).0 as f64 / run.solo_sum.0.max(1) as f64,
        admitted.saturating_sub(m.spec.arrival),
        predicted,
    )
}
