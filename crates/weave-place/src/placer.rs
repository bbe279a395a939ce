//! Online admission and departure.
//!
//! On arrival, every group that is not saturated is tried with direct packing (the job on an
//! existing rollout block: no new cost) and rollout scaling (a new block of the job's width:
//! the cost of its rollout nodes); isolated provisioning (a new group) is always a candidate.
//! Candidates that break residency or any member's SLO under the group timing model are
//! dropped. `weave` takes the cheapest, ties broken by (kind, group id, block id); since all
//! direct options cost nothing and all scaling options cost the same, the scan stops at the
//! first feasible direct option, and the work per decision is linear in the number of groups.

use crate::group::{Block, Group, Member, Prediction};
use crate::job::PlaceJob;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use weave_core::agentic::EnvNodeId;
use weave_core::{Bytes, GroupId, JobId, Micros, Money, NodeId, Pool};
use weave_model::named_stream;

mod decision;
mod update;
pub use decision::{Decision, DecisionKind, Departure, PlaceError, PlacePolicy, PlacerConfig, Target};

struct Candidate {
    kind: DecisionKind,
    group: Option<GroupId>,
    block: Option<u32>,
    cost: Money,
    prediction: Prediction,
    /// Work rate the option adds (see [`Prediction::work`]): the job's own, less what the
    /// other members of the group lose.
    work: f64,
}

impl Candidate {
    /// What the option adds per hour and the work rate it buys.
    fn price(&self) -> OptionCost {
        let period = self.prediction.coexec.last().copied().unwrap_or(self.prediction.meta_iteration);
        OptionCost {
            kind: self.kind,
            cost_per_hour: self.cost,
            work: self.work,
            period,
            group_cost_per_hour: self.cost,
            group_work: self.work,
        }
    }

    fn score(&self) -> f64 {
        self.price().score()
    }
}

/// A placement option's price tag: what it adds per hour and how much work rate it buys.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OptionCost {
    pub kind: DecisionKind,
    pub cost_per_hour: Money,
    pub work: f64,
    /// The job's predicted iteration time there.
    pub period: Micros,
    /// What the whole group it joins costs per hour, and the work rate all its members get
    /// there (the job's own option when it runs alone): a delay of the job's rollout holds the
    /// group's nodes, not only what the job adds (see [`OptionCost::group_score`]).
    #[serde(skip)]
    pub group_cost_per_hour: Money,
    #[serde(skip)]
    pub group_work: f64,
}

impl OptionCost {
    /// Marginal dollars per hour per unit of work rate (solo-job equivalents).
    pub fn score(&self) -> f64 {
        if self.work <= 0.0 {
            f64::INFINITY
        } else {
            self.cost_per_hour.as_dollars() / self.work
        }
    }

    /// Dollars per hour per unit of work rate of the group the job would be in, on average:
    /// what a unit of the job's work costs while it holds its share of the group.
    pub fn group_score(&self) -> f64 {
        if self.group_work <= 0.0 {
            f64::INFINITY
        } else {
            self.group_cost_per_hour.as_dollars() / self.group_work
        }
    }
}

/// Cloning is cheap: groups are shared (copy-on-write), so the server can take a frozen copy
/// for a snapshot under its lock and write it out after.
#[derive(Clone, Serialize, Deserialize)]
pub struct Placer {
    cfg: PlacerConfig,
    groups: BTreeMap<GroupId, Arc<Group>>,
    job_group: BTreeMap<JobId, GroupId>,
    next_group: u32,
    next_node: [u32; 2],
    in_use: [u32; 2],
    /// Nodes held by some group.
    held: BTreeSet<NodeId>,
    /// Nodes out of service (fixed capacity: a backend reported them gone); never handed out.
    down: BTreeSet<NodeId>,
    /// Environment nodes out of service: the pool placement reserves from is smaller by theirs.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    env_down: BTreeSet<EnvNodeId>,
}

