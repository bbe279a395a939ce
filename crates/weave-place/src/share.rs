//! Sharing an owned cluster between teams: nominal quotas per pool, borrowing of other
//! tenants' unused quota, priority classes, the queue's order and preemption victims. One core
//! for the simulator and the server; pure (the caller says what runs, what waits and when).
//!
//! Quota is charged for the nodes a job's placement holds, shared nodes split among their
//! members (a training pool shared by three jobs charges each a third), so co-execution makes
//! a quota go further: three jobs in one group cost their tenants what one job alone would.

use crate::placer::Placer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weave_core::{GroupId, JobId, Micros, Priority};

/// Nodes per pool: `[rollout, training]`.
pub type Nodes = [f64; 2];

/// Rounding slack when comparing node shares.
const EPS: f64 = 1e-9;

/// One team's entitlement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantQuota {
    pub name: String,
    /// Nominal quota: nodes of each pool the tenant is entitled to at any time.
    pub rollout_nodes: f64,
    pub training_nodes: f64,
    /// Nodes per pool it may borrow beyond nominal from others' unused quota (absent:
    /// as many as are unused).
    #[serde(default)]
    pub borrow_limit: Option<f64>,
    /// Environment cores its agentic jobs' sandboxes may hold at once: a cap, neither lent
    /// nor borrowed (absent: only the pool limits them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_cores: Option<f64>,
}

impl TenantQuota {
    pub fn nominal(&self) -> Nodes {
        [self.rollout_nodes, self.training_nodes]
    }
}

/// How much of the sharing machinery is on; each mode includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShareMode {
    /// One queue in arrival order; a job that does not fit blocks the ones behind it.
    Fifo,
    /// Quotas with borrowing; the queue by priority, then dominant share, then arrival.
    Quotas,
    /// And a waiting job may preempt borrowed capacity of other tenants and lower-priority
    /// jobs of its own tenant.
    Preemption,
    /// And later jobs may start ahead of a blocked head when they end before it could start
    /// (EASY backfill).
    Backfill,
}

impl ShareMode {
    pub const ALL: [ShareMode; 4] = [ShareMode::Fifo, ShareMode::Quotas, ShareMode::Preemption, ShareMode::Backfill];

    pub fn name(self) -> &'static str {
        match self {
            ShareMode::Fifo => "fifo",
            ShareMode::Quotas => "quotas",
            ShareMode::Preemption => "quotas+preemption",
            ShareMode::Backfill => "quotas+preemption+backfill",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharePolicy {
    pub mode: ShareMode,
    pub tenants: Vec<TenantQuota>,
    /// A job is never preempted before it has run this long since its (re)admission.
    pub min_run: Micros,
    /// Iterations between checkpoints: a preempted job resumes from its last one.
    pub checkpoint_every: u64,
    /// Fair share with decay: tenants are ordered by their recent use (node-time decayed
    /// with this half-life) over their entitlement instead of by what they use right now.
    /// `None`: by use right now.
    pub half_life: Option<Micros>,
    /// The lowest priority whose waiting jobs may preempt lower-priority jobs of their own
    /// tenant. `High` (the default): only urgent work takes an admitted job's place, and a
    /// `normal` job waits for a `low` one rather than break the SLO it was admitted with.
    /// `Normal`: any higher priority may (Kueue's `LowerPriority`).
    pub preempts_own: Priority,
    /// Graceful preemption: a victim gets this long to finish its in-flight iteration and save
    /// a checkpoint there before it gives its nodes up, so it loses no iterations (Kubernetes'
    /// termination grace period). Past it, it is stopped and loses its work since its last
    /// checkpoint. Zero: stopped at once.
    pub grace: Micros,
}

/// Tenants' recent use for fair share with decay: node-seconds per pool (and environment
/// core-seconds), each second's weight halving every half-life. Advanced to a time, then told
/// the use from then on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageHistory {
    decayed: Vec<Nodes>,
    usage: Vec<Nodes>,
    last: Micros,
    /// Environment cores, decayed the same way. Empty where no tenant has an `env_cores` cap,
    /// and then not written: a snapshot without them reads as none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    env_decayed: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    env_usage: Vec<f64>,
}

impl UsageHistory {
    /// Accounts the use since the last call up to `now` (the use told last held meanwhile).
    pub fn advance_to(&mut self, now: Micros, half_life: Micros) {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        if dt <= 0.0 {
            return;
        }
        let h = half_life.as_secs_f64().max(1.0);
        let keep = (-dt / h).exp2();
        // The integral of 2^(-s/h) over the elapsed time: what the constant use adds.
        let added = h / std::f64::consts::LN_2 * (1.0 - keep);
        self.decayed.resize(self.usage.len().max(self.decayed.len()), [0.0; 2]);
        for (t, d) in self.decayed.iter_mut().enumerate() {
            let u = self.usage.get(t).copied().unwrap_or([0.0; 2]);
            for p in 0..2 {
                d[p] = d[p] * keep + u[p] * added;
            }
        }
        if !self.env_usage.is_empty() || !self.env_decayed.is_empty() {
            self.env_decayed.resize(self.env_usage.len().max(self.env_decayed.len()), 0.0);
            for (t, d) in self.env_decayed.iter_mut().enumerate() {
                *d = *d * keep + self.env_usage.get(t).copied().unwrap_or(0.0) * added;
            }
        }
    }

