//! The preemptible rollout tier in the replay: which jobs run their rollouts on it, when its
//! nodes are taken back (a seeded stream of its own, or a replayed trace) and what that costs
//! the rollout in flight and the ones that start while the node is missing.
//!
//! Weave chooses the tier per job at admission (spot when the job's SLO has room for the
//! preemption delays its life may see at the promised confidence, and spot is cheaper per unit
//! of work) and recovers a preempted node's in-flight requests by moving them or restarting
//! them, whichever is cheaper. The other policies put every job with rollout nodes on spot and
//! restart (the spot-only baseline). A replacement node is asked for at the notice; the node
//! stays charged until it arrives (conservative: a cloud stops billing a taken node).

use super::{Engine, What, CLASS_OTHER};
use crate::dynamics::exp_wait;
use crate::metrics::SpotCounts;
use std::collections::{BTreeMap, VecDeque};
use weave_core::{GroupId, Micros, NodeId, Pool, Preemption, SpotConfig};
use weave_model::spot::short_delay;
use weave_model::{named_stream, Recovery, SpotModel, Stream};
use weave_place::{DecisionKind, OptionCost, PlaceJob, Placer};

/// The share of a job's SLO slack its preemption room may take (see [`Spot::choose_tier`]).
const SLACK_FOR_PREEMPTION: f64 = 0.5;

/// How many recent arrivals the tier's population is judged by (see [`Spot::choose_tier`]).
const ARRIVAL_WINDOW: usize = 32;

/// The share of recent arrivals that must be able to go on spot before a job opens a new group
/// there: below it, the group's later partners would mostly be jobs that cannot join it, and
/// two thin tiers pack worse than one. Measured on the wild trace (seeds 1-3 and the built-in
/// workload, `weave sweep spot`): with a half, the cells where about half the arrivals could
/// use spot (50% off, a preemption per 2 node-hours) cost 0.5-1.6% more than on demand; where
/// two thirds or more could, spot paid.
const POPULOUS_TIER: f64 = 2.0 / 3.0;

pub(super) struct Spot {
    model: SpotModel,
    recovery: Recovery,
    /// Every job with rollout nodes runs them on spot (the baselines); otherwise per job.
    all_jobs: bool,
    rng: Stream,
    trace: Vec<Preemption>,
    /// Hourly prices of a spot and an on-demand rollout node and of a training node.
    prices: (f64, f64, f64),
    /// Per rollout block: when each of its missing nodes is replaced.
    missing: BTreeMap<(GroupId, u32), Vec<Micros>>,
    /// Whether each of the last [`ARRIVAL_WINDOW`] arrivals could go on spot, oldest first.
    arrivals: VecDeque<bool>,
    pub(super) counts: SpotCounts,
}

impl Spot {
    pub(super) fn new(c: &SpotConfig, cluster: &weave_core::ClusterConfig, seed: u64, weave: bool) -> Spot {
        let mut model = SpotModel::from_config(c);
        if let Some(last) = c.trace.last() {
            // Admission plans for the trace's own rate: its preemptions over the pool and span.
            let node_hours = cluster.rollout.nodes as f64 * last.at.as_hours_f64().max(1.0);
            model.rate_per_node_hour = c.trace.len() as f64 / node_hours;
        }
        Spot {
            model,
            recovery: if weave { Recovery::Cheaper } else { Recovery::Restart },
            all_jobs: !weave,
            rng: named_stream(seed, "spot-preemption", 0),
            trace: c.trace.clone(),
            prices: (
                c.plan_price_per_gpu_hour.unwrap_or(c.price_per_gpu_hour) * cluster.rollout.gpus_per_node as f64,
                cluster.rollout.price_per_gpu_hour * cluster.rollout.gpus_per_node as f64,
                cluster.training.price_per_gpu_hour * cluster.training.gpus_per_node as f64,
            ),
            missing: BTreeMap::new(),
            arrivals: VecDeque::new(),
            counts: SpotCounts::default(),
        }
    }