impl Placer {
    pub fn new(cfg: PlacerConfig) -> Self {
        Placer {
            cfg,
            groups: BTreeMap::new(),
            job_group: BTreeMap::new(),
            next_group: 0,
            next_node: [0, 0],
            in_use: [0, 0],
            held: BTreeSet::new(),
            down: BTreeSet::new(),
            env_down: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &PlacerConfig {
        &self.cfg
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values().map(|g| &**g)
    }

    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(&id).map(|g| &**g)
    }

    /// A group to change (copied first if a frozen copy of the placer still shares it).
    fn group_mut(&mut self, id: GroupId) -> Option<&mut Group> {
        self.groups.get_mut(&id).map(Arc::make_mut)
    }

    pub fn group_of(&self, job: JobId) -> Option<GroupId> {
        self.job_group.get(&job).copied()
    }

    /// Nodes held per pool: (rollout, training).
    pub fn nodes_in_use(&self) -> (u32, u32) {
        (self.in_use[0], self.in_use[1])
    }

    /// Total hourly cost of every node held.
    pub fn hourly_cost(&self) -> Money {
        Money(
            self.cfg.rollout_node_price.0 * self.in_use[0] as i64 + self.cfg.train_node_price.0 * self.in_use[1] as i64,
        )
    }

    fn free(&self, pool: usize) -> u32 {
        match self.cfg.capacity {
            Some(cap) => {
                let idle_down =
                    self.down.iter().filter(|n| pool_index(n.pool) == pool && !self.held.contains(n)).count();
                [cap.0, cap.1][pool].saturating_sub(self.in_use[pool]).saturating_sub(idle_down as u32)
            }
            None => u32::MAX,
        }
    }

    /// Grows fixed pools to at least `sizes` (never shrinks them: node indices name machines,
    /// and a machine that went away is a node out of service, not a smaller pool).
    /// Replaces the settings (a placer restored from a snapshot takes the server's current
    /// ones); what is placed stays as it is.
    pub fn set_config(&mut self, cfg: PlacerConfig) {
        self.cfg = cfg;
    }

    pub fn grow_capacity(&mut self, sizes: (u32, u32)) {
        let (r, t) = self.cfg.capacity.unwrap_or((0, 0));
        self.cfg.capacity = Some((r.max(sizes.0), t.max(sizes.1)));
    }

    /// Takes a node out of service (`down = true`) or back in. Only meaningful with fixed
    /// capacity, where node indices name real machines; jobs already on the node are not
    /// moved (see [`Placer::jobs_on`]). Returns whether anything changed.
    pub fn set_node_down(&mut self, node: NodeId, down: bool) -> bool {
        if down {
            self.down.insert(node)
        } else {
            self.down.remove(&node)
        }
    }

    /// Takes an environment node out of service (or back); whether that changed anything.
    /// The agentic jobs placed stay: their sandboxes run on the nodes left (their drivers run
    /// a lost node's trajectories again), and new ones wait until the pool has room.
    pub fn set_env_node_down(&mut self, node: EnvNodeId, down: bool) -> bool {
        if down {
            self.env_down.insert(node)
        } else {
            self.env_down.remove(&node)
        }
    }

    pub fn is_env_node_down(&self, node: EnvNodeId) -> bool {
        self.env_down.contains(&node)
    }

    pub fn is_down(&self, node: NodeId) -> bool {
        self.down.contains(&node)
    }

    /// Nodes out of service, in order.
    pub fn down_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.down.iter().copied()
    }

    /// The jobs that run on `node` (its rollout block or its group's training pool), in
    /// job order.
    pub fn jobs_on(&self, node: NodeId) -> Vec<JobId> {
        let mut out: Vec<JobId> = self
            .groups
            .values()
            .flat_map(|g| {
                let trains = g.training_nodes.contains(&node);
                g.members.iter().filter(move |m| trains || g.block(m.block).is_some_and(|b| b.nodes.contains(&node)))
            })
            .map(|m| m.job.id)
            .collect();
        out.sort_unstable();
        out
    }

    /// Places `job`; on success the placement is applied.
    pub fn admit(&mut self, job: PlaceJob) -> Result<Decision, PlaceError> {
        let chosen = self.choose(&job)?;
        Ok(self.apply(job, chosen))
    }

    /// What [`Placer::admit`] would decide, without changing anything (a server checks this
    /// before it makes the submission durable).
    pub fn preview(&self, job: &PlaceJob) -> Result<DecisionKind, PlaceError> {
        self.choose(job).map(|c| c.kind)
    }

