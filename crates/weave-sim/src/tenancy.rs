//! What sharing an owned cluster did for each tenant: quota in use over time against the
//! entitlement, queueing delay, preemptions and the work they cost.

use serde::{Deserialize, Serialize};
use weave_core::Micros;
use weave_place::share::{Nodes, SharePolicy};

/// A tenant counts as served while it has waiting work if its dominant share (the largest
/// fraction of its entitlement it uses in either pool) is at least this.
pub const SERVED_SHARE: f64 = 0.95;

/// Per-tenant accumulators, advanced at every change of quota in use. A tenant is counted
/// under-served while one of its waiting jobs would fit within its remaining entitlement and
/// its dominant share is below [`SERVED_SHARE`] (a job too large for what is left of the
/// entitlement waits for the tenant's own jobs, not for others).
#[derive(Clone, Debug, Default)]
pub struct TenantLedger {
    /// Node-seconds used per pool (shares of shared nodes).
    used: [f64; 2],
    /// Since when it has had waiting work while under its entitlement.
    below_since: Option<Micros>,
    longest_below: Micros,
    total_below: Micros,
    pub delays: Vec<Micros>,
    pub preemptions: u64,
    pub lost_iterations: u64,
    pub jobs: u64,
    /// The shortest time a preempted job had run since its admission.
    pub shortest_preempted_run: Option<Micros>,
    /// The most nodes (either pool) it ever held beyond nominal plus its borrowing limit.
    over_limit: f64,
    /// Mean nodes in use per pool, hour by hour of the replay.
    hourly: Vec<[f64; 2]>,
}

/// All tenants' ledgers and the last time they were advanced.
#[derive(Clone, Debug, Default)]
pub struct Ledgers {
    pub tenants: Vec<TenantLedger>,
    last: Micros,
    usage: Vec<Nodes>,
    /// Per tenant: a waiting job would fit within its remaining entitlement.
    entitled_waiting: Vec<bool>,
}

impl Ledgers {
    pub fn new(n: usize) -> Self {
        Ledgers {
            tenants: vec![TenantLedger::default(); n],
            last: Micros::ZERO,
            usage: vec![[0.0; 2]; n],
            entitled_waiting: vec![false; n],
        }
    }

    /// Accounts the time since the last change at the old usage, then takes the new state.
    pub fn advance(&mut self, now: Micros, usage: Vec<Nodes>, entitled_waiting: Vec<bool>, policy: &SharePolicy) {
        self.accrue_hourly(now);
        let dt = now.saturating_sub(self.last).as_secs_f64();
        for (t, l) in self.tenants.iter_mut().enumerate() {
            l.used[0] += self.usage[t][0] * dt;
            l.used[1] += self.usage[t][1] * dt;
        }
        self.last = now;
        self.usage = usage;
        self.entitled_waiting = entitled_waiting;
        for (t, l) in self.tenants.iter_mut().enumerate() {
            let q = &policy.tenants[t];
            if let Some(limit) = q.borrow_limit {
                let over = (0..2).map(|p| self.usage[t][p] - q.nominal()[p] - limit).fold(0.0, f64::max);
                l.over_limit = l.over_limit.max(over);
            }
            let under = policy.dominant_share(t, &self.usage) < SERVED_SHARE - 1e-9;
            match (self.entitled_waiting[t] && under, l.below_since) {
                (true, None) => l.below_since = Some(now),
                (false, Some(since)) => {
                    let d = now.saturating_sub(since);
                    l.longest_below = l.longest_below.max(d);
                    l.total_below += d;
                    l.below_since = None;
                }
                _ => {}
            }
        }
    }

    /// Adds the usage since the last change to each hour it spans.
    fn accrue_hourly(&mut self, now: Micros) {
        let hour_us = Micros::PER_HOUR;
        let mut t = self.last.0;
        while t < now.0 {
            let hour = t / hour_us;
            let seg_end = ((hour + 1) * hour_us).min(now.0);
            let share_of_hour = (seg_end - t) as f64 / hour_us as f64;
            for (k, l) in self.tenants.iter_mut().enumerate() {
                if l.hourly.len() <= hour as usize {
                    l.hourly.resize(hour as usize + 1, [0.0; 2]);
                }
                for p in 0..2 {
                    l.hourly[hour as usize][p] += self.usage[k][p] * share_of_hour;
                }
            }
            t = seg_end;
        }
    }

    pub fn report(&self, policy: &SharePolicy, end: Micros) -> Vec<TenantReport> {
        let span = end.as_secs_f64().max(1e-9);
        self.tenants
            .iter()
            .enumerate()
            .map(|(t, l)| {
                let nominal = policy.tenants[t].nominal();
                let mean = [l.used[0] / span, l.used[1] / span];
                let of = |p: usize| if nominal[p] > 0.0 { mean[p] / nominal[p] } else { 0.0 };
                let mut d: Vec<f64> = l.delays.iter().map(|x| x.as_secs_f64() / 3600.0).collect();
                d.sort_by(f64::total_cmp);
                let q = |x: f64| d.get(((d.len().max(1) - 1) as f64 * x).round() as usize).copied().unwrap_or(0.0);
                let open = l.below_since.map_or(Micros::ZERO, |s| end.saturating_sub(s));
                TenantReport {
                    name: policy.tenants[t].name.clone(),
                    jobs: l.jobs,
                    entitlement: nominal,
                    mean_use: mean,
                    use_of_entitlement: [of(0), of(1)],
                    delay_mean_h: if d.is_empty() { 0.0 } else { d.iter().sum::<f64>() / d.len() as f64 },
                    delay_p50_h: q(0.5),
                    delay_p99_h: q(0.99),
                    delay_max_h: d.last().copied().unwrap_or(0.0),
                    preemptions: l.preemptions,
                    lost_iterations: l.lost_iterations,
                    longest_below_entitlement_h: l.longest_below.max(open).as_secs_f64() / 3600.0,
                    shortest_preempted_run_h: l.shortest_preempted_run.map(|r| r.as_secs_f64() / 3600.0),
                    max_over_borrow_limit: l.over_limit,
                    time_below_entitlement_h: (l.total_below + open).as_secs_f64() / 3600.0,
                    hourly_use: l.hourly.clone(),
                }
            })
            .collect()
    }
}

