//! The cyclic order a group's resources serve their members in, and the order that makes the
//! group's period shortest.
//!
//! Every resource (the training pool, each rollout node) serves each of its members once per
//! round, in a fixed order (the round-robin of [`crate::Dispatcher`] with the ties broken by
//! this order). Rollout nodes used by the same members form one class with one order (two
//! nodes of a class in opposite orders would deadlock the members that need both). The
//! period of every order is exact ([`crate::cycle`]); [`best`] searches the orders.

use crate::cycle::{max_cycle_mean_in, mean_below_in, Arc, Period, Scratch};
use crate::load::{bounds, memo_key, overheads, TimingMember, MEMO_LIMIT};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weave_core::{JobId, Micros};

/// Round order of each resource of a group, by job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOrder {
    pub train: Vec<JobId>,
    pub rollout: BTreeMap<u32, Vec<JobId>>,
}

/// Candidate orders [`best`] tries at most exhaustively; larger groups search orders that
/// follow one ranking of the members on every resource, then improve by swaps.
pub const EXACT_CANDIDATES: usize = 20_000;

/// Orders by member index: the training pool's, and one per class of rollout nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct IndexOrder {
    train: Vec<usize>,
    classes: Vec<Vec<usize>>,
}

/// Rollout nodes grouped by the members that use them (members by index, ascending).
fn node_classes(members: &[TimingMember]) -> Vec<(Vec<usize>, Vec<u32>)> {
    let mut by_node: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (j, m) in members.iter().enumerate() {
        for &n in &m.nodes {
            by_node.entry(n).or_default().push(j);
        }
    }
    let mut classes: BTreeMap<Vec<usize>, Vec<u32>> = BTreeMap::new();
    for (n, users) in by_node {
        classes.entry(users).or_default().push(n);
    }
    classes.into_iter().collect()
}

/// What every order of one group shares: the members' own arcs and what each occupies a
/// resource for (computed once per search, not once per order tried).
struct Frame {
    events: usize,
    own: Vec<Arc>,
    roll_occ: Vec<u64>,
    train_occ: Vec<u64>,
}

impl Frame {
    /// Event `2j` is member j's rollout start, `2j+1` its training start.
    fn new(members: &[TimingMember]) -> Frame {
        let (roll_sw, train_sw) = overheads(members);
        let roll_occ: Vec<u64> = members.iter().zip(&roll_sw).map(|(m, &sw)| (m.rollout + sw).0).collect();
        let train_occ: Vec<u64> = members.iter().zip(&train_sw).map(|(m, &sw)| (m.train + sw).0).collect();
        let mut own = Vec::with_capacity(members.len() * 4);
        for (j, m) in members.iter().enumerate() {
            // Training n needs rollout n; rollout n needs training n - k - 1 and its sync.
            let lag = m.staleness + 1;
            let (roll, train) = (roll_occ[j], train_occ[j] + m.sync.0);
            own.push(Arc { from: 2 * j, to: 2 * j + 1, weight: roll, tokens: 0 });
            own.push(Arc { from: 2 * j + 1, to: 2 * j, weight: train, tokens: lag });
            if m.staleness > 0 {
                // Each lane runs one phase at a time (at k = 0 the barrier already implies it).
                own.push(Arc { from: 2 * j, to: 2 * j, weight: roll, tokens: 1 });
                own.push(Arc { from: 2 * j + 1, to: 2 * j + 1, weight: train, tokens: 1 });
            }
        }
        Frame { events: 2 * members.len(), own, roll_occ, train_occ }
    }

    /// The event graph under `order`: the members' own arcs and one ring per resource.
    fn arcs_into(&self, order: &IndexOrder, arcs: &mut Vec<Arc>) {
        arcs.clear();
        arcs.extend_from_slice(&self.own);
        ring(&order.train, |j| 2 * j + 1, |j| self.train_occ[j], arcs);
        for class in &order.classes {
            ring(class, |j| 2 * j, |j| self.roll_occ[j], arcs);
        }
    }
}

/// Evaluates orders of one group, reusing its buffers.
struct Evaluator {
    frame: Frame,
    arcs: Vec<Arc>,
    scratch: Scratch,
}