    fn choose(&self, job: &PlaceJob) -> Result<Candidate, PlaceError> {
        if self.job_group.contains_key(&job.id) {
            return Err(PlaceError::AlreadyPlaced(job.id));
        }
        let isolated = self.isolated(job)?;
        let chosen = match self.cfg.policy {
            PlacePolicy::Weave if self.cfg.colocate => self.cheapest_per_work(job, isolated),
            PlacePolicy::Weave => self.cheapest(job).unwrap_or(isolated),
            PlacePolicy::MostIdle => self.most_idle(job).unwrap_or(isolated),
            PlacePolicy::Isolate => isolated,
            PlacePolicy::Random => {
                let mut all = self.all_options(job);
                all.push(isolated);
                let mut rng = named_stream(self.cfg.seed, "place-random", job.id.0 as u64);
                let i = rng.random_range(0..all.len());
                all.swap_remove(i)
            }
        };
        self.check_capacity(job, &chosen)?;
        Ok(chosen)
    }

    fn check_capacity(&self, job: &PlaceJob, c: &Candidate) -> Result<(), PlaceError> {
        let short = match c.kind {
            DecisionKind::Isolated => self.free(0) < job.rollout_width || self.free(1) < job.train_width,
            DecisionKind::Colocated => self.free(1) < job.train_width,
            DecisionKind::Scaling => self.free(0) < job.rollout_width,
            DecisionKind::Direct => false,
        };
        if short {
            return Err(PlaceError::NoCapacity(job.id));
        }
        let (held, pool) = (self.env_cores_held(), self.env_pool_cores());
        if held + job.env_cores > pool + 1e-9 {
            return Err(PlaceError::NoEnvironment { job: job.id, needs: job.env_cores, held, pool });
        }
        Ok(())
    }

    /// The environment cores placement reserves from: the pool's nodes in service with fixed
    /// pools, without limit when pools are rented on demand (or the cluster has no environment
    /// pool).
    pub fn env_pool_cores(&self) -> f64 {
        let lost = self.env_down.len() as f64 * self.cfg.env_node_cores.unwrap_or(0.0);
        (self.env_pool_cores_installed() - lost).max(0.0)
    }

    /// The whole environment pool, its nodes out of service too: a job larger than it never fits.
    fn env_pool_cores_installed(&self) -> f64 {
        match (self.cfg.capacity, self.cfg.env_cores) {
            (Some(_), Some(cores)) => cores,
            _ => f64::INFINITY,
        }
    }

    /// Environment cores the placed agentic jobs hold.
    pub fn env_cores_held(&self) -> f64 {
        self.groups.values().flat_map(|g| &g.members).map(|m| m.job.env_cores).sum()
    }

    /// The cost of the option [`Placer::admit`] would take for `job`, without changing anything.
    pub fn best_option(&self, job: &PlaceJob) -> Result<OptionCost, PlaceError> {
        let c = self.choose(job)?;
        let mut o = c.price();
        if let Some(g) = c.group.and_then(|g| self.groups.get(&g)) {
            let jobs = g.members.iter().map(|m| &m.job).chain(std::iter::once(job));
            o.group_work = c.prediction.work(jobs);
            let held = g.hourly_cost(self.cfg.rollout_price(g.spot()), self.cfg.train_node_price);
            o.group_cost_per_hour = Money(held.0 + c.cost.0);
        }
        Ok(o)
    }

    /// Places `job` at `target` if that is feasible (residency, every member's SLO, capacity);
    /// consolidation uses this to carry out a move it planned.
    pub fn admit_to(&mut self, job: PlaceJob, target: Target) -> Result<Decision, PlaceError> {
        if self.job_group.contains_key(&job.id) {
            return Err(PlaceError::AlreadyPlaced(job.id));
        }
        let c = self
            .candidate_at(&job, target)
            .ok_or_else(|| PlaceError::Infeasible { job: job.id, target: format!("{target:?}") })?;
        self.check_capacity(&job, &c)?;
        Ok(self.apply(job, c))
    }

    /// Whether `target` in group `group` can take `job` as far as nodes go: the group's nodes
    /// are in service and a new block (`block = None`) has free capacity. Timing, memory and
    /// SLOs are the caller's to check.
    pub fn nodes_available(&self, job: &PlaceJob, group: GroupId, block: Option<u32>) -> bool {
        let Some(g) = self.groups.get(&group) else { return false };
        let in_service = |nodes: &[NodeId]| !nodes.iter().any(|n| self.down.contains(n));
        in_service(&g.training_nodes)
            && match block {
                Some(b) => g.block(b).is_some_and(|b| in_service(&b.nodes)),
                None => self.cfg.scaling && self.free(0) >= job.rollout_width,
            }
    }