    /// Puts `place` on spot if this run uses spot for it: Weave when the job [may use
    /// spot](Spot::may_use_spot), and the best option on spot, its dollars grown by the room
    /// where it holds rollout nodes, costs no more per unit of work than the best on demand (a
    /// spot job shares groups only with spot jobs: a job that would pack on demand but not on
    /// spot stays on demand; a tie goes to spot, where later jobs find partners). A job opens a
    /// new group on spot only while at least [`POPULOUS_TIER`] of the recent arrivals could
    /// join it: a spot group's later partners can only be jobs that may use spot, and a group
    /// that finds none costs more than the discount saves (on the wild trace at hourly
    /// preemptions, 5 of 200 jobs alone on spot cost 2.7% more than all on demand). A
    /// co-located job decides again when it is moved (see `admit_at`): it holds no rollout
    /// nodes yet.
    pub(super) fn choose_tier(&self, place: &mut PlaceJob, epsilon: f64, placer: &Placer) {
        if self.all_jobs {
            place.spot = true;
            return;
        }
        let Some(room) = self.may_use_spot(place, epsilon) else { return };
        let on_spot = PlaceJob { spot: true, slo: place.slo - room, ..place.clone() };
        // A co-located option holds no rollout nodes: no preemption delays it. Elsewhere a
        // delay of the job's rollout holds its share of the whole group for `room` of its life:
        // charged at the group's average price of work, not at what the job adds (joining a
        // group's nodes adds nothing, and its delays would come free).
        let delays = |o: &OptionCost| if o.kind == DecisionKind::Colocated { 0.0 } else { room * o.group_score() };
        let Ok(best_on_spot) = placer.best_option(&on_spot) else { return };
        // Opening a group, or running co-located until consolidation pairs the job into a
        // new group, starts a spot group; joining one does not.
        let opens = matches!(best_on_spot.kind, DecisionKind::Isolated | DecisionKind::Colocated);
        if opens && !self.populous() {
            return;
        }
        let on_spot_score = best_on_spot.score() + delays(&best_on_spot);
        let on_demand_score = placer.best_option(place).map_or(f64::INFINITY, |o| o.score());
        if on_spot_score <= on_demand_score {
            *place = on_spot;
        }
    }

    /// The room `place`'s SLO must leave for preemptions, if the job may go on spot at all:
    /// the room takes at most half of the SLO's slack (sharing is where Weave's savings come
    /// from, and it needs that slack: a job left without it runs alone, and alone the rollout
    /// discount cannot pay for the packing it gives up), and the job's own nodes cost less on
    /// spot with the room than on demand.
    fn may_use_spot(&self, place: &PlaceJob, epsilon: f64) -> Option<f64> {
        let room = self.room(place, epsilon);
        if room > (place.slo - 1.0) * SLACK_FOR_PREEMPTION {
            return None;
        }
        let (spot, on_demand, train) = self.prices;
        let (r, t) = (place.rollout_width as f64, place.train_width as f64);
        ((r * spot + t * train) * (1.0 + room) < r * on_demand + t * train).then_some(room)
    }

    /// Counts an arrival toward the tier's population: whether it may use spot.
    pub(super) fn note_arrival(&mut self, place: &PlaceJob, epsilon: f64) {
        if self.arrivals.len() == ARRIVAL_WINDOW {
            self.arrivals.pop_front();
        }
        let may = self.may_use_spot(place, epsilon).is_some();
        self.arrivals.push_back(may);
    }

    /// Whether enough recent arrivals may use spot for a new spot group to find partners.
    fn populous(&self) -> bool {
        let may = self.arrivals.iter().filter(|&&m| m).count();
        may as f64 >= POPULOUS_TIER * self.arrivals.len() as f64
    }

    /// Puts `place` on the tier its first admission chose (`spot`), with the same room.
    pub(super) fn keep_tier(&self, place: &mut PlaceJob, spot: bool, epsilon: f64) {
        if spot {
            if !self.all_jobs {
                place.slo -= self.room(place, epsilon);
            }
            place.spot = true;
        }
    }

    /// The share of the job's solo life its SLO must leave for preemption delays.
    fn room(&self, place: &PlaceJob, epsilon: f64) -> f64 {
        let solo_life = Micros(place.solo().0.saturating_mul(place.variation.iterations.max(1)));
        let life = solo_life.scale(place.slo);
        self.model.life_overhead(place.times.rollout, place.rollout_width, life, solo_life, epsilon)
    }

