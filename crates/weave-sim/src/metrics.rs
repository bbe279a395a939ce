//! What a replay measures, and the report it produces.

use serde::{Deserialize, Serialize};
use weave_core::{ClusterConfig, Micros, Money, Pool};
use weave_place::DecisionKind;

mod report;
pub use report::*;

/// Per-pool GPU-time in GPU-microseconds (integers, priced once at the end).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PoolTime {
    pub held: u128,
    pub busy: u128,
    pub switching: u128,
    /// Rollout GPUs waiting for their job's weight sync (blocks nobody else uses).
    pub sync: u128,
    /// Held by groups with a single member (disaggregated: the other pool idles meanwhile).
    pub lone_held: u128,
    /// Busy, switching or syncing inside such groups.
    pub lone_active: u128,
}

/// Accumulates a replay as it runs.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pools: [PoolTime; 2],
    held_nodes: [u32; 2],
    peak_nodes: [u32; 2],
    last_change: Micros,
    lone_nodes: [u32; 2],
    lone_change: Micros,
    pub end: Micros,
    pub admissions: [u64; 4],
    pub rejected: u64,
    /// LoRA jobs that joined a running pack (`None`: packs do not grow in this replay).
    pub pack_joins: Option<u64>,
    pub jobs: Vec<JobOutcome>,
    pub queue_delays: Vec<Micros>,
    pub events: DynamicsCounts,
    /// (time, rollout GPUs held, training GPUs held) at every change.
    series: Vec<(Micros, u32, u32)>,
    /// Per tenant, when tenants share fixed pools.
    pub tenants: Vec<crate::tenancy::TenantReport>,
    /// Backfill's promise checked in the run, when the policy backfills.
    pub backfill: Option<crate::tenancy::BackfillReport>,
    /// Training GPU-hours charged busy for work preemptions threw away (tenants sharing).
    pub preempted_training_gpu_hours: Option<f64>,
    /// Spot rollout nodes: held now, since when, and the GPU-time they were held in all.
    spot_nodes: u32,
    spot_change: Micros,
    spot_held: u128,
    /// What the spot tier's preemptions did, when the cluster has one.
    pub spot: Option<SpotCounts>,
    /// What lending idle rollout blocks across groups did, when on.
    pub lending: Option<LendingCounts>,
    /// Sandbox core-hours agentic jobs held (`None`: no agentic job).
    pub environment_core_hours: Option<f64>,
}

/// What lending idle rollout blocks across groups did in one replay.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LendingCounts {
    /// Rollouts that borrowed another group's idle block.
    pub loans: u64,
    /// Loans taken back before their reclaim because the lender's group changed.
    pub reclaimed_early: u64,
    /// Lender rollouts that were due while their block was still lent (never expected: the
    /// window ends before the lender's earliest next rollout).
    pub lender_delays: u64,
    /// Rollout time the loans saved their borrowers, summed over rollouts.
    pub saved_us: u64,
    /// Lent GPU-time: loading (the lender asleep, the borrower's engine coming up), and used.
    pub loading_gpu_us: u128,
    pub lent_gpu_us: u128,
}

/// What spot preemptions did in one replay.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SpotCounts {
    /// Jobs whose first admission put their rollout nodes on spot.
    pub spot_jobs: u64,
    /// Spot nodes taken, and of those: the in-flight rollout's requests moved to other nodes,
    /// restarted, or no rollout in flight on the node.
    pub preemptions: u64,
    pub moved: u64,
    pub restarted: u64,
    pub idle: u64,
    /// Rollouts that started while a node of their block was missing.
    pub shortages: u64,
    /// Trace entries naming a node no spot group held at the time.
    pub unheld: u64,
    /// Rollout time added by preemptions, summed over rollouts, and the rollout GPU-time held
    /// meanwhile (lost to preemption).
    pub delay_us: u64,
    pub lost_gpu_us: u128,
}

impl SpotCounts {
    pub fn delay(&mut self, d: Micros, gpus: u32) {
        self.delay_us += d.0;
        self.lost_gpu_us += d.0 as u128 * gpus as u128;
    }
}