    /// The price tag of putting `job` at `target`, if feasible.
    pub fn option_at(&self, job: &PlaceJob, target: Target) -> Option<OptionCost> {
        self.candidate_at(job, target).map(|c| c.price())
    }

    fn candidate_at(&self, job: &PlaceJob, target: Target) -> Option<Candidate> {
        match target {
            Target::Isolated => self.isolated(job).ok(),
            Target::Colocated => self.colocated(job),
            Target::Group { group, block } => {
                let g = self.groups.get(&group).filter(|g| !g.colocated)?;
                self.group_options(g, job, false, block.is_none())
                    .into_iter()
                    .find(|c| c.block == block && (block.is_some() || c.kind == DecisionKind::Scaling))
            }
        }
    }

    /// Weave with the co-located option: a feasible direct option costs nothing and wins;
    /// otherwise the option with the lowest marginal dollars per unit of work rate among every
    /// feasible scaling option, co-located and isolated (ties: isolated, then co-located, then
    /// scaling in group order).
    fn cheapest_per_work(&self, job: &PlaceJob, isolated: Candidate) -> Candidate {
        let mut best = isolated;
        if let Some(c) = self.colocated(job) {
            if c.score() <= best.score() {
                best = c;
            }
        }
        for g in self.groups.values().filter(|g| self.open(g)) {
            for c in self.group_options(g, job, true, true) {
                match c.kind {
                    DecisionKind::Direct if c.work > 0.0 => return c,
                    DecisionKind::Scaling if c.score() < best.score() => best = c,
                    _ => {}
                }
            }
        }
        best
    }

    /// The co-located option: the job alone on training nodes of its own, within its SLO.
    fn colocated(&self, job: &PlaceJob) -> Option<Candidate> {
        if !self.cfg.colocate {
            return None;
        }
        let prediction = colocated_within_slo(job)?;
        let work = prediction.work([job]);
        let cost = Money(self.cfg.train_node_price.0 * job.train_width as i64);
        Some(Candidate { kind: DecisionKind::Colocated, group: None, block: None, cost, prediction, work })
    }

    /// The isolated option: always SLO-feasible (alone, a job runs solo); fails only if the
    /// job's own state does not fit a node.
    fn isolated(&self, job: &PlaceJob) -> Result<Candidate, PlaceError> {
        let res = &self.cfg.residency;
        let train_per_node = Bytes(job.train_state_total.0 / job.train_width.max(1) as u64);
        if res.resident && (job.rollout_state > res.rollout_dram || train_per_node > res.train_dram) {
            let reason = format!(
                "its cached state ({} per rollout node, {train_per_node} per training node) exceeds host DRAM",
                job.rollout_state
            );
            return Err(PlaceError::NeverFits { job: job.id, reason });
        }
        if job.env_cores > self.env_pool_cores_installed() {
            let reason = format!(
                "its sandboxes (`batch` x `agentic.sandbox.cores`) hold {} environment cores; the environment pool has {}",
                job.env_cores,
                self.env_pool_cores_installed()
            );
            return Err(PlaceError::NeverFits { job: job.id, reason });
        }
        let members = [job.timing_member(0, job.train_width, res.resident)];
        let prediction = crate::group::predict(&members);
        let cost = Money(
            self.cfg.rollout_price(job.spot).0 * job.rollout_width as i64
                + self.cfg.train_node_price.0 * job.train_width as i64,
        );
        let work = prediction.work([job]);
        Ok(Candidate { kind: DecisionKind::Isolated, group: None, block: None, cost, prediction, work })
    }

    /// Whether a group is considered for new members at all.
    fn open(&self, g: &Group) -> bool {
        let too_full = self.cfg.skip_saturated && g.prediction.saturated;
        !g.colocated && !too_full
    }

    fn scaling_cost(&self, job: &PlaceJob) -> Money {
        Money(self.cfg.rollout_price(job.spot).0 * job.rollout_width as i64)
    }

