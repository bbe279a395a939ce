//! Max-plus timing of a cyclic schedule: the exact steady-state period of a group whose
//! resources serve their members in a fixed order, round after round.
//!
//! A group run by the dispatcher under fixed orders is a timed event graph. Its events are
//! "member j acquires its rollout nodes" (`R_j`) and "member j acquires the training pool"
//! (`T_j`), once per iteration. An arc `u -> v` with weight `w` and `k` tokens says event `v`
//! of round `n` happens no earlier than `w` after event `u` of round `n - k`:
//!
//! - `R_j -> T_j`, weight rollout switch + rollout, 0 tokens (the barrier);
//! - `T_j -> R_j`, weight training switch + training + sync, 1 token (the next rollout needs
//!   the synced weights);
//! - on every resource with order `p_0 .. p_m`: `p_i -> p_(i+1)` weighted by `p_i`'s
//!   occupation, 0 tokens, and `p_m -> p_0`, 1 token (the next round).
//!
//! Events fire as early as their arcs allow (the dispatcher never idles a resource whose due
//! member is ready), so the schedule is the max-plus recurrence `x(n) = A0 x(n) + A1 x(n-1)`
//! and its period is the graph's maximum cycle mean (weight over tokens) [Baccelli et al.,
//! Synchronization and Linearity, Thm 3.23], computed here exactly with Karp's algorithm on
//! `A0* A1`. A cycle without tokens is a deadlock: those orders are never chosen.

use std::cmp::Ordering;

/// A period as an exact fraction: `total` microseconds per `rounds` rounds.
#[derive(Clone, Copy, Debug, Eq)]
pub struct Period {
    pub total: u64,
    pub rounds: u64,
}

impl Period {
    pub fn new(total: u64, rounds: u64) -> Period {
        Period { total, rounds: rounds.max(1) }
    }

    /// Microseconds per round, rounded up (a prediction never undershoots).
    pub fn ceil_micros(self) -> u64 {
        self.total.div_ceil(self.rounds)
    }
}

impl PartialEq for Period {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Ord for Period {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.total as u128 * other.rounds as u128).cmp(&(other.total as u128 * self.rounds as u128))
    }
}