    /// The use from now on: nodes held, and environment cores where tenants have caps.
    pub fn set_usage(&mut self, usage: &Usage) {
        self.usage = usage.held.clone();
        self.env_usage = usage.env.clone();
    }

    /// Each tenant's decayed dominant share: recent node-time (and environment core-time,
    /// against a cap) over what its entitlement would have accrued at the same decay (a tenant
    /// that always used exactly its quota scores 1).
    pub fn shares(&self, policy: &SharePolicy, half_life: Micros) -> Vec<f64> {
        let mean_life = half_life.as_secs_f64().max(1.0) / std::f64::consts::LN_2;
        let tenants = 0..policy.tenants.len();
        let held = tenants
            .clone()
            .map(|t| {
                let d = self.decayed.get(t).copied().unwrap_or([0.0; 2]);
                [d[0] / mean_life, d[1] / mean_life]
            })
            .collect();
        let env = self.env_decayed.iter().map(|d| d / mean_life).collect();
        let recent = Usage { held, alone: Vec::new(), env };
        tenants.map(|t| policy.dominant_share_with_env(t, &recent)).collect()
    }
}

/// A job waiting in the queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Waiting {
    pub tenant: usize,
    pub priority: Priority,
    /// Queue position by arrival (earlier first).
    pub arrival: u64,
    /// Nodes it needs per pool.
    pub demand: Nodes,
    /// Environment cores its sandboxes hold (0 for a job that is not agentic).
    pub env_cores: f64,
    /// It ran and was preempted: it was admitted, and the clock of its SLO runs while it waits.
    pub resumes: bool,
}

/// Which nodes a preemption may count on besides what its victims free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// For the first waiting job that finds no room: the free nodes too.
    Head,
    /// For a job behind a blocked head that it outranks: only what its victims free, so the
    /// head's start does not move for it.
    BehindHead,
}

/// A running job, as preemption sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Running {
    pub job: JobId,
    pub tenant: usize,
    pub priority: Priority,
    /// Since its current admission.
    pub ran: Micros,
    /// Iterations it would lose (done since its last checkpoint).
    pub unsaved: u64,
    /// Nodes it holds (its share).
    pub held: f64,
}

/// What each placed job is charged, two ways: its share of its rollout block and of its
/// group's training nodes (a co-located job: its training nodes), and what it would be charged
/// if every partner on its nodes left (its whole block and its group's training nodes).
pub fn charges(placer: &Placer) -> Vec<(JobId, Nodes, Nodes)> {
    let mut out = Vec::new();
    for g in placer.groups() {
        let train = g.training_nodes.len() as f64;
        let members = g.members.len().max(1) as f64;
        for m in &g.members {
            let on_block = g.members.iter().filter(|o| o.block == m.block).count().max(1) as f64;
            let block = if g.colocated { 0.0 } else { g.block(m.block).map_or(0.0, |b| b.nodes.len() as f64) };
            out.push((m.job.id, [block / on_block, train / members], [block, train]));
        }
    }
    out
}

/// Quota in use per tenant, two ways.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// What its jobs are charged now (shared nodes split among their members).
    pub held: Vec<Nodes>,
    /// What they would be charged if every partner on a shared node left. The borrowing limit
    /// is held against this, so a partner's departure never takes a tenant past its limit.
    pub alone: Vec<Nodes>,
    /// Environment cores its placed agentic jobs hold (empty: none anywhere).
    pub env: Vec<f64>,
}