    /// Feasible options in one group: direct on each block (stopping at the first if
    /// `stop_at_direct`), then scaling if `want_scaling`.
    fn group_options(&self, g: &Group, job: &PlaceJob, stop_at_direct: bool, want_scaling: bool) -> Vec<Candidate> {
        let mut out = Vec::new();
        let res = &self.cfg.residency;
        // Nothing new ever lands on a node out of service.
        let in_service = |nodes: &[NodeId]| !nodes.iter().any(|n| self.down.contains(n));
        // Tiers never mix: a spot group's rollout nodes are all preemptible.
        if !in_service(&g.training_nodes) || g.spot() != job.spot {
            return out;
        }
        let work_before = g.work();
        let added_work = |p: &Prediction| p.work(g.members.iter().map(|m| &m.job).chain([job])) - work_before;
        for b in g.blocks.iter().filter(|b| in_service(&b.nodes)) {
            if let Some(p) = g.try_add(job, Some(b.id), res) {
                out.push(Candidate {
                    kind: DecisionKind::Direct,
                    group: Some(g.id),
                    block: Some(b.id),
                    cost: Money::ZERO,
                    work: added_work(&p),
                    prediction: p,
                });
                if stop_at_direct {
                    return out;
                }
            }
        }
        if want_scaling && self.cfg.scaling && self.free(0) >= job.rollout_width {
            if let Some(p) = g.try_add(job, None, res) {
                out.push(Candidate {
                    kind: DecisionKind::Scaling,
                    group: Some(g.id),
                    block: None,
                    cost: self.scaling_cost(job),
                    work: added_work(&p),
                    prediction: p,
                });
            }
        }
        out
    }

    /// Weave's choice among group options: the first feasible direct option in group order,
    /// else the first feasible scaling option (all scaling options cost the same).
    fn cheapest(&self, job: &PlaceJob) -> Option<Candidate> {
        let mut first_scaling: Option<Candidate> = None;
        for g in self.groups.values().filter(|g| self.open(g)) {
            for c in self.group_options(g, job, true, first_scaling.is_none()) {
                match c.kind {
                    DecisionKind::Direct => return Some(c),
                    _ => first_scaling = Some(c),
                }
            }
        }
        first_scaling
    }

    fn all_options(&self, job: &PlaceJob) -> Vec<Candidate> {
        self.groups.values().filter(|g| self.open(g)).flat_map(|g| self.group_options(g, job, false, true)).collect()
    }

    /// Greedy "most idle": the group whose training pool idles most, among those that can take
    /// the job (direct preferred within the group).
    fn most_idle(&self, job: &PlaceJob) -> Option<Candidate> {
        let mut best: Option<(f64, Candidate)> = None;
        for g in self.groups.values().filter(|g| self.open(g)) {
            let idle = 1.0 - g.prediction.train_busy;
            if best.as_ref().is_some_and(|(b, _)| idle <= *b) {
                continue;
            }
            if let Some(c) = self.group_options(g, job, true, true).into_iter().next() {
                best = Some((idle, c));
            }
        }
        best.map(|(_, c)| c)
    }

    /// Rents `n` new nodes (elastic: fresh indices, never reused) or takes the `n` lowest free
    /// in-service nodes of a fixed pool (their indices name real machines).
    fn new_nodes(&mut self, pool: Pool, n: u32) -> Vec<NodeId> {
        let p = pool_index(pool);
        let nodes: Vec<NodeId> = match self.cfg.capacity {
            Some(cap) => (0..[cap.0, cap.1][p])
                .map(|index| NodeId { pool, index })
                .filter(|node| !self.held.contains(node) && !self.down.contains(node))
                .take(n as usize)
                .collect(),
            None => {
                let start = self.next_node[p];
                self.next_node[p] += n;
                (start..start + n).map(|index| NodeId { pool, index }).collect()
            }
        };
        debug_assert_eq!(nodes.len(), n as usize, "capacity was checked before");
        self.in_use[p] += nodes.len() as u32;
        self.held.extend(nodes.iter().copied());
        nodes
    }