impl PartialOrd for Period {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One arc of a timed event graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arc {
    pub from: usize,
    pub to: usize,
    pub weight: u64,
    pub tokens: u32,
}

const NONE: i64 = i64::MIN;

/// Buffers [`max_cycle_mean_in`] reuses from one graph to the next (an order search evaluates
/// thousands of graphs of one size; allocating them each time cost as much as the arithmetic).
#[derive(Default)]
pub struct Scratch {
    zero: Vec<(usize, usize, i64)>,
    one: Vec<(usize, usize, i64)>,
    /// Longest zero-token paths, all pairs.
    paths: Vec<i64>,
    /// One round's longest ways, all pairs.
    round: Vec<i64>,
    /// Karp's table.
    walks: Vec<i64>,
    /// [`mean_below_in`]'s arcs weighed against its bound, and its longest paths (in i64 when
    /// they fit, else in i128).
    narrow: Vec<(usize, usize, i64)>,
    narrow_dist: Vec<i64>,
    wide: Vec<(usize, usize, i128)>,
    wide_dist: Vec<i128>,
}

/// The maximum cycle mean of an event graph on `events` events, or `None` if a cycle carries
/// no token (a deadlock) or the graph has no cycle. Arcs with more than one token are split
/// into chains of one-token arcs through extra events.
pub fn max_cycle_mean(events: usize, arcs: &[Arc]) -> Option<Period> {
    max_cycle_mean_in(&mut Scratch::default(), events, arcs)
}

/// [`max_cycle_mean`] in a caller's buffers.
pub fn max_cycle_mean_in(s: &mut Scratch, events: usize, arcs: &[Arc]) -> Option<Period> {
    let n = split(events, arcs, &mut s.zero, &mut s.one);
    if !longest_zero_token_paths(n, &s.zero, &mut s.paths) {
        return None;
    }
    // round[u][v]: the longest way from u in round n-1 to v in round n (one token, then any
    // zero-token path).
    let (closure, m) = (&s.paths, &mut s.round);
    m.clear();
    m.resize(n * n, NONE);
    for &(u, w, weight) in &s.one {
        let (from_w, to_u) = (&closure[w * n..(w + 1) * n], &mut m[u * n..(u + 1) * n]);
        for (best, &p) in to_u.iter_mut().zip(from_w) {
            if p != NONE && weight + p > *best {
                *best = weight + p;
            }
        }
    }
    karp(n, m, &mut s.walks)
}

/// Whether every cycle of the event graph carries tokens and weighs less than `bound` per
/// token: the same as `max_cycle_mean(events, arcs)` being `None` for want of a cycle or below
/// `bound`, and `false` for a deadlock. A search asks this of every order it tries and needs
/// the exact period only of those that beat the best so far: a longest-path pass (Bellman-Ford)
/// over the arcs as given, no closure, no chains, a fraction of Karp's cubic cost.
///
/// With `bound = total / rounds`, a cycle of weight `W` and `K` tokens is at or above it iff
/// `W * rounds - total * K >= 0`. Scaling each arc's `weight * rounds - total * tokens` by
/// `events + 1` and adding 1 keeps every such cycle's sum positive (it has at most `events`
/// arcs) and makes every cycle below it negative, so a cycle at or above the bound, a
/// token-free one included, is exactly a positive cycle.
pub fn mean_below_in(s: &mut Scratch, events: usize, arcs: &[Arc], bound: Period) -> bool {
    let scale = events as i128 + 1;
    let (rounds, total) = (bound.rounds as i128, bound.total as i128);
    s.wide.clear();
    s.wide.extend(
        arcs.iter().map(|a| (a.from, a.to, (a.weight as i128 * rounds - total * a.tokens as i128) * scale + 1)),
    );
    // Bellman-Ford's sums stay in i64 (the usual case, half the work of i128) if no arc
    // exceeds i64 over the most arcs its passes can add up.
    let limit = i64::MAX as i128 / ((events as i128 + 2) * (arcs.len() as i128 + 1));
    if s.wide.iter().all(|&(_, _, w)| w.abs() <= limit) {
        s.narrow.clear();
        s.narrow.extend(s.wide.iter().map(|&(from, to, w)| (from, to, w as i64)));
        no_positive_cycle(events, &s.narrow, &mut s.narrow_dist)
    } else {
        no_positive_cycle(events, &s.wide, &mut s.wide_dist)
    }
}

/// Bellman-Ford from a virtual source to every event at 0: without a positive cycle the
/// longest paths settle within `events` passes; with one they never do.
fn no_positive_cycle<W>(events: usize, arcs: &[(usize, usize, W)], dist: &mut Vec<W>) -> bool
where
    W: Copy + Ord + Default + std::ops::Add<Output = W>,
{
    dist.clear();
    dist.resize(events, W::default());
    for _ in 0..=events {
        let mut changed = false;
        for &(from, to, weight) in arcs {
            let through = dist[from] + weight;
            if through > dist[to] {
                dist[to] = through;
                changed = true;
            }
        }
        if !changed {
            return true;
        }
    }
    false
}

/// Zero-token and one-token arcs as (from, to, weight) into `zero` and `one`, multi-token arcs
/// split into chains; returns the number of events with the chains' extra ones.
fn split(
    events: usize,
    arcs: &[Arc],
    zero: &mut Vec<(usize, usize, i64)>,
    one: &mut Vec<(usize, usize, i64)>,
) -> usize {
    zero.clear();
    one.clear();
    let mut n = events;
    for a in arcs {
        let w = a.weight as i64;
        match a.tokens {
            0 => zero.push((a.from, a.to, w)),
            1 => one.push((a.from, a.to, w)),
            k => {
                // from -(w, 1)-> x1 -(0, 1)-> x2 ... -> to
                let mut prev = a.from;
                for i in 0..k {
                    let next = if i + 1 == k { a.to } else { n };
                    if next == n {
                        n += 1;
                    }
                    one.push((prev, next, if i == 0 { w } else { 0 }));
                    prev = next;
                }
            }
        }
    }
    n
}

/// All-pairs longest paths over zero-token arcs into `p` (each event reaches itself with 0);
/// false if those arcs close a cycle.
fn longest_zero_token_paths(n: usize, zero: &[(usize, usize, i64)], p: &mut Vec<i64>) -> bool {
    p.clear();
    p.resize(n * n, NONE);
    for &(u, v, w) in zero {
        if u == v {
            return false;
        }
        p[u * n + v] = p[u * n + v].max(w);
    }
    for k in 0..n {
        // Row k itself is skipped: through k it only changes if k is on a cycle, and then its
        // diagonal already shows it.
        for i in (0..n).filter(|&i| i != k) {
            let ik = p[i * n + k];
            if ik == NONE {
                continue;
            }
            let (row_i, row_k) = two_rows(p, n, i, k);
            for (best, &kj) in row_i.iter_mut().zip(row_k) {
                if kj != NONE && ik + kj > *best {
                    *best = ik + kj;
                }
            }
        }
    }
    if (0..n).any(|v| p[v * n + v] != NONE) {
        return false;
    }
    for v in 0..n {
        p[v * n + v] = 0;
    }
    true
}

/// Row `i` of the `n`-wide matrix `p` to change and row `k` to read (`i != k`).
fn two_rows(p: &mut [i64], n: usize, i: usize, k: usize) -> (&mut [i64], &[i64]) {
    if i < k {
        let (a, b) = p.split_at_mut(k * n);
        (&mut a[i * n..(i + 1) * n], &b[..n])
    } else {
        let (a, b) = p.split_at_mut(i * n);
        (&mut b[..n], &a[k * n..(k + 1) * n])
    }
}

/// Karp's maximum cycle mean of the dense max-plus matrix `m` (`m[u * n + v]`, arc u -> v).
fn karp(n: usize, m: &[i64], d: &mut Vec<i64>) -> Option<Period> {
    // d[k * n + v]: the heaviest walk of exactly k arcs ending at v, from anywhere.
    d.clear();
    d.resize((n + 1) * n, NONE);
    d[..n].fill(0);
    for k in 1..=n {
        let (done, next) = d.split_at_mut(k * n);
        let (prev, next) = (&done[(k - 1) * n..], &mut next[..n]);
        for (u, &du) in prev.iter().enumerate() {
            if du == NONE {
                continue;
            }
            for (best, &w) in next.iter_mut().zip(&m[u * n..(u + 1) * n]) {
                if w != NONE && du + w > *best {
                    *best = du + w;
                }
            }
        }
    }
    let mut best: Option<Period> = None;
    for v in 0..n {
        let dn = d[n * n + v];
        if dn == NONE {
            continue;
        }
        // min over k of (d_n - d_k) / (n - k)
        let mut worst: Option<Period> = None;
        for k in 0..n {
            let dk = d[k * n + v];
            if dk == NONE {
                continue;
            }
            let p = Period::new((dn - dk).max(0) as u64, (n - k) as u64);
            worst = Some(worst.map_or(p, |w| w.min(p)));
        }
        if let Some(w) = worst {
            best = Some(best.map_or(w, |b| b.max(w)));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arc(from: usize, to: usize, weight: u64, tokens: u32) -> Arc {
        Arc { from, to, weight, tokens }
    }

    #[test]
    fn a_single_loop_is_its_weight_over_its_tokens() {
        assert_eq!(max_cycle_mean(1, &[arc(0, 0, 7, 1)]), Some(Period::new(7, 1)));
        assert_eq!(max_cycle_mean(2, &[arc(0, 1, 3, 0), arc(1, 0, 4, 2)]), Some(Period::new(7, 2)));
    }

    #[test]
    fn the_heaviest_cycle_per_token_wins() {
        // cycle a: 0 <-> 1, 10 per 1 token; cycle b: 1 <-> 2, 9 per 1 token... plus 0 -> 2.
        let arcs = [arc(0, 1, 4, 0), arc(1, 0, 6, 1), arc(1, 2, 5, 0), arc(2, 1, 7, 1), arc(0, 2, 1, 1)];
        assert_eq!(max_cycle_mean(3, &arcs), Some(Period::new(12, 1)));
    }

    #[test]
    fn a_cycle_without_tokens_is_a_deadlock() {
        assert_eq!(max_cycle_mean(2, &[arc(0, 1, 1, 0), arc(1, 0, 1, 0)]), None);
        assert_eq!(max_cycle_mean(1, &[arc(0, 0, 1, 0)]), None);
    }

    /// The search's shortcut answers exactly what comparing Karp's period would: on random
    /// graphs (deadlocks, multi-token arcs and bounds equal to the period itself included).
    #[test]
    fn mean_below_agrees_with_the_exact_period() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut draw = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let (mut below, mut not_below, mut deadlocks, mut scratch) = (0, 0, 0, Scratch::default());
        for _ in 0..3000 {
            let events = 1 + draw(6) as usize;
            // Some graphs weigh too much for the shortcut's i64 sums (its i128 path).
            let unit = if draw(8) == 0 { 1_000_000_000_000_000 } else { 1 };
            let arcs: Vec<Arc> = (0..1 + draw(12))
                .map(|_| {
                    let (from, to) = (draw(events as u64) as usize, draw(events as u64) as usize);
                    arc(from, to, draw(20) * unit, draw(4) as u32)
                })
                .collect();
            let exact = max_cycle_mean(events, &arcs);
            deadlocks += usize::from(exact.is_none());
            let bounds = [Period::new((1 + draw(40)) * unit, 1 + draw(3)), exact.unwrap_or(Period::new(5, 1))];
            for bound in bounds {
                let expected = match exact {
                    Some(p) => p < bound,
                    // No period: a deadlock, or no cycle at all.
                    None => !has_cycle(events, &arcs),
                };
                let got = mean_below_in(&mut scratch, events, &arcs, bound);
                assert_eq!(got, expected, "{events} events, {arcs:?}, bound {bound:?}, exact {exact:?}");
                if got {
                    below += 1;
                } else {
                    not_below += 1;
                }
            }
        }
        assert!(below > 500 && not_below > 500 && deadlocks > 100, "{below} {not_below} {deadlocks}");
    }

    fn has_cycle(events: usize, arcs: &[Arc]) -> bool {
        let mut reach = vec![false; events * events];
        for a in arcs {
            reach[a.from * events + a.to] = true;
        }
        for k in 0..events {
            for i in 0..events {
                for j in 0..events {
                    if reach[i * events + k] && reach[k * events + j] {
                        reach[i * events + j] = true;
                    }
                }
            }
        }
        (0..events).any(|v| reach[v * events + v])
    }

    #[test]
    fn periods_compare_as_fractions() {
        assert_eq!(Period::new(6, 2), Period::new(3, 1));
        assert!(Period::new(7, 2) < Period::new(4, 1));
        assert_eq!(Period::new(7, 2).ceil_micros(), 4);
    }
}