impl Evaluator {
    fn new(members: &[TimingMember]) -> Evaluator {
        Evaluator { frame: Frame::new(members), arcs: Vec::new(), scratch: Scratch::default() }
    }

    fn period(&mut self, order: &IndexOrder) -> Option<Period> {
        self.frame.arcs_into(order, &mut self.arcs);
        max_cycle_mean_in(&mut self.scratch, self.frame.events, &self.arcs)
    }

    /// Whether `order` runs without deadlock at a period below `bound` (the search's question
    /// for most orders, answered without computing the period).
    fn beats(&mut self, order: &IndexOrder, bound: Period) -> bool {
        self.frame.arcs_into(order, &mut self.arcs);
        mean_below_in(&mut self.scratch, self.frame.events, &self.arcs, bound)
    }
}

/// A resource's round: each member hands over to the next, the last to the first of the next
/// round.
fn ring(order: &[usize], event: impl Fn(usize) -> usize, occupation: impl Fn(usize) -> u64, arcs: &mut Vec<Arc>) {
    for (i, &j) in order.iter().enumerate() {
        let (next, tokens) = if i + 1 < order.len() { (order[i + 1], 0) } else { (order[0], 1) };
        arcs.push(Arc { from: event(j), to: event(next), weight: occupation(j), tokens });
    }
}

fn period(members: &[TimingMember], order: &IndexOrder) -> Option<Period> {
    Evaluator::new(members).period(order)
}

/// The exact steady-state period of `members` under `order`, or `None` if the order
/// deadlocks or does not cover every member on every resource it uses.
pub fn period_of(members: &[TimingMember], order: &GroupOrder) -> Option<Period> {
    period(members, &to_index(members, order)?)
}

fn to_index(members: &[TimingMember], order: &GroupOrder) -> Option<IndexOrder> {
    let index: BTreeMap<JobId, usize> = members.iter().enumerate().map(|(j, m)| (m.job, j)).collect();
    let indices = |jobs: &[JobId]| jobs.iter().map(|j| index.get(j).copied()).collect::<Option<Vec<usize>>>();
    let train = indices(&order.train)?;
    let mut classes = Vec::new();
    for (users, nodes) in node_classes(members) {
        let o = indices(order.rollout.get(&nodes[0])?)?;
        if nodes[1..].iter().any(|n| order.rollout.get(n) != order.rollout.get(&nodes[0])) || !same_set(&o, &users) {
            return None;
        }
        classes.push(o);
    }
    let all: Vec<usize> = (0..members.len()).collect();
    same_set(&train, &all).then_some(IndexOrder { train, classes })
}

/// Whether `order` lists exactly the members of `set` (ascending), each once.
fn same_set(order: &[usize], set: &[usize]) -> bool {
    let mut sorted = order.to_vec();
    sorted.sort_unstable();
    sorted == set
}

fn to_jobs(members: &[TimingMember], classes: &[(Vec<usize>, Vec<u32>)], order: &IndexOrder) -> GroupOrder {
    let jobs = |v: &[usize]| v.iter().map(|&j| members[j].job).collect::<Vec<_>>();
    let mut rollout = BTreeMap::new();
    for ((_, nodes), o) in classes.iter().zip(&order.classes) {
        for &n in nodes {
            rollout.insert(n, jobs(o));
        }
    }
    GroupOrder { train: jobs(&order.train), rollout }
}

/// The orders with the shortest period, and that period. Ties go to the first order found,
/// starting from the order first-come round-robin starts with. Exhaustive over all orders when
/// there are at most [`EXACT_CANDIDATES`]; it stops early at an order reaching the lower bound
/// `max(T_cycle, T_load)` that no schedule beats.
///
/// Memoised per thread: the result depends only on the members' timing views in their listed
/// order (admission and consolidation ask about the same group shapes over and over).
pub fn best(members: &[TimingMember]) -> (GroupOrder, Period) {
    let classes = node_classes(members);
    let key = memo_key(members, 0);
    if let Some((order, p)) = BEST.with(|m| m.borrow().get(&key).cloned()) {
        return (to_jobs(members, &classes, &order), p);
    }
    let (order, p) = search(members, &classes);
    BEST.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MEMO_LIMIT {
            m.clear();
        }
        m.insert(key, (order.clone(), p));
    });
    (to_jobs(members, &classes, &order), p)
}