    /// The first preemption event: the trace's first, or a draw from the rate.
    fn next_wait(&mut self, spot_nodes: u32) -> Micros {
        exp_wait(self.model.rate_per_node_hour * spot_nodes.max(1) as f64, &mut self.rng)
    }
}

impl Engine<'_> {
    /// Counts job `i`'s arrival toward the spot tier's population, if the run has one.
    pub(super) fn note_spot_arrival(&mut self, i: usize) {
        if self.spot.is_none() {
            return;
        }
        let mut place = self.jobs[i].place.clone();
        place.variation = self.variations[i].clone();
        let epsilon = self.cfg.slo_epsilon;
        self.spot.as_mut().expect("spot run").note_arrival(&place, epsilon);
    }

    /// Schedules the first preemption, if the run has a spot tier.
    pub(super) fn start_spot(&mut self) {
        let Some(spot) = self.spot.as_mut() else { return };
        if let Some(first) = spot.trace.first() {
            let at = first.at;
            self.push(at, CLASS_OTHER, 0, What::SpotTrace, 0);
        } else if spot.model.rate_per_node_hour > 0.0 {
            // (With a trace the rate above is admission's estimate only.)
            let wait = spot.next_wait(1);
            self.push(wait, CLASS_OTHER, 0, What::SpotPreemption, 0);
        }
    }

    /// A preemption drawn from the rate: a random held spot rollout node is taken.
    pub(super) fn spot_preemption(&mut self) {
        let nodes = self.spot_nodes();
        let Some(spot) = self.spot.as_mut() else { return };
        if !nodes.is_empty() {
            let k = rand::Rng::random_range(&mut spot.rng, 0..nodes.len());
            let (g, block) = nodes[k];
            self.take_spot_node(g, block);
        }
        let held = self.spot_nodes().len() as u32;
        let spot = self.spot.as_mut().expect("spot run");
        let wait = spot.next_wait(held);
        if self.work_left() {
            self.push(self.now + wait, CLASS_OTHER, 0, What::SpotPreemption, 0);
        }
    }

    /// The trace's preemption number `k`: its node is taken if a spot group holds it.
    pub(super) fn spot_trace(&mut self, k: u64) {
        let Some(spot) = self.spot.as_ref() else { return };
        let Some(p) = spot.trace.get(k as usize).copied() else { return };
        let node = NodeId { pool: Pool::Rollout, index: p.node };
        let holder = self
            .placer
            .groups()
            .filter(|g| g.spot())
            .find_map(|g| g.blocks.iter().find(|b| b.nodes.contains(&node)).map(|b| (g.id, b.id)));
        match holder {
            Some((g, block)) => self.take_spot_node(g, block),
            None => self.spot.as_mut().expect("spot run").counts.unheld += 1,
        }
        let next = self.spot.as_ref().and_then(|s| s.trace.get(k as usize + 1)).map(|p| p.at);
        if let (Some(at), true) = (next, self.work_left()) {
            self.push(at.max(self.now), CLASS_OTHER, 0, What::SpotTrace, k + 1);
        }
    }

    /// Every held spot rollout node, as (group, block), in placement order.
    fn spot_nodes(&self) -> Vec<(GroupId, u32)> {
        self.placer
            .groups()
            .filter(|g| g.spot())
            .flat_map(|g| g.blocks.iter().flat_map(move |b| b.nodes.iter().map(move |_| (g.id, b.id))))
            .collect()
    }

    /// A node of block `block` of group `g` is taken now: the rollout in flight there is
    /// delayed by its recovery, and the block is a node short until the replacement arrives.
    fn take_spot_node(&mut self, g: GroupId, block: u32) {
        let Some(group) = self.placer.group(g) else { return };
        let nodes = group.block(block).map_or(1, |b| b.nodes.len() as u32);
        let rolling: Vec<usize> = group
            .members
            .iter()
            .filter(|m| m.block == block)
            .map(|m| m.job.id.0 as usize)
            .filter(|&i| self.states[i].as_ref().is_some_and(|s| s.rolling))
            .collect();
        let gpus = nodes * self.gpus().0;
        let spot = self.spot.as_mut().expect("spot run");
        spot.counts.preemptions += 1;
        let gap = spot.model.gap();
        if gap > Micros::ZERO {
            spot.missing.entry((g, block)).or_default().push(self.now + gap);
        }
        if rolling.is_empty() {
            spot.counts.idle += 1;
        }
        for i in rolling {
            let s = self.states[i].as_mut().expect("rolling job");
            let end = s.rollout_started + s.rollout_plain + s.rollout_extra;
            let (elapsed, remaining) = (self.now.saturating_sub(s.rollout_started), end.saturating_sub(self.now));
            let r = spot.model.recover(spot.recovery, elapsed, remaining, nodes);
            s.rollout_extra += r.delay;
            if r.moved {
                spot.counts.moved += 1;
            } else {
                spot.counts.restarted += 1;
            }
            spot.counts.delay(r.delay, gpus);
        }
    }

    /// What a rollout of `d` starting now on block `block` of `g` loses to its missing nodes.
    pub(super) fn spot_shortage(&mut self, g: GroupId, block: u32, nodes: u32, d: Micros) -> Micros {
        let now = self.now;
        let gpus = nodes * self.gpus().0;
        let Some(spot) = self.spot.as_mut() else { return Micros::ZERO };
        let Some(ends) = spot.missing.get_mut(&(g, block)) else { return Micros::ZERO };
        ends.retain(|&e| e > now);
        let delay = ends.iter().map(|&e| short_delay(d, nodes, e.saturating_sub(now))).fold(Micros::ZERO, |a, b| a + b);
        if ends.is_empty() {
            spot.missing.remove(&(g, block));
        }
        if delay > Micros::ZERO {
            spot.counts.shortages += 1;
            spot.counts.delay(delay, gpus);
        }
        delay
    }

    /// A rollout end (or its migration point) came due with preemption delay still owed: it is
    /// put off by that much. True if it was.
    pub(super) fn owes_spot_delay(&mut self, i: usize, what: What, iteration: u64) -> bool {
        let Some(s) = self.states[i].as_mut() else { return false };
        if s.rollout_extra == Micros::ZERO {
            return false;
        }
        let extra = std::mem::replace(&mut s.rollout_extra, Micros::ZERO);
        // The rollout runs later by that much: the long-tail end is computed from its start.
        s.rollout_started += extra;
        self.push(self.now + extra, 1, i, what, iteration);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{prepare, SimConfig};
    use proptest::prelude::*;
    use weave_core::ClusterConfig;
    use weave_model::ProfileModel;
    use weave_trace::{generate, GenConfig};

    /// Twenty jobs of the built-in workload, prepared once.
    fn jobs() -> &'static [crate::workload::SimJob] {
        static JOBS: std::sync::OnceLock<Vec<crate::workload::SimJob>> = std::sync::OnceLock::new();
        JOBS.get_or_init(|| {
            let profile = ProfileModel::builtin();
            let trace = generate::generate(&GenConfig { jobs: 20, ..GenConfig::default_workload() }, &profile);
            let cfg = SimConfig::default();
            prepare(&trace, &ClusterConfig::default(), &profile, cfg.slo, cfg.seed)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The per-job choice is monotone in the discount: the room does not depend on the
        /// price, and a deeper discount never takes away a job's option to use spot; where it
        /// has the option, its own nodes cost less on spot with the room.
        #[test]
        fn a_deeper_discount_never_takes_spot_away_from_a_job(
            shallow in 0.0f64..0.95, deeper in 0.0f64..0.95, rate in 0.0f64..2.0,
        ) {
            let (shallow, deeper) = (shallow.min(deeper), shallow.max(deeper));
            let cluster = ClusterConfig::default();
            let epsilon = SimConfig::default().slo_epsilon;
            let at = |d: f64| Spot::new(&SpotConfig::at_discount(&cluster.rollout, d, rate), &cluster, 1, true);
            let (a, b) = (at(shallow), at(deeper));
            for job in jobs() {
                let (x, y) = (a.may_use_spot(&job.place, epsilon), b.may_use_spot(&job.place, epsilon));
                prop_assert!(x.is_none() || x == y, "{shallow} -> {deeper}: {x:?} then {y:?}");
                if let Some(room) = y {
                    let (spot, on_demand, train) = b.prices;
                    let (r, t) = (job.place.rollout_width as f64, job.place.train_width as f64);
                    prop_assert!((r * spot + t * train) * (1.0 + room) < r * on_demand + t * train);
                }
            }
        }
    }
}