/// What happened to jobs while they ran: re-grouping, failures, long-tail migration. Counted
/// by the replay and reported as they are.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DynamicsCounts {
    /// Jobs moved to another group (re-grouping).
    pub migrations: u64,
    pub repacks: u64,
    pub restarts: u64,
    pub node_failures: u64,
    /// Iterations redone because a failure lost them (since the last checkpoint).
    pub lost_iterations: u64,
    pub failed_permanently: u64,
    /// Rollouts that handed their nodes on early (long-tail migration).
    #[serde(default)]
    pub long_tail_migrations: u64,
    /// Jobs moved by consolidation (a job that ran alone moved into a group, or a lone
    /// member moved out), and what those moves were estimated to cost in total (micro-dollars:
    /// checkpoint, cold start, the lost partial iteration; the replay charges the real cost).
    #[serde(default)]
    pub consolidation_moves: u64,
    #[serde(default)]
    pub consolidation_cost_estimate: Money,
    /// Jobs taken off their nodes for another tenant's or a higher priority's job.
    #[serde(default)]
    pub preemptions: u64,
    /// Of those, victims that saved a checkpoint at their iteration's end within their grace
    /// period (graceful preemption: they lost no iterations).
    #[serde(default)]
    pub preemptions_saved: u64,
}

/// One job's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobOutcome {
    pub name: String,
    pub slo: f64,
    pub iterations: u64,
    pub slowdown: f64,
    pub iterations_within_slo: u64,
    pub queued: Micros,
    /// The job's own predicted slowdown at its last admission (0 when not predicted, as for
    /// the baselines that never share).
    #[serde(default)]
    pub predicted_slowdown: f64,
    /// How many times the job was placed (1 = never moved or restarted).
    #[serde(default)]
    pub placements: u32,
    /// Times it was preempted (tenants sharing fixed pools): to reclaim capacity its tenant
    /// borrowed, and for a higher-priority job of its own tenant.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reclaimed: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outranked: u32,
    /// A `high` job still waiting past its bound ([`crate::SimJob::high_wait_bound`]) after a
    /// queue pass, when what its victims would free was enough to start it: capacity it may
    /// take existed, and the queue passed it over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passed_over: bool,
    /// Bounded staleness it declared, as the policy ran it (the synchronous baselines run every
    /// job on-policy; co-located members run on-policy too: `versions_behind` tells).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub staleness: u32,
    /// Its effective staleness: the mean over its rollouts of how many weight versions each
    /// lagged the iteration it produced (at most `staleness`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions_behind: Option<f64>,
}