impl Usage {
    /// Usage where nothing is shared (both views equal).
    pub fn unshared(held: Vec<Nodes>) -> Self {
        Usage { alone: held.clone(), held, env: Vec::new() }
    }

    fn of(charges: Vec<(JobId, Nodes, Nodes)>, tenants: usize, tenant_of: impl Fn(JobId) -> usize) -> Self {
        let mut usage = Usage { held: vec![[0.0; 2]; tenants], alone: vec![[0.0; 2]; tenants], env: Vec::new() };
        for (job, held, alone) in charges {
            let t = tenant_of(job);
            if t < tenants {
                for p in 0..2 {
                    usage.held[t][p] += held[p];
                    usage.alone[t][p] += alone[p];
                }
            }
        }
        usage
    }
}

/// Nodes of each fixed pool no group holds now (elastic pools: unbounded).
pub fn free_nodes(placer: &Placer) -> Nodes {
    let (cap_r, cap_t) = placer.config().capacity.unwrap_or((u32::MAX, u32::MAX));
    let (used_r, used_t) = placer.nodes_in_use();
    [cap_r.saturating_sub(used_r) as f64, cap_t.saturating_sub(used_t) as f64]
}

/// Nodes that leave with `job`: its rollout block if it is alone on it, and its group's
/// training nodes if it is the group's only member.
pub fn exclusive_nodes(placer: &Placer, job: JobId) -> Nodes {
    freed_nodes(placer, &[job])
}

/// Nodes that leave with the jobs of `set` together: each rollout block whose members are all
/// in it, and the training nodes of each group whose members all are (so two partners sharing
/// a group free its nodes although neither does alone).
pub fn freed_nodes(placer: &Placer, set: &[JobId]) -> Nodes {
    let mut groups: Vec<GroupId> = set.iter().filter_map(|&j| placer.group_of(j)).collect();
    groups.sort();
    groups.dedup();
    let mut freed = [0.0; 2];
    for g in groups.iter().filter_map(|&g| placer.group(g)) {
        let leaves = |m: &crate::group::Member| set.contains(&m.job.id);
        if !g.colocated {
            for b in &g.blocks {
                let on_block = || g.members.iter().filter(|m| m.block == b.id);
                if on_block().next().is_some() && on_block().all(leaves) {
                    freed[0] += b.nodes.len() as f64;
                }
            }
        }
        if g.members.iter().all(leaves) {
            freed[1] += g.training_nodes.len() as f64;
        }
    }
    freed
}

/// Projected start of each waiting job, taken in the order given (the queue's): a job starts at
/// the first moment the free nodes cover its demand, never before the job ahead of it; running
/// job `j` frees its exclusive nodes at `running_end(j)` (`None`: not in view), and a projected
/// job holds its demand for its duration (`None`: for good). Conservative: no co-execution
/// (nodes shared with jobs that stay are not counted), quotas not modelled. `None`: no start
/// in view.
pub fn projected_starts(
    placer: &Placer,
    now: Micros,
    running_end: impl Fn(JobId) -> Option<Micros>,
    waiting: &[(Nodes, Option<Micros>)],
) -> Vec<Option<Micros>> {
    projected_starts_after(placer, now, running_end, None, waiting)
}

/// Backfill's test for a job behind blocked ones: whether starting it now, holding `demand`
/// for `duration` (`None`: for good), leaves every reserved job's projected start (`starts`,
/// [`projected_starts`] of `reserved` without it) where it was. True when the job ends before
/// the first of them could start, or when the nodes it takes are ones they will not need
/// (EASY's "extra nodes", checked for each reservation: conservative backfill). A reserved job
/// with no start in view lets through only jobs that end. The projection is
/// [`projected_starts`]', so the job is charged its whole demand even if it would share nodes.
pub fn backfill_keeps_reserved(
    placer: &Placer,
    now: Micros,
    running_end: impl Fn(JobId) -> Option<Micros>,
    (demand, duration): (Nodes, Option<Micros>),
    reserved: &[(Nodes, Option<Micros>)],
    starts: &[Option<Micros>],
) -> bool {
    let first = starts.iter().map(|s| s.unwrap_or(Micros(u64::MAX))).min().unwrap_or(Micros(u64::MAX));
    if duration.is_some_and(|d| now + d <= first) {
        return true;
    }
    let started = (now, demand, duration);
    let after = projected_starts_after(placer, now, running_end, Some(started), reserved);
    after.iter().zip(starts).all(|(a, b)| a.is_some_and(|a| a <= b.unwrap_or(Micros(u64::MAX))))
}

