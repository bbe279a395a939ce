//! A job's phase gate as its driver sees it: which phases it may run now and which it may ask
//! for next. Two lanes, as in the dispatcher's member: rollout n may be asked for once
//! weights version n - k exist (the trainings before n - k finished; the job syncs its own
//! weights as part of training), training n once rollout n has finished. With staleness 0 the
//! lanes alternate, which is the on-policy barrier: one phase at a time.

use serde::{Deserialize, Serialize};
use weave_dispatch::Phase;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    /// Bounded staleness k (0: on-policy).
    pub staleness: u32,
    /// Rollouts finished: the next rollout's iteration.
    pub rolled: u64,
    /// Trainings finished: the next training's iteration and the newest weights version.
    pub trained: u64,
    /// The rollout granted now, and the weights version it samples with.
    pub rollout: Option<RolloutGrant>,
    /// The training granted now (its iteration).
    pub train: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutGrant {
    pub iteration: u64,
    /// Trainings done when it was granted: `iteration - weights` versions behind, at most k.
    pub weights: u64,
}

/// Why a phase may not be asked for: it is not the lane's next, or it would break the bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

impl Gate {
    /// A job that starts (or resumes) at iteration `start`.
    pub fn new(staleness: u32, start: u64) -> Gate {
        Gate { staleness, rolled: start, trained: start, rollout: None, train: None }
    }

    pub fn is_granted(&self, phase: Phase, iteration: u64) -> bool {
        match phase {
            Phase::Rollout => self.rollout.is_some_and(|g| g.iteration == iteration),
            Phase::Train => self.train == Some(iteration),
        }
    }

    /// The phases granted now, rollout first (on-policy: at most one).
    pub fn grants(&self) -> Vec<(Phase, u64)> {
        let rollout = self.rollout.map(|g| (Phase::Rollout, g.iteration));
        rollout.into_iter().chain(self.train.map(|k| (Phase::Train, k))).collect()
    }

    /// The job's next phase in iteration order: a training owed to a finished rollout comes
    /// first, else the next rollout (on-policy this is the barrier's one next phase).
    pub fn next(&self) -> (Phase, u64) {
        if self.rolled > self.trained {
            (Phase::Train, self.trained)
        } else {
            (Phase::Rollout, self.rolled)
        }
    }

    /// Whether `phase` of `iteration` is one the job may wait for (the lane's next, within
    /// the bound); granted phases are too.
    pub fn may_ask(&self, phase: Phase, iteration: u64) -> Result<(), Refusal> {
        if self.is_granted(phase, iteration) {
            return Ok(());
        }
        match phase {
            Phase::Rollout if iteration == self.rolled && self.rollout.is_none() => {
                if iteration <= self.trained + u64::from(self.staleness) {
                    Ok(())
                } else {
                    Err(Refusal(self.bound_reason(iteration)))
                }
            }
            Phase::Train if iteration == self.trained && self.train.is_none() && self.rolled > iteration => Ok(()),
            _ => Err(Refusal(self.order_reason(phase, iteration, "start"))),
        }
    }

    pub fn grant(&mut self, phase: Phase, iteration: u64, weights: u64) {
        match phase {
            Phase::Rollout => self.rollout = Some(RolloutGrant { iteration, weights }),
            Phase::Train => self.train = Some(iteration),
        }
    }

    /// A granted phase finished (checked by the plane before it is applied).
    pub fn finish(&mut self, phase: Phase, iteration: u64) {
        match phase {
            Phase::Rollout => {
                self.rollout = None;
                self.rolled = iteration + 1;
            }
            Phase::Train => {
                self.train = None;
                self.trained = iteration + 1;
            }
        }
    }

    /// Everything granted is withdrawn (the admission ended).
    pub fn withdraw(&mut self) {
        self.rollout = None;
        self.train = None;
    }

    /// Whether the job has started an iteration it has not finished (what a preemption loses).
    pub fn mid_iteration(&self) -> bool {
        self.rollout.is_some() || self.train.is_some() || self.rolled > self.trained
    }

    fn bound_reason(&self, iteration: u64) -> String {
        format!(
            "staleness bound: rollout of iteration {iteration} would sample weights version {} ({} versions behind; \
             the job allows {}); wait for training of iteration {} to finish",
            self.trained,
            iteration - self.trained,
            self.staleness,
            iteration - u64::from(self.staleness) - 1,
        )
    }

    /// Why `verb` (start, finish) of `phase` of `iteration` is out of order.
    pub fn order_reason(&self, phase: Phase, iteration: u64, verb: &str) -> String {
        let barrier = if self.staleness == 0 { "on-policy barrier" } else { "phase order" };
        let granted = self.grants();
        let held = if granted.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = granted.iter().map(|(p, k)| format!("{} of iteration {k}", name(*p))).collect();
            format!(" (granted: {})", list.join(", "))
        };
        let next = if self.staleness == 0 {
            let (p, k) = self.next();
            format!("the job's next phase is {} of iteration {k}", name(p))
        } else {
            format!("the job's next rollout is iteration {}, its next training iteration {}", self.rolled, self.trained)
        };
        format!("{barrier}: cannot {verb} {} of iteration {iteration}; {next}{held}", name(phase))
    }
}

fn name(p: Phase) -> &'static str {
    if p == Phase::Rollout {
        "rollout"
    } else {
        "training"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_policy_lanes_alternate() {
        let mut g = Gate::new(0, 0);
        assert_eq!(g.next(), (Phase::Rollout, 0));
        assert!(g.may_ask(Phase::Rollout, 0).is_ok());
        assert!(g.may_ask(Phase::Train, 0).is_err(), "training before its rollout finished");
        g.grant(Phase::Rollout, 0, 0);
        g.finish(Phase::Rollout, 0);
        assert!(g.may_ask(Phase::Rollout, 1).is_err(), "rollout 1 needs weights version 1");
        assert!(g.may_ask(Phase::Train, 0).is_ok());
        assert_eq!(g.next(), (Phase::Train, 0));
        g.grant(Phase::Train, 0, 0);
        g.finish(Phase::Train, 0);
        assert_eq!(g.next(), (Phase::Rollout, 1));
        assert!(g.may_ask(Phase::Rollout, 1).is_ok());
    }

    #[test]
    fn one_step_off_policy_runs_a_rollout_ahead_and_no_further() {
        let mut g = Gate::new(1, 0);
        g.grant(Phase::Rollout, 0, 0);
        g.finish(Phase::Rollout, 0);
        g.grant(Phase::Train, 0, 0);
        // Rollout 1 may run beside training 0, with weights version 0.
        assert!(g.may_ask(Phase::Rollout, 1).is_ok());
        g.grant(Phase::Rollout, 1, 0);
        assert_eq!(g.grants(), vec![(Phase::Rollout, 1), (Phase::Train, 0)]);
        g.finish(Phase::Rollout, 1);
        // Rollout 2 would sample version 0, two behind.
        let refused = g.may_ask(Phase::Rollout, 2).unwrap_err();
        assert!(refused.0.contains("staleness bound"), "{}", refused.0);
        g.finish(Phase::Train, 0);
        assert!(g.may_ask(Phase::Rollout, 2).is_ok());
        assert!(g.may_ask(Phase::Train, 1).is_ok());
        assert!(g.mid_iteration());
    }
}