/// EASY backfill's promise, checked in the run: a job started past blocked ones must leave
/// each of their projected starts where it was. Counted per blocked job at its next start
/// against the projection made at the last backfill past it; a later start means something
/// pushed it back after the projection (a backfilled job running longer than its bound, or a
/// job ranked ahead of it arriving or resuming), so `late` bounds backfill's harm from above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackfillReport {
    /// Jobs started by backfill.
    pub backfilled: u64,
    /// Blocked jobs a backfill went past that started later.
    pub jumped: u64,
    /// Of those, the ones that started after their projected start, and after it by over an
    /// hour; the most any was late, hours.
    pub late: u64,
    pub late_over_1h: u64,
    pub max_late_h: f64,
}

impl BackfillReport {
    /// A blocked job a backfill went past starts now; `promised` is its projected start then.
    pub fn started(&mut self, now: Micros, promised: Micros) {
        self.jumped += 1;
        if now > promised {
            let late_h = (now - promised).as_secs_f64() / 3600.0;
            self.late += 1;
            self.late_over_1h += u64::from(late_h > 1.0);
            self.max_late_h = self.max_late_h.max(late_h);
        }
    }
}

/// One tenant's outcome (`weave experiment tenants`, `--json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TenantReport {
    pub name: String,
    pub jobs: u64,
    /// Nominal quota, nodes per pool (rollout, training).
    pub entitlement: [f64; 2],
    /// Mean nodes in use per pool over the replay, and as a share of the entitlement.
    pub mean_use: [f64; 2],
    pub use_of_entitlement: [f64; 2],
    pub delay_mean_h: f64,
    pub delay_p50_h: f64,
    pub delay_p99_h: f64,
    pub delay_max_h: f64,
    pub preemptions: u64,
    pub lost_iterations: u64,
    /// The longest stretch, and the total time, the tenant had a waiting job that fits within
    /// its remaining entitlement while its dominant share was below 95% of it.
    pub longest_below_entitlement_h: f64,
    pub time_below_entitlement_h: f64,
    /// The shortest run since admission among its preempted jobs (never below the minimum).
    pub shortest_preempted_run_h: Option<f64>,
    /// The most nodes it held beyond nominal plus its borrowing limit, if it has one (shared
    /// nodes are charged as shares, so a partner's departure can raise what a job is charged).
    pub max_over_borrow_limit: f64,
    /// Mean nodes in use per pool (rollout, training), hour by hour.
    #[serde(default)]
    pub hourly_use: Vec<[f64; 2]>,
}

/// Jain's fairness index over the tenants' training use as a share of entitlement (1: equal).
pub fn jain_index(tenants: &[TenantReport]) -> Option<f64> {
    let x: Vec<f64> = tenants.iter().map(|t| t.use_of_entitlement[1]).collect();
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weave_place::share::{ShareMode, TenantQuota};

    #[test]
    fn a_blocked_job_is_late_only_after_its_projected_start() {
        let mut b = BackfillReport::default();
        let h = |x: f64| Micros::from_secs_f64(x * 3600.0);
        b.started(h(2.0), h(3.0));
        b.started(h(3.0), h(3.0));
        b.started(h(3.5), h(3.0));
        b.started(h(6.0), h(3.0));
        assert_eq!((b.jumped, b.late, b.late_over_1h), (4, 2, 1));
        assert!((b.max_late_h - 3.0).abs() < 1e-9);
    }

    #[test]
    fn hourly_use_splits_usage_at_hour_boundaries() {
        let quota = TenantQuota {
            name: "a".into(),
            rollout_nodes: 4.0,
            training_nodes: 4.0,
            borrow_limit: None,
            env_cores: None,
        };
        let policy = SharePolicy {
            mode: ShareMode::Quotas,
            tenants: vec![quota],
            min_run: Micros::ZERO,
            checkpoint_every: 1,
            half_life: None,
            preempts_own: weave_core::Priority::High,
            grace: Micros::ZERO,
        };
        let mut l = Ledgers::new(1);
        let h = |x: f64| Micros::from_secs_f64(x * 3600.0);
        // 2 training nodes from 0.5 h, 4 from 1.75 h, none from 2.5 h.
        l.advance(h(0.5), vec![[0.0, 2.0]], vec![false], &policy);
        l.advance(h(1.75), vec![[1.0, 4.0]], vec![false], &policy);
        l.advance(h(2.5), vec![[0.0, 0.0]], vec![false], &policy);
        let r = &l.report(&policy, h(2.5))[0];
        let training: Vec<f64> = r.hourly_use.iter().map(|u| u[1]).collect();
        assert_eq!(training, [1.0, 0.75 * 2.0 + 0.25 * 4.0, 0.5 * 4.0]);
        // The hours add up to the node-hours behind the mean.
        let node_hours: f64 = training.iter().sum();
        assert!((node_hours - r.mean_use[1] * 2.5).abs() < 1e-9);
    }
}
