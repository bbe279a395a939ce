//! What goes wrong and how the replay repairs it: job and node failures (a job restarts from
//! its checkpoint), groups drifting out of their SLOs (a member moves out), and the periodic
//! re-pack of the regrouping baselines.

use super::{Engine, What, CLASS_OTHER, VIOLATION_MARGIN};
use crate::dynamics::Regroup;
use rand::Rng;
use weave_core::{GroupId, Micros};
use weave_place::Placer;

impl Engine<'_> {
    pub(super) fn fail(&mut self, i: usize) {
        let Some(f) = self.cfg.failures else { return };
        self.unplace(i);
        let s = self.states[i].as_mut().expect("known job");
        self.metrics.events.lost_iterations += s.done - s.checkpoint;
        s.done = s.checkpoint;
        // The failure threw that work away, not a later preemption.
        s.train_busy_unsaved = 0;
        s.excused = true;
        s.restarts += 1;
        self.metrics.events.restarts += 1;
        if s.restarts > f.max_restarts {
            let s = self.states[i].take().expect("known job");
            self.record_outcome(i, &s, true);
        } else {
            self.pending_readmits += 1;
            self.push(self.now + f.restart_delay, CLASS_OTHER, i, What::Readmit, 0);
        }
    }

    /// A random held node fails: every job with state on it fails.
    pub(super) fn node_failure(&mut self) {
        let (r, t) = self.placer.nodes_in_use();
        if r + t == 0 {
            return;
        }
        let mut u = self.node_rng.random_range(0..r + t);
        let mut victims: Vec<usize> = Vec::new();
        'groups: for g in self.placer.groups() {
            for b in &g.blocks {
                let n = b.nodes.len() as u32;
                if u < n {
                    victims.extend(g.members.iter().filter(|m| m.block == b.id).map(|m| m.job.id.0 as usize));
                    break 'groups;
                }
                u -= n;
            }
            let n = g.training_nodes.len() as u32;
            if u < n {
                victims.extend(g.members.iter().map(|m| m.job.id.0 as usize));
                break;
            }
            u -= n;
        }
        self.metrics.events.node_failures += 1;
        for v in victims {
            self.fail(v);
        }
    }

    /// If group `g` violates a member's SLO under current estimates, moves one member out:
    /// the one whose departure leaves the rest with the smallest worst slowdown.
    pub(super) fn repair(&mut self, g: GroupId) {
        let Some(group) = self.placer.group(g) else { return };
        if group.members.len() < 2 {
            return;
        }
        let violating =
            group.members.iter().enumerate().any(|(k, m)| {
                group.prediction.coexec[k].0 as f64 > m.job.slo * m.job.solo().0 as f64 * VIOLATION_MARGIN
            });
        if !violating {
            return;
        }
        let cooldown = Micros(2 * Micros::PER_HOUR);
        let mut best: Option<(f64, usize)> = None;
        for (k, m) in group.members.iter().enumerate() {
            let i = m.job.id.0 as usize;
            if self.states[i].as_ref().and_then(|s| s.last_move).is_some_and(|t| self.now.saturating_sub(t) < cooldown)
            {
                continue;
            }
            let rest: Vec<_> = group
                .members
                .iter()
                .enumerate()
                .filter(|(x, _)| *x != k)
                .map(|(_, o)| o.job.timing_member(o.block, group.train_width(), self.resident))
                .collect();
            let p = weave_place::group::predict(&rest);
            let worst = group
                .members
                .iter()
                .filter(|o| o.job.id != m.job.id)
                .zip(&p.coexec)
                .map(|(o, c)| c.0 as f64 / (o.job.slo * o.job.solo().0 as f64))
                .fold(0.0, f64::max);
            if best.is_none_or(|(b, _)| worst < b) {
                best = Some((worst, i));
            }
        }
        if let Some((_, i)) = best {
            self.migrate(i);
        }
    }

    pub(super) fn migrate(&mut self, i: usize) {
        self.unplace(i);
        let s = self.states[i].as_mut().expect("known job");
        s.last_move = Some(self.now);
        self.metrics.events.migrations += 1;
        self.admit_or_wait(i);
    }

    /// The periodic policy: repair violating groups, then re-pack everything if a fresh
    /// packing saves more over the horizon than moving costs.
    pub(super) fn periodic_regroup(&mut self) {
        let Regroup::Periodic { horizon, .. } = self.cfg.regroup else { return };
        let groups: Vec<GroupId> = self.placer.groups().map(|g| g.id).collect();
        for g in groups {
            self.repair(g);
        }
        let running: Vec<usize> =
            (0..self.jobs.len()).filter(|&i| self.states[i].as_ref().is_some_and(|s| s.placed.is_some())).collect();
        if running.len() < 2 {
            return;
        }
        let mut scratch = Placer::new(self.placer.config().clone());
        for &i in &running {
            let mut p = self.jobs[i].place.clone();
            p.times = self.estimate(i);
            if scratch.admit(p).is_err() {
                return;
            }
        }
        let saving = (self.placer.hourly_cost() - scratch.hourly_cost()).as_dollars();
        if saving <= 0.0 {
            return;
        }
        // Moving a job costs a cold start on its nodes plus, on average, half an iteration.
        let hour = |t: Micros| t.as_hours_f64();
        let (pr, pt) =
            (self.placer.config().rollout_node_price.as_dollars(), self.placer.config().train_node_price.as_dollars());
        let cost: f64 = running
            .iter()
            .map(|&i| {
                let j = &self.jobs[i];
                let t = j.cold_start + Micros(j.disagg.solo().0 / 2);
                hour(t) * (pr * j.spec.rollout_nodes as f64 + pt * j.spec.train_nodes as f64)
            })
            .sum();
        if saving * hour(horizon) <= cost {
            return;
        }
        for &i in &running {
            self.unplace(i);
        }
        for &i in &running {
            let s = self.states[i].as_mut().expect("known job");
            s.last_move = Some(self.now);
            self.metrics.events.migrations += 1;
            self.admit_or_wait(i);
        }
        self.metrics.events.repacks += 1;
    }
}