/// [`projected_starts`] after one more job started at a given time, holding its demand for its
/// duration.
fn projected_starts_after(
    placer: &Placer,
    now: Micros,
    running_end: impl Fn(JobId) -> Option<Micros>,
    started: Option<(Micros, Nodes, Option<Micros>)>,
    waiting: &[(Nodes, Option<Micros>)],
) -> Vec<Option<Micros>> {
    let free = free_nodes(placer);
    // Changes to the free nodes over time.
    let mut changes: Vec<(Micros, Nodes)> = Vec::new();
    if let Some((at, demand, duration)) = started {
        changes.push((at, [-demand[0], -demand[1]]));
        if let Some(d) = duration {
            changes.push((at + d, demand));
        }
    }
    for g in placer.groups() {
        for m in &g.members {
            if let Some(end) = running_end(m.job.id) {
                changes.push((end.max(now), exclusive_nodes(placer, m.job.id)));
            }
        }
    }
    let mut earliest = Some(now);
    let mut out = Vec::with_capacity(waiting.len());
    for &(demand, duration) in waiting {
        let start = earliest.and_then(|from| {
            let mut times: Vec<Micros> = changes.iter().map(|c| c.0).filter(|&t| t > from).collect();
            times.push(from);
            times.sort_unstable();
            times.into_iter().find(|&t| {
                let mut avail = free;
                for (at, d) in &changes {
                    if *at <= t {
                        avail[0] += d[0];
                        avail[1] += d[1];
                    }
                }
                avail[0] + EPS >= demand[0] && avail[1] + EPS >= demand[1]
            })
        });
        if let Some(s) = start {
            changes.push((s, [-demand[0], -demand[1]]));
            if let Some(d) = duration {
                changes.push((s + d, demand));
            }
        }
        earliest = start;
        out.push(start);
    }
    out
}

impl SharePolicy {
    /// Quota in use per tenant: every job's share of the nodes its placement holds, and what
    /// it would hold alone. `tenant_of` maps a placed job to its tenant's index.
    pub fn usage(&self, placer: &Placer, tenant_of: impl Fn(JobId) -> usize) -> Usage {
        let mut usage = Usage::of(charges(placer), self.tenants.len(), &tenant_of);
        if self.tenants.iter().any(|q| q.env_cores.is_some()) {
            usage.env = vec![0.0; self.tenants.len()];
            for m in placer.groups().flat_map(|g| &g.members) {
                if let Some(held) = usage.env.get_mut(tenant_of(m.job.id)) {
                    *held += m.job.env_cores;
                }
            }
        }
        usage
    }

    /// Whether waiting job `w` may start now: its tenant's quota of each pool allows it
    /// ([`SharePolicy::may_start`]) and so does its cap on environment cores.
    pub fn may_start_waiting(&self, w: &Waiting, usage: &Usage) -> bool {
        let env_cap = self.tenants[w.tenant].env_cores;
        let env_fits =
            env_cap.is_none_or(|cap| usage.env.get(w.tenant).copied().unwrap_or(0.0) + w.env_cores <= cap + EPS);
        env_fits && self.may_start(w.tenant, w.demand, usage)
    }