/// [`best`] without the memo (benchmarks time the search itself).
pub fn best_uncached(members: &[TimingMember]) -> (GroupOrder, Period) {
    let classes = node_classes(members);
    let (order, p) = search(members, &classes);
    (to_jobs(members, &classes, &order), p)
}

thread_local! {
    static BEST: std::cell::RefCell<std::collections::HashMap<Vec<u64>, (IndexOrder, Period)>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn search(members: &[TimingMember], classes: &[(Vec<usize>, Vec<u32>)]) -> (IndexOrder, Period) {
    if members.is_empty() {
        return (IndexOrder { train: Vec::new(), classes: Vec::new() }, Period::new(0, 1));
    }
    let (t_cycle, t_load) = bounds(members);
    let floor = Period::new(t_cycle.max(t_load).0, 1);
    let mut search = Search { eval: Evaluator::new(members), floor, best: None };
    let sizes: Vec<usize> =
        std::iter::once(members.len()).chain(classes.iter().map(|(users, _)| users.len())).collect();
    let candidates = sizes.iter().try_fold(1usize, |acc, &k| acc.checked_mul(factorial(k)));
    let start =
        IndexOrder { train: first_rollout_ends(members), classes: classes.iter().map(|c| c.0.clone()).collect() };
    if candidates.is_some_and(|c| c <= EXACT_CANDIDATES) {
        search.exhaustive(start);
    } else {
        search.ranked_then_swaps(start);
    }
    search.best.expect("orders that follow one ranking never deadlock")
}

/// Members in the order their first rollouts end when every node serves them as listed,
/// starting cold: the order first-come round-robin starts training in. Searches start there,
/// so among orders with the same period the group starts without idling.
fn first_rollout_ends(members: &[TimingMember]) -> Vec<usize> {
    let mut free: BTreeMap<u32, Micros> = BTreeMap::new();
    let mut ends = Vec::with_capacity(members.len());
    for (j, m) in members.iter().enumerate() {
        let start =
            m.nodes.iter().map(|n| free.get(n).copied().unwrap_or(Micros::ZERO)).fold(Micros::ZERO, Micros::max);
        let end = start + m.costs.rollout_cold + m.rollout;
        for &n in &m.nodes {
            free.insert(n, end);
        }
        ends.push((end, j));
    }
    ends.sort();
    ends.into_iter().map(|(_, j)| j).collect()
}

fn factorial(k: usize) -> usize {
    (1..=k).try_fold(1usize, |a, b| a.checked_mul(b)).unwrap_or(usize::MAX)
}

struct Search {
    eval: Evaluator,
    floor: Period,
    best: Option<(IndexOrder, Period)>,
}

impl Search {
    /// Records `order` if it beats the best so far; true once the floor is reached.
    fn try_order(&mut self, order: &IndexOrder) -> bool {
        let best = self.best.as_ref().map(|&(_, p)| p);
        if best.is_some_and(|b| !self.eval.beats(order, b)) {
            return false;
        }
        if let Some(p) = self.eval.period(order) {
            if self.best.as_ref().is_none_or(|(_, b)| p < *b) {
                self.best = Some((order.clone(), p));
            }
        }
        self.best.as_ref().is_some_and(|(_, b)| *b <= self.floor)
    }

    /// Every combination of a training order and one order per node class, starting from
    /// `start` (permutations of positions in `start`'s lists, the last resource's fastest, so
    /// every one is visited in the order an odometer would). Branch and bound: once the first
    /// resources' orders are fixed, the graph of those rings alone bounds every completion from
    /// below (more arcs never shorten a cycle), so a prefix whose bound does not beat the best
    /// so far, or that already deadlocks, is skipped whole. Only orders that could not have
    /// become the best are skipped: the result is the plain enumeration's.
    fn exhaustive(&mut self, start: IndexOrder) {
        let bases: Vec<Vec<usize>> = std::iter::once(start.train.clone()).chain(start.classes.clone()).collect();
        let mut lists = bases.clone();
        self.branch(&bases, &mut lists, 0);
    }

    /// Tries every order of resource `r` and, for each, the resources after it; true once the
    /// floor is reached (the search ends).
    fn branch(&mut self, bases: &[Vec<usize>], lists: &mut [Vec<usize>], r: usize) -> bool {
        let mut positions: Vec<usize> = (0..bases[r].len()).collect();
        loop {
            for (slot, &p) in lists[r].iter_mut().zip(&positions) {
                *slot = bases[r][p];
            }
            let last = r + 1 == lists.len();
            let order = IndexOrder { train: lists[0].clone(), classes: lists[1..].to_vec() };
            if last {
                if self.try_order(&order) {
                    return true;
                }
            } else if self.may_beat_best(&order, r + 1) && self.branch(bases, lists, r + 1) {
                return true;
            }
            if !next_permutation(&mut positions) {
                return false;
            }
        }
    }

    /// Whether some completion of `order`'s first `fixed` resources could beat the best so far.
    fn may_beat_best(&mut self, order: &IndexOrder, fixed: usize) -> bool {
        let Some(best) = self.best.as_ref().map(|&(_, p)| p) else { return true };
        let partial = IndexOrder { train: order.train.clone(), classes: order.classes[..fixed - 1].to_vec() };
        self.eval.beats(&partial, best)
    }

    /// Orders that follow one ranking of the members everywhere (never a deadlock), then
    /// swaps of neighbours on one resource while they help.
    fn ranked_then_swaps(&mut self, start: IndexOrder) {
        let mut rank: Vec<usize> = start.train.clone();
        let mut tried = 0;
        loop {
            let order = ranked(&rank, &start.classes);
            if self.try_order(&order) {
                return;
            }
            tried += 1;
            if tried >= EXACT_CANDIDATES || !next_permutation(&mut rank) {
                break;
            }
        }
        let mut improved = true;
        while improved {
            improved = false;
            let Some((current, p)) = self.best.clone() else { return };
            for r in 0..=current.classes.len() {
                let len = if r == 0 { current.train.len() } else { current.classes[r - 1].len() };
                for i in 0..len.saturating_sub(1) {
                    let mut o = current.clone();
                    let perm = if r == 0 { &mut o.train } else { &mut o.classes[r - 1] };
                    perm.swap(i, i + 1);
                    if self.try_order(&o) {
                        return;
                    }
                    if self.best.as_ref().is_some_and(|(_, b)| *b < p) {
                        improved = true;
                    }
                }
            }
        }
    }
}

/// Every resource serves its members in the order of `rank`.
fn ranked(rank: &[usize], classes: &[Vec<usize>]) -> IndexOrder {
    let pos: BTreeMap<usize, usize> = rank.iter().enumerate().map(|(p, &j)| (j, p)).collect();
    let classes = classes
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.sort_by_key(|j| pos[j]);
            c
        })
        .collect();
    IndexOrder { train: rank.to_vec(), classes }
}