    fn apply(&mut self, job: PlaceJob, c: Candidate) -> Decision {
        let mut new_nodes = Vec::new();
        let gid = match c.group {
            Some(g) => g,
            None => {
                let id = GroupId(self.next_group);
                self.next_group += 1;
                let training_nodes = self.new_nodes(Pool::Training, job.train_width);
                new_nodes.extend(training_nodes.iter().copied());
                let prediction = c.prediction.clone();
                let colocated = c.kind == DecisionKind::Colocated;
                let group = Group {
                    id,
                    training_nodes,
                    blocks: Vec::new(),
                    // A co-located member's "rollout node" is its training pool (block 0, no
                    // rollout nodes held).
                    next_block: colocated as u32,
                    members: Vec::new(),
                    train_used: Bytes(0),
                    prediction,
                    colocated,
                };
                self.groups.insert(id, Arc::new(group));
                id
            }
        };
        let block_id = match c.block {
            Some(b) => b,
            None if c.kind == DecisionKind::Colocated => 0,
            None => {
                let nodes = self.new_nodes(Pool::Rollout, job.rollout_width);
                new_nodes.extend(nodes.iter().copied());
                let g = self.group_mut(gid).expect("group exists");
                let id = g.next_block;
                g.next_block += 1;
                g.blocks.push(Block { id, nodes, used: Bytes(0) });
                id
            }
        };
        let resident = self.cfg.residency.resident;
        let g = self.group_mut(gid).expect("group exists");
        if resident {
            if let Some(b) = g.blocks.iter_mut().find(|b| b.id == block_id) {
                b.used = b.used + job.rollout_state;
            }
            g.train_used = g.train_used + Bytes(job.train_state_total.0 / g.training_nodes.len().max(1) as u64);
        }
        let id = job.id;
        g.members.push(Member { job, block: block_id });
        g.prediction = c.prediction;
        self.job_group.insert(id, gid);
        let g = &self.groups[&gid];
        Decision {
            job: id,
            kind: c.kind,
            group: gid,
            block: block_id,
            rollout_nodes: if g.colocated {
                g.training_nodes.clone()
            } else {
                g.block(block_id).map(|b| b.nodes.clone()).unwrap_or_default()
            },
            training_nodes: g.training_nodes.clone(),
            new_nodes,
            marginal_cost_per_hour: c.cost,
            slowdowns: g
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| (m.job.id, g.prediction.slowdown(i, &m.job)))
                .collect(),
            meta_iteration: g.prediction.meta_iteration,
        }
    }

    /// Removes a job (finished, cancelled or failed): rollout blocks no member uses are
    /// released, an empty group dissolves, nothing else moves.
    pub fn depart(&mut self, job: JobId) -> Result<Departure, PlaceError> {
        let gid = self.job_group.remove(&job).ok_or(PlaceError::NotPlaced(job))?;
        let resident = self.cfg.residency.resident;
        let g = self.group_mut(gid).expect("placed jobs have groups");
        let pos = g.members.iter().position(|m| m.job.id == job).expect("member of its group");
        let m = g.members.remove(pos);
        if resident {
            if let Some(b) = g.blocks.iter_mut().find(|b| b.id == m.block) {
                b.used = Bytes(b.used.0 - m.job.rollout_state.0);
            }
            g.train_used = Bytes(g.train_used.0 - m.job.train_state_total.0 / g.training_nodes.len().max(1) as u64);
        }
        let mut released = Vec::new();
        if !g.members.iter().any(|o| o.block == m.block) {
            if let Some(i) = g.blocks.iter().position(|b| b.id == m.block) {
                released.extend(g.blocks.remove(i).nodes);
            }
        }
        let dissolved = g.members.is_empty();
        if dissolved {
            let g = Arc::unwrap_or_clone(self.groups.remove(&gid).expect("exists"));
            released.extend(g.training_nodes);
        } else {
            g.refresh(resident);
        }
        for n in &released {
            self.in_use[pool_index(n.pool)] -= 1;
            self.held.remove(n);
        }
        Ok(Departure { job, group: gid, released, dissolved })
    }
}

/// `job` alone on its training nodes, both phases there, if that keeps its SLO (under its
/// variation too, as for a group: a stale job's solo overlaps its phases).
fn colocated_within_slo(job: &PlaceJob) -> Option<Prediction> {
    let prediction = Prediction::colocated(job)?;
    if prediction.coexec[0].0 as f64 > job.slo * job.solo().0 as f64 {
        return None;
    }
    if crate::group::colocated_slowdown(job).is_some_and(|s| s > job.slo) {
        return None;
    }
    Some(prediction)
}

fn pool_index(pool: Pool) -> usize {
    (pool == Pool::Training) as usize
}