    /// Tenant `t`'s dominant share: the largest fraction of its nominal quota in use.
    pub fn dominant_share(&self, t: usize, usage: &[Nodes]) -> f64 {
        let nominal = self.tenants[t].nominal();
        (0..2)
            .map(|p| {
                if nominal[p] > EPS {
                    usage[t][p] / nominal[p]
                } else if usage[t][p] > EPS {
                    f64::INFINITY
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }

    /// Whether tenant `t` may start a job needing `demand` now: within its nominal quota, or
    /// borrowing no more than others' unused quota; and, with a borrowing limit, even if every
    /// partner on its shared nodes left, no more than its limit beyond nominal. (Whether the
    /// nodes are free is the placer's question.)
    pub fn may_start(&self, t: usize, demand: Nodes, usage: &Usage) -> bool {
        if self.mode == ShareMode::Fifo {
            return true;
        }
        let q = &self.tenants[t];
        (0..2).all(|p| {
            let nominal = q.nominal()[p];
            let within_limit = q.borrow_limit.is_none_or(|l| usage.alone[t][p] + demand[p] - nominal <= l + EPS);
            let over = usage.held[t][p] + demand[p] - nominal;
            let lendable = || -> f64 {
                (0..self.tenants.len())
                    .filter(|&o| o != t)
                    .map(|o| (self.tenants[o].nominal()[p] - usage.held[o][p]).max(0.0))
                    .sum()
            };
            within_limit && (over <= EPS || over <= lendable() + EPS)
        })
    }

    /// Whether tenant `t` is using more than its nominal quota of some pool.
    pub fn borrowing(&self, t: usize, usage: &[Nodes]) -> bool {
        (0..2).any(|p| usage[t][p] > self.tenants[t].nominal()[p] + EPS)
    }

    /// Whether `w` would start within its tenant's nominal quota (no borrowing).
    pub fn entitled(&self, w: &Waiting, usage: &[Nodes]) -> bool {
        let nominal = self.tenants[w.tenant].nominal();
        (0..2).all(|p| usage[w.tenant][p] + w.demand[p] <= nominal[p] + EPS)
    }

    /// Tenant `t`'s dominant share counting the environment: the larger of its pools' share
    /// and the share of its cap on environment cores its sandboxes hold (a tenant without a
    /// cap has no entitlement there to measure against, and its environment is not counted).
    pub fn dominant_share_with_env(&self, t: usize, usage: &Usage) -> f64 {
        let pools = self.dominant_share(t, &usage.held);
        let held = usage.env.get(t).copied().unwrap_or(0.0);
        match self.tenants[t].env_cores {
            Some(cap) if cap > EPS => pools.max(held / cap),
            Some(_) if held > EPS => f64::INFINITY,
            _ => pools,
        }
    }

    /// The order to consider waiting jobs in (indices into `waiting`): arrival order under
    /// FIFO; else jobs within their tenant's quota before jobs that would borrow, then jobs
    /// resuming after a preemption (admitted work, whose SLO clock runs), then the
    /// least-served tenant (dominant share, environment cores included), then priority within
    /// a tenant, then arrival. A high priority orders a tenant's own jobs; it never lets one
    /// tenant borrow ahead of another tenant's entitled job.
    pub fn order(&self, waiting: &[Waiting], usage: &Usage) -> Vec<usize> {
        let share: Vec<f64> = (0..self.tenants.len()).map(|t| self.dominant_share_with_env(t, usage)).collect();
        self.order_by(waiting, &usage.held, &share)
    }

    /// [`SharePolicy::order`] with each tenant's share given (fair share with decay: see
    /// [`UsageHistory::shares`]); entitlement is still judged on `usage`, the use right now.
    pub fn order_by(&self, waiting: &[Waiting], usage: &[Nodes], share: &[f64]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..waiting.len()).collect();
        if self.mode == ShareMode::Fifo {
            idx.sort_by_key(|&k| waiting[k].arrival);
            return idx;
        }
        let entitled: Vec<bool> = waiting.iter().map(|w| self.entitled(w, usage)).collect();
        idx.sort_by(|&a, &b| {
            let (x, y) = (&waiting[a], &waiting[b]);
            entitled[b]
                .cmp(&entitled[a])
                .then(y.resumes.cmp(&x.resumes))
                .then(share[x.tenant].total_cmp(&share[y.tenant]))
                .then(y.priority.cmp(&x.priority))
                .then(x.arrival.cmp(&y.arrival))
        });
        idx
    }

    /// Jobs that may be preempted for `for_job` of `demand`, cheapest first: borrowed capacity
    /// of other tenants (when `for_job`'s tenant would still be within its quota) and
    /// lower-priority jobs of its own tenant when `for_job` is at least
    /// [`SharePolicy::preempts_own`], never one inside its minimum run time; other tenants'
    /// borrowed capacity before the tenant's own jobs (as Kueue's candidate order), then the
    /// least unsaved work, then the fewest nodes.
    pub fn victims(&self, for_job: Waiting, demand: Nodes, running: &[Running], usage: &[Nodes]) -> Vec<JobId> {
        if self.mode < ShareMode::Preemption {
            return Vec::new();
        }
        let t = for_job.tenant;
        let entitled = (0..2).all(|p| usage[t][p] + demand[p] <= self.tenants[t].nominal()[p] + EPS);
        let mut v: Vec<&Running> = running
            .iter()
            .filter(|r| r.ran >= self.min_run)
            .filter(|r| {
                let reclaim = r.tenant != t && entitled && self.borrowing(r.tenant, usage);
                let outranked = r.tenant == t && r.priority < for_job.priority && for_job.priority >= self.preempts_own;
                reclaim || outranked
            })
            .collect();
        // Borrowed capacity first: taking back what other tenants borrowed brings the tenant
        // towards its entitlement, displacing its own job does not (the victim waits in its
        // place and reclaims next).
        v.sort_by(|a, b| {
            (a.tenant == t)
                .cmp(&(b.tenant == t))
                .then(a.unsaved.cmp(&b.unsaved))
                .then(a.held.total_cmp(&b.held))
                .then(a.job.cmp(&b.job))
        });
        v.into_iter().map(|r| r.job).collect()
    }

    /// The jobs to preempt so that `for_job` can start now: victims in [`SharePolicy::victims`]'
    /// order, each taken only if it frees nodes or quota the job needs (a victim that frees
    /// nothing alone is taken with its group's partners when they are victims too and together
    /// they free their nodes), until together they free enough of both; then any victim the
    /// rest do without is let off, the latest taken first, so the set is minimal. `None` when
    /// no such set exists (then nobody is preempted). With [`Claim::BehindHead`] the victims
    /// alone must free the job's nodes: the free ones are kept for the blocked head.
    pub fn preemption(
        &self,
        placer: &Placer,
        for_job: Waiting,
        running: &[Running],
        usage: &Usage,
        claim: Claim,
    ) -> Option<Vec<JobId>> {
        let demand = for_job.demand;
        let charges: BTreeMap<JobId, (Nodes, Nodes)> =
            charges(placer).into_iter().map(|(job, held, alone)| (job, (held, alone))).collect();
        let tenant_of: BTreeMap<JobId, usize> = running.iter().map(|r| (r.job, r.tenant)).collect();
        let free = match claim {
            Claim::Head => free_nodes(placer),
            Claim::BehindHead => [0.0; 2],
        };
        let fits = |set: &[JobId]| {
            let freed = freed_nodes(placer, set);
            let mut after = usage.clone();
            for v in set {
                let (c, a) = charges.get(v).copied().unwrap_or_default();
                for p in 0..2 {
                    after.held[tenant_of[v]][p] -= c[p];
                    after.alone[tenant_of[v]][p] -= a[p];
                }
            }
            (0..2).all(|p| free[p] + freed[p] >= demand[p]) && self.may_start(for_job.tenant, demand, &after)
        };
        let eligible = self.victims(for_job, demand, running, &usage.held);
        let frees_more = |set: &[JobId], than: Nodes| {
            let n = freed_nodes(placer, set);
            n[0] > than[0] || n[1] > than[1]
        };
        let mut chosen: Vec<JobId> = Vec::new();
        for &v in &eligible {
            if fits(&chosen) {
                break;
            }
            if chosen.contains(&v) {
                continue;
            }
            let before = freed_nodes(placer, &chosen);
            let own_quota = tenant_of[&v] == for_job.tenant && charges.get(&v).is_some_and(|(c, _)| c[0] + c[1] > 0.0);
            let mut with = [chosen.as_slice(), &[v]].concat();
            if !frees_more(&with, before) && !own_quota {
                // Worth it only with its partners, when they are victims too and free nodes with it.
                let partners =
                    placer.group_of(v).and_then(|g| placer.group(g)).map(|g| g.members.as_slice()).unwrap_or(&[]);
                let rest: Vec<JobId> =
                    partners.iter().map(|m| m.job.id).filter(|j| *j != v && !chosen.contains(j)).collect();
                if rest.is_empty() || !rest.iter().all(|j| eligible.contains(j)) {
                    continue;
                }
                with.extend(rest);
                if !frees_more(&with, before) {
                    continue;
                }
            }
            chosen = with;
        }
        if chosen.is_empty() || !fits(&chosen) {
            return None;
        }
        for i in (0..chosen.len()).rev() {
            let without: Vec<JobId> = chosen.iter().enumerate().filter(|&(k, _)| k != i).map(|(_, &j)| j).collect();
            if !without.is_empty() && fits(&without) {
                chosen = without;
            }
        }
        Some(chosen)
    }
}

#[cfg(test)]
mod tests;
