//! What a preemptible rollout node costs in time: the delay a preemption adds to a rollout,
//! moving its in-flight requests or restarting them, and the bound admission puts on a job's
//! life under a preemption rate.
//!
//! A rollout is modelled as work spread evenly over its block's nodes (`nodes` x its plain
//! duration, in node-time). A preempted node is missing from the moment it is taken until the
//! replacement asked for at its notice arrives (`gap`); meanwhile the block works with one node
//! fewer. What the taken node had in flight is either moved to the other nodes (its prompts and
//! generated tokens re-prefilled there: `resume`) or started over (the node's elapsed work is
//! lost and done again).

use weave_core::{Micros, SpotConfig};

/// How a preempted node's in-flight rollout requests are recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Whichever of moving and restarting the model says is cheaper (Weave).
    Cheaper,
    /// Always started over (a framework without request migration).
    Restart,
}

/// Which way one preemption was recovered, and the delay it added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub delay: Micros,
    pub moved: bool,
}

/// A spot tier's timing: its preemption rate, notice, replacement and resume times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpotModel {
    pub rate_per_node_hour: f64,
    pub notice: Micros,
    pub replacement: Micros,
    pub resume: Micros,
}

impl SpotModel {
    pub fn from_config(c: &SpotConfig) -> SpotModel {
        SpotModel {
            rate_per_node_hour: c.preemptions_per_node_hour,
            notice: Micros::from_secs(c.notice_s),
            replacement: Micros::from_secs(c.replacement_s),
            resume: Micros::from_secs(c.resume_s),
        }
    }

    /// How long a preempted node is missing: its replacement is asked for at the notice.
    pub fn gap(&self) -> Micros {
        self.replacement.saturating_sub(self.notice)
    }

    /// The delay a preemption at `elapsed` into a rollout with `remaining` plain time left on
    /// `nodes` nodes adds to it, recovered as `how` says.
    pub fn recover(&self, how: Recovery, elapsed: Micros, remaining: Micros, nodes: u32) -> Recovered {
        let gap = self.gap();
        let restart = delay_with_extra_work(remaining, nodes, gap, elapsed);
        let moved = short_delay(remaining, nodes, gap) + self.resume;
        match how {
            Recovery::Cheaper if moved < restart => Recovered { delay: moved, moved: true },
            _ => Recovered { delay: restart, moved: false },
        }
    }

    /// A bound on one preemption's cost to a job's life: the rollout it hits (moved, which
    /// [`Recovery::Cheaper`] never exceeds) and one rollout that starts while the node is
    /// still missing.
    pub fn per_preemption_bound(&self, rollout: Micros, nodes: u32) -> Micros {
        let short = short_delay(rollout, nodes, self.gap());
        short + short + self.resume
    }

    /// An upper bound on the share a job's life grows by from preemptions, at confidence
    /// `1 - epsilon`: its `nodes` held for `life` (the whole life, training included: a node
    /// taken meanwhile is still missing at the next rollout) are preempted a Poisson number of
    /// times; each costs at most [`SpotModel::per_preemption_bound`]. Relative to `solo_life`.
    pub fn life_overhead(&self, rollout: Micros, nodes: u32, life: Micros, solo_life: Micros, epsilon: f64) -> f64 {
        let mean = self.rate_per_node_hour * nodes as f64 * life.as_hours_f64();
        let count = poisson_quantile(mean, 1.0 - epsilon);
        count as f64 * self.per_preemption_bound(rollout, nodes).0 as f64 / solo_life.0.max(1) as f64
    }
}

/// The delay to a rollout with `remaining` plain time left on `nodes` nodes while one of them
/// is missing for `gap`.
pub fn short_delay(remaining: Micros, nodes: u32, gap: Micros) -> Micros {
    delay_with_extra_work(remaining, nodes, gap, Micros::ZERO)
}