impl JobOutcome {
    /// The outcome of an on-policy job placed once and never preempted (the co-located
    /// baseline's jobs, a pack's members).
    pub fn placed_once(
        name: String,
        slo: f64,
        (iterations, within_slo): (u64, u64),
        slowdown: f64,
        queued: Micros,
        predicted_slowdown: f64,
    ) -> JobOutcome {
        JobOutcome {
            name,
            slo,
            iterations,
            slowdown,
            iterations_within_slo: within_slo,
            queued,
            predicted_slowdown,
            placements: 1,
            reclaimed: 0,
            outranked: 0,
            passed_over: false,
            staleness: 0,
            versions_behind: None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// GPU-time per pool that `nodes` held from `since` to `now`.
fn gpu_micros_since(since: Micros, now: Micros, nodes: [u32; 2], gpus_per_node: (u32, u32)) -> [u128; 2] {
    let dt = now.saturating_sub(since).0 as u128;
    [dt * nodes[0] as u128 * gpus_per_node.0 as u128, dt * nodes[1] as u128 * gpus_per_node.1 as u128]
}

fn pool_index(pool: Pool) -> usize {
    (pool == Pool::Training) as usize
}

impl Metrics {
    /// The number of nodes held changed at `now`.
    pub fn nodes(&mut self, now: Micros, held: (u32, u32), gpus_per_node: (u32, u32)) {
        let add = gpu_micros_since(self.last_change, now, self.held_nodes, gpus_per_node);
        self.pools[0].held += add[0];
        self.pools[1].held += add[1];
        self.held_nodes = [held.0, held.1];
        self.peak_nodes[0] = self.peak_nodes[0].max(held.0);
        self.peak_nodes[1] = self.peak_nodes[1].max(held.1);
        self.last_change = now;
        let point = (now, held.0 * gpus_per_node.0, held.1 * gpus_per_node.1);
        match self.series.last_mut() {
            Some(last) if last.0 == now => *last = point,
            Some(last) if (last.1, last.2) == (point.1, point.2) => {}
            _ => self.series.push(point),
        }
    }

    /// The GPU series with at most `max` points: per time bucket, the most GPUs held (so
    /// peaks survive downsampling).
    fn downsampled(&self, max: usize) -> Vec<SeriesPoint> {
        let to_point = |&(t, r, tr): &(Micros, u32, u32)| SeriesPoint {
            hours: t.as_hours_f64(),
            rollout_gpus: r,
            training_gpus: tr,
        };
        if self.series.len() <= max || self.end.0 == 0 {
            return self.series.iter().map(to_point).collect();
        }
        let width = (self.end.0 / max as u64).max(1);
        let mut out: Vec<(Micros, u32, u32)> = Vec::new();
        for &(t, r, tr) in &self.series {
            let bucket = Micros(t.0 / width * width);
            match out.last_mut() {
                Some(last) if last.0 == bucket => {
                    last.1 = last.1.max(r);
                    last.2 = last.2.max(tr);
                }
                _ => out.push((bucket, r, tr)),
            }
        }
        out.iter().map(to_point).collect()
    }

    /// The nodes held by single-member groups changed at `now`.
    pub fn lone_nodes(&mut self, now: Micros, lone: (u32, u32), gpus_per_node: (u32, u32)) {
        let add = gpu_micros_since(self.lone_change, now, self.lone_nodes, gpus_per_node);
        self.pools[0].lone_held += add[0];
        self.pools[1].lone_held += add[1];
        self.lone_nodes = [lone.0, lone.1];
        self.lone_change = now;
    }

    /// The spot rollout nodes held changed at `now`.
    pub fn spot_nodes(&mut self, now: Micros, nodes: u32, gpus_per_node: u32) {
        self.spot_held +=
            now.saturating_sub(self.spot_change).0 as u128 * self.spot_nodes as u128 * gpus_per_node as u128;
        self.spot_nodes = nodes;
        self.spot_change = now;
    }

    /// GPU-time a single-member group used (busy, switching or syncing).
    pub fn lone_active(&mut self, pool: Pool, gpus: u32, t: Micros) {
        self.pools[pool_index(pool)].lone_active += gpus as u128 * t.0 as u128;
    }

    pub fn sync(&mut self, pool: Pool, gpus: u32, t: Micros) {
        self.pools[pool_index(pool)].sync += gpus as u128 * t.0 as u128;
    }

    pub fn busy(&mut self, pool: Pool, gpus: u32, t: Micros) {
        self.pools[pool_index(pool)].busy += gpus as u128 * t.0 as u128;
    }

    pub fn switching(&mut self, pool: Pool, gpus: u32, t: Micros) {
        self.pools[pool_index(pool)].switching += gpus as u128 * t.0 as u128;
    }

    /// Adds held GPU-time directly (baselines that hold nodes for known intervals).
    pub fn held(&mut self, pool: Pool, gpus: u32, t: Micros) {
        self.pools[pool_index(pool)].held += gpus as u128 * t.0 as u128;
    }

    pub fn set_peak(&mut self, pool: Pool, nodes: u32) {
        let i = pool_index(pool);
        self.peak_nodes[i] = self.peak_nodes[i].max(nodes);
    }

    pub fn admitted(&mut self, kind: DecisionKind) {
        self.admissions[kind as usize] += 1;
    }

    /// Where the money went: busy, switching, sync, idle alone and idle beside others, with
    /// what preemption delays and lending took carved out.
    fn money_split(&self, pricing: &Pricing, total: Money) -> MoneySplit {
        let cost = |i: usize, t: u128| pricing.cost(i, t);
        let gpu_hours = |t: u128| t as f64 / Micros::PER_HOUR as f64;
        let split = |i: usize| {
            let p = &self.pools[i];
            let idle = p.held.saturating_sub(p.busy + p.switching);
            let sync = p.sync.min(idle);
            let lone_idle = p.lone_held.saturating_sub(p.lone_active).min(idle - sync);
            [p.busy, p.switching, sync, lone_idle, idle - sync - lone_idle]
        };
        let (mut r, t) = (split(0), split(1));
        // Rollout GPU-time held while preemption delays rollouts: carved out of the idle time
        // (inside shared groups first, then a lone job's).
        let lost = self.spot.map(|s| s.lost_gpu_us.min(r[3] + r[4]));
        let from_other = lost.unwrap_or(0).min(r[4]);
        r[4] -= from_other;
        r[3] -= lost.unwrap_or(0) - from_other;
        // Lent GPU-time was charged busy (the GPUs worked): shown apart from the owners' work.
        let lent = self.lending.map(|l| l.lent_gpu_us.min(r[0]));
        r[0] -= lent.unwrap_or(0);
        let part = |k: usize| SplitPart {
            gpu_hours: gpu_hours(r[k] + t[k]),
            cost: cost(0, r[k]) + cost(1, t[k]),
            share: if total.0 > 0 { (cost(0, r[k]) + cost(1, t[k])).0 as f64 / total.0 as f64 } else { 0.0 },
        };
        let rollout_part = |g: u128| SplitPart {
            gpu_hours: gpu_hours(g),
            cost: cost(0, g),
            share: if total.0 > 0 { cost(0, g).0 as f64 / total.0 as f64 } else { 0.0 },
        };
        MoneySplit {
            busy: part(0),
            switching: part(1),
            sync: part(2),
            idle_alone: part(3),
            idle_other: part(4),
            lost_to_preemption: lost.map(rollout_part),
            lent: lent.map(rollout_part),
        }
    }

    pub fn report(&self, policy: &str, cluster: &ClusterConfig) -> PolicyReport {
        let gpus = [cluster.rollout.gpus_per_node, cluster.training.gpus_per_node];
        let pricing = Pricing::of(self, cluster);
        let cost = |i: usize, t: u128| pricing.cost(i, t);
        let spot_held = pricing.spot_held;
        let gpus_total = cost(0, self.pools[0].held) + cost(1, self.pools[1].held);
        let environment = self.environment_core_hours.map(|core_hours| {
            let price = cluster.env.as_ref().map_or(0.0, |e| e.price_per_vcpu_hour);
            EnvironmentReport { core_hours, cost: Money::from_dollars(core_hours * price), share: 0.0 }
        });
        let env_cost = environment.as_ref().map_or(Money::ZERO, |e| e.cost);
        let total = gpus_total + env_cost;
        let environment = environment.map(|e| EnvironmentReport {
            share: if total.0 > 0 { e.cost.0 as f64 / total.0 as f64 } else { 0.0 },
            ..e
        });
        let lower = cost(0, self.pools[0].busy) + cost(1, self.pools[1].busy) + env_cost;
        let gpu_hours = |t: u128| t as f64 / Micros::PER_HOUR as f64;
        let pool = |i: usize| PoolReport {
            gpu_hours: gpu_hours(self.pools[i].held),
            busy_gpu_hours: gpu_hours(self.pools[i].busy),
            switching_gpu_hours: gpu_hours(self.pools[i].switching),
            idle_gpu_hours: gpu_hours(self.pools[i].held.saturating_sub(self.pools[i].busy + self.pools[i].switching)),
            peak_gpus: self.peak_nodes[i] * gpus[i],
            cost: cost(i, self.pools[i].held),
        };
        let money = self.money_split(&pricing, total);
        let lending = self.lending.map(|counts| LendingReport {
            counts,
            lent_gpu_hours: gpu_hours(counts.lent_gpu_us),
            loading_gpu_hours: gpu_hours(counts.loading_gpu_us),
            saved_rollout_hours: Micros(counts.saved_us).as_hours_f64(),
        });
        let spot = self.spot.zip(pricing.spot_price).map(|(counts, sp)| SpotReport {
            counts,
            spot_gpu_hours: gpu_hours(spot_held),
            spot_cost: sp.cost_of_gpu_micros(spot_held),
            delay_hours: Micros(counts.delay_us).as_hours_f64(),
        });
        let iterations: u64 = self.jobs.iter().map(|j| j.iterations).sum();
        let within: u64 = self.jobs.iter().map(|j| j.iterations_within_slo).sum();
        let mut slowdowns: Vec<f64> = self.jobs.iter().map(|j| j.slowdown).collect();
        slowdowns.sort_by(f64::total_cmp);
        let hours = self.end.as_hours_f64();
        let dollars = total.as_dollars();
        let queued: Vec<f64> = self.queue_delays.iter().map(|d| d.as_hours_f64()).collect();
        PolicyReport {
            policy: policy.to_string(),
            jobs: self.jobs.len(),
            rejected: self.rejected,
            total_cost: total,
            cost_per_hour: if hours > 0.0 { dollars / hours } else { 0.0 },
            makespan_h: hours,
            rollout: pool(0),
            training: pool(1),
            money,
            iterations,
            iterations_per_k_dollars: if dollars > 0.0 { iterations as f64 / dollars * 1_000.0 } else { 0.0 },
            slowdown: Distribution::of(&slowdowns),
            slo_attainment_jobs: frac(
                self.jobs.iter().filter(|j| j.slowdown <= j.slo + 1e-9).count() as u64,
                self.jobs.len() as u64,
            ),
            slo_attainment_iterations: frac(within, iterations),
            admissions: Admissions {
                direct: self.admissions[0],
                scaling: self.admissions[1],
                isolated: self.admissions[2],
                colocated: self.admissions[3],
            },
            lower_bound_cost: lower,
            queued_jobs: queued.iter().filter(|d| **d > 0.0).count(),
            mean_queue_delay_h: if queued.is_empty() { 0.0 } else { queued.iter().sum::<f64>() / queued.len() as f64 },
            max_queue_delay_h: queued.iter().copied().fold(0.0, f64::max),
            vs_solo_disagg: None,
            vs_colocated: None,
            vs_solo_async: None,
            staleness: StalenessReport::of(&self.jobs),
            events: self.events,
            gpu_series: self.downsampled(1_000),
            per_job: self.jobs.clone(),
            tenants: self.tenants.clone(),
            backfill: self.backfill,
            preempted_training_gpu_hours: self.preempted_training_gpu_hours,
            spot,
            lending,
            environment,
            lora_pack_joins: self.pack_joins,
        }
    }
}

fn frac(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

/// GPU-time priced: with a spot tier, rollout GPU-time at the held mix of the two tiers.
struct Pricing {
    prices: [weave_core::Price; 2],
    spot_price: Option<weave_core::Price>,
    held: u128,
    spot_held: u128,
}

impl Pricing {
    fn of(m: &Metrics, cluster: &ClusterConfig) -> Pricing {
        let held = m.pools[0].held;
        Pricing {
            prices: [cluster.rollout.price(), cluster.training.price()],
            spot_price: cluster.rollout_spot.as_ref().filter(|_| m.spot.is_some()).map(|s| s.price()),
            held,
            spot_held: m.spot_held.min(held),
        }
    }

    /// `t` GPU-microseconds of pool `i` (0 rollout, 1 training).
    fn cost(&self, i: usize, t: u128) -> Money {
        match self.spot_price {
            Some(sp) if i == 0 && self.held > 0 => {
                self.prices[0].cost_of_gpu_micros(t * (self.held - self.spot_held) / self.held)
                    + sp.cost_of_gpu_micros(t * self.spot_held / self.held)
            }
            _ => self.prices[i].cost_of_gpu_micros(t),
        }
    }
}