/// Advances `v` to its next permutation in lexicographic order; false (and `v` sorted) after
/// the last.
fn next_permutation(v: &mut [usize]) -> bool {
    let n = v.len();
    if n < 2 {
        return false;
    }
    let mut i = n - 1;
    while i > 0 && v[i - 1] >= v[i] {
        i -= 1;
    }
    if i == 0 {
        v.reverse();
        return false;
    }
    let mut j = n - 1;
    while v[j] <= v[i - 1] {
        j -= 1;
    }
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// `period` in whole microseconds, rounded up.
pub fn micros(p: Period) -> Micros {
    Micros(p.ceil_micros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SwitchCosts;

    fn member(job: u32, roll: u64, train: u64, sync: u64, nodes: &[u32]) -> TimingMember {
        TimingMember {
            job: JobId(job),
            rollout: Micros::from_secs(roll),
            train: Micros::from_secs(train),
            nodes: nodes.to_vec(),
            costs: SwitchCosts::default(),
            sync: Micros::from_secs(sync),
            resident: true,
            staleness: 0,
        }
    }

    /// Every order, no bound: what the branch and bound must agree with.
    fn plain_enumeration(members: &[TimingMember]) -> (IndexOrder, Period) {
        let classes = node_classes(members);
        let start =
            IndexOrder { train: first_rollout_ends(members), classes: classes.iter().map(|c| c.0.clone()).collect() };
        let bases: Vec<Vec<usize>> = std::iter::once(start.train.clone()).chain(start.classes.clone()).collect();
        let mut positions: Vec<Vec<usize>> = bases.iter().map(|b| (0..b.len()).collect()).collect();
        let mut best: Option<(IndexOrder, Period)> = None;
        loop {
            let lists: Vec<Vec<usize>> =
                bases.iter().zip(&positions).map(|(b, pos)| pos.iter().map(|&p| b[p]).collect()).collect();
            let order = IndexOrder { train: lists[0].clone(), classes: lists[1..].to_vec() };
            if let Some(p) = period(members, &order) {
                if best.as_ref().is_none_or(|(_, b)| p < *b) {
                    best = Some((order, p));
                }
            }
            let mut r = positions.len();
            loop {
                if r == 0 {
                    return best.unwrap();
                }
                r -= 1;
                if next_permutation(&mut positions[r]) {
                    break;
                }
            }
        }
    }

    /// The bound only skips orders that could not have won: on random groups (shared and
    /// disjoint nodes, switch costs, syncs, staleness) the search finds the same order and
    /// period as trying every order (the first order, in the same sequence, that reaches the
    /// shortest period: where that is the floor, the search stops there).
    #[test]
    fn the_bounded_search_finds_what_trying_every_order_finds() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut draw = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let mut above_floor = 0;
        for _ in 0..400 {
            let size = 2 + draw(3) as u32;
            let members: Vec<TimingMember> = (0..size)
                .map(|j| {
                    let nodes: Vec<u32> = (0..2).filter(|_| draw(2) == 0).collect();
                    let mut m =
                        member(j, 1 + draw(9), 1 + draw(9), draw(7), if nodes.is_empty() { &[0] } else { &nodes });
                    m.costs.rollout_warm = Micros::from_secs(draw(2));
                    m.costs.train_warm = Micros::from_secs(draw(2));
                    m.staleness = (draw(4) == 0) as u32;
                    m
                })
                .collect();
            let classes = node_classes(&members);
            let (t_cycle, t_load) = bounds(&members);
            let floor = Period::new(t_cycle.max(t_load).0, 1);
            let (order, p) = search(&members, &classes);
            let (plain_order, plain_p) = plain_enumeration(&members);
            assert_eq!((&order, p), (&plain_order, plain_p), "{members:?}");
            above_floor += usize::from(p > floor);
        }
        assert!(above_floor > 0, "no group where the bound had to do the work");
    }

    #[test]
    fn permutations_run_through_all_orders_once() {
        let mut v = vec![0, 1, 2];
        let mut seen = vec![v.clone()];
        while next_permutation(&mut v) {
            seen.push(v.clone());
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(v, [0, 1, 2]);
    }

    /// The counterexample: greedy FIFO settles at 7 s; an order reaches T_cycle = 6 s.
    #[test]
    fn two_members_on_one_node_reach_t_cycle() {
        let g = [member(0, 3, 1, 0, &[0]), member(1, 1, 2, 3, &[0])];
        let (order, p) = best(&g);
        assert_eq!(p, Period::new(6_000_000, 1));
        assert_eq!(period_of(&g, &order), Some(p));
    }

    /// The memo tells groups apart by staleness: the same shape one-step off-policy is faster.
    #[test]
    fn the_memo_keeps_staleness_apart() {
        let on_policy = vec![member(0, 300, 100, 0, &[0]), member(1, 100, 200, 0, &[1])];
        let mut stale = on_policy.clone();
        stale[0].staleness = 1;
        let (_, slow) = best(&on_policy);
        let (_, fast) = best(&stale);
        assert_eq!((slow, fast), (best_uncached(&on_policy).1, best_uncached(&stale).1));
        assert!(fast < slow, "{fast:?} vs {slow:?}");
    }

    #[test]
    fn a_solo_member_runs_its_own_iteration() {
        let g = [member(0, 3, 1, 2, &[0, 1])];
        assert_eq!(best(&g).1, Period::new(6_000_000, 1));
    }

    #[test]
    fn opposite_orders_on_one_node_class_are_refused() {
        let g = [member(0, 3, 1, 0, &[0, 1]), member(1, 1, 2, 3, &[0, 1])];
        let mut order = best(&g).0;
        order.rollout.insert(1, vec![JobId(1), JobId(0)]);
        order.rollout.insert(0, vec![JobId(0), JobId(1)]);
        assert_eq!(period_of(&g, &order), None);
    }
}