/// The delay to a rollout with `remaining` plain time left on `nodes` nodes, `extra` node-time
/// of work added (lost and redone), one node missing for `gap`.
fn delay_with_extra_work(remaining: Micros, nodes: u32, gap: Micros, extra: Micros) -> Micros {
    let n = nodes.max(1) as u128;
    let work = n * remaining.0 as u128 + extra.0 as u128;
    let gap = gap.0 as u128;
    let finish = if n == 1 {
        gap + work
    } else if work <= (n - 1) * gap {
        work.div_ceil(n - 1)
    } else {
        gap + (work - (n - 1) * gap).div_ceil(n)
    };
    Micros(u64::try_from(finish).unwrap_or(u64::MAX)).saturating_sub(remaining)
}

/// The smallest `k` with `P(Poisson(mean) <= k) >= p`.
pub fn poisson_quantile(mean: f64, p: f64) -> u64 {
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    let (mut k, mut term) = (0u64, (-mean).exp());
    let mut cdf = term;
    // Far tails: the normal approximation's bound keeps the loop short for large means.
    let limit = (mean + 10.0 * mean.sqrt() + 20.0).ceil() as u64;
    while cdf < p && k < limit {
        k += 1;
        term *= mean / k as f64;
        cdf += term;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(gap_s: u64, resume_s: u64) -> SpotModel {
        SpotModel {
            rate_per_node_hour: 0.125,
            notice: Micros::from_secs(120),
            replacement: Micros::from_secs(120 + gap_s),
            resume: Micros::from_secs(resume_s),
        }
    }

    #[test]
    fn a_missing_node_delays_by_its_share_of_the_gap_or_of_the_rest() {
        let s = Micros::from_secs;
        // 4 nodes, 600 s left, a node missing 120 s: 3 nodes do 360 node-s, the rest at 4.
        assert_eq!(short_delay(s(600), 4, s(120)), s(30));
        // The gap outlasts the rollout: the rest on 3 nodes.
        assert_eq!(short_delay(s(60), 4, s(600)), s(20));
        // Alone on the node: the rollout waits for the replacement.
        assert_eq!(short_delay(s(60), 1, s(180)), s(180));
        assert_eq!(short_delay(s(60), 4, Micros::ZERO), Micros::ZERO);
    }

    #[test]
    fn restarting_loses_the_elapsed_work_and_moving_costs_the_resume() {
        let s = Micros::from_secs;
        let m = model(0, 20);
        // Early in the rollout little is lost: restart is cheaper than the 20 s resume.
        let early = m.recover(Recovery::Cheaper, s(8), s(600), 4);
        assert_eq!(early, Recovered { delay: s(2), moved: false });
        let late = m.recover(Recovery::Cheaper, s(400), s(200), 4);
        assert_eq!(late, Recovered { delay: s(20), moved: true });
        assert_eq!(m.recover(Recovery::Restart, s(400), s(200), 4), Recovered { delay: s(100), moved: false });
        // Alone on the node with a gap: the replacement is awaited either way.
        let alone = model(180, 20).recover(Recovery::Restart, s(100), s(50), 1);
        assert_eq!(alone.delay, s(280));
    }

    #[test]
    fn the_poisson_quantile_and_the_life_bound_grow_with_the_rate() {
        assert_eq!(poisson_quantile(0.0, 0.99), 0);
        assert_eq!(poisson_quantile(1.0, 0.5), 1);
        assert_eq!(poisson_quantile(1.0, 0.99), 4);
        assert_eq!(poisson_quantile(100.0, 0.99), 124);
        let m = model(180, 20);
        let h = Micros(Micros::PER_HOUR);
        let low = m.life_overhead(Micros::from_secs(600), 2, h.scale(10.0), h.scale(8.0), 0.01);
        let high = SpotModel { rate_per_node_hour: 1.0, ..m }.life_overhead(
            Micros::from_secs(600),
            2,
            h.scale(10.0),
            h.scale(8.0),
            0.01,
        );
        assert!(0.0 < low && low < high, "{low} {high}");
    }
}
