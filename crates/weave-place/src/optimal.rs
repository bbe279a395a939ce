//! The cheapest feasible grouping of a small set of jobs, exactly.
//!
//! The search space is the one the online placer works in: jobs are split into groups; each
//! group has a training pool (its width one of its members' training widths) and rollout
//! blocks (members of a block share all its nodes; a block's members have the same rollout
//! width). A grouping is feasible when every group fits host DRAM and meets every member's
//! SLO under the group timing model. Cost = hourly price of all nodes.
//!
//! Method: the cheapest configuration of every subset of jobs (enumerating its partitions
//! into blocks), then a dynamic programme over subsets for the cheapest cover by disjoint
//! groups. This is exact like branch-and-bound over set partitions, but bounded by
//! 3^n steps plus the per-subset work; subsets whose training load alone breaks an SLO, or
//! whose training state alone breaks DRAM, are pruned together with all their supersets
//! (adding members only makes both worse).

use crate::group::{predict_within_slo, Residency};
use crate::job::PlaceJob;
use serde::Serialize;
use weave_core::{Micros, Money};

/// Jobs the exact optimiser accepts (3^n grows fast).
pub const MAX_JOBS: usize = 12;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupPlan {
    /// Job indices (into the input) in the group.
    pub jobs: Vec<usize>,
    /// Block label per job (0-based, in order of first use).
    pub blocks: Vec<u32>,
    pub train_width: u32,
    pub cost_per_hour: Money,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub cost_per_hour: Money,
    pub groups: Vec<GroupPlan>,
}

#[derive(Clone, Copy, Debug)]
pub struct Prices {
    pub rollout_node: Money,
    pub train_node: Money,
}

/// The cheapest configuration of the jobs in `subset` as one group, if any is feasible.
pub fn best_group(jobs: &[PlaceJob], subset: &[usize], prices: Prices, res: &Residency) -> Option<GroupPlan> {
    let mut widths: Vec<u32> = subset.iter().map(|&i| jobs[i].train_width).collect();
    widths.sort_unstable();
    widths.dedup();
    let mut best: Option<GroupPlan> = None;
    for_each_partition(subset.len(), &mut |labels| {
        let Some(rollout_nodes) = blocks_valid(jobs, subset, labels, res) else { return };
        for &w in &widths {
            let cost = Money(prices.train_node.0 * w as i64 + prices.rollout_node.0 * rollout_nodes as i64);
            if best.as_ref().is_some_and(|b| b.cost_per_hour <= cost) {
                continue;
            }
            if group_feasible(jobs, subset, labels, w, res) {
                best = Some(GroupPlan {
                    jobs: subset.to_vec(),
                    blocks: labels.to_vec(),
                    train_width: w,
                    cost_per_hour: cost,
                });
            }
        }
    });
    best
}

/// Rollout nodes used if every block has members of one width and fits DRAM.
fn blocks_valid(jobs: &[PlaceJob], subset: &[usize], labels: &[u32], res: &Residency) -> Option<u32> {
    let blocks = labels.iter().copied().max().map_or(0, |m| m + 1);
    let mut nodes = 0;
    for b in 0..blocks {
        let members: Vec<&PlaceJob> =
            subset.iter().zip(labels).filter(|(_, l)| **l == b).map(|(i, _)| &jobs[*i]).collect();
        let width = members[0].rollout_width;
        if members.iter().any(|j| j.rollout_width != width) {
            return None;
        }
        let used: u64 = members.iter().map(|j| j.rollout_state.0).sum();
        if res.resident && used > res.rollout_dram.0 {
            return None;
        }
        nodes += width;
    }
    Some(nodes)
}

fn group_feasible(jobs: &[PlaceJob], subset: &[usize], labels: &[u32], train_width: u32, res: &Residency) -> bool {
    let train_used: u64 = subset.iter().map(|&i| jobs[i].train_state_total.0 / train_width as u64).sum();
    if res.resident && train_used > res.train_dram.0 {
        return false;
    }
    let members: Vec<_> =
        subset.iter().zip(labels).map(|(&i, &b)| jobs[i].timing_member(b, train_width, res.resident)).collect();
    let refs: Vec<&PlaceJob> = subset.iter().map(|&i| &jobs[i]).collect();
    predict_within_slo(&members, &refs).is_some()
}

/// Calls `f` with every set partition of `n` items as restricted growth strings.
pub fn for_each_partition(n: usize, f: &mut dyn FnMut(&[u32])) {
    fn rec(labels: &mut Vec<u32>, n: usize, max: u32, f: &mut dyn FnMut(&[u32])) {
        if labels.len() == n {
            f(labels);
            return;
        }
        for l in 0..=max {
            labels.push(l);
            rec(labels, n, if l == max { max + 1 } else { max }, f);
            labels.pop();
        }
    }
    if n == 0 {
        f(&[]);
    } else {
        rec(&mut Vec::with_capacity(n), n, 0, f);
    }
}

/// A necessary condition for any configuration of `mask`: training load and training state
/// must not already break an SLO or DRAM, even on the widest pool any job asks for (`widest`,
/// the same for every subset, so the condition is monotone: supersets fail too).
fn hopeless(jobs: &[PlaceJob], mask: u32, widest: u32, res: &Residency) -> bool {
    let idx: Vec<usize> = (0..jobs.len()).filter(|i| mask >> i & 1 == 1).collect();
    let load: Micros = idx.iter().map(|&i| jobs[i].train_on(widest)).sum();
    let min_allowed = idx.iter().map(|&i| jobs[i].slo * jobs[i].solo().0 as f64).fold(f64::INFINITY, f64::min);
    let state: u64 = idx.iter().map(|&i| jobs[i].train_state_total.0 / widest as u64).sum();
    (idx.len() > 1 && load.0 as f64 > min_allowed) || (res.resident && state > res.train_dram.0)
}

/// The cheapest feasible grouping of `jobs` (at most [`MAX_JOBS`]); `None` if some job cannot
/// run even alone.
pub fn optimal(jobs: &[PlaceJob], prices: Prices, res: &Residency) -> Option<Plan> {
    let n = jobs.len();
    assert!(n <= MAX_JOBS, "the exact optimiser takes at most {MAX_JOBS} jobs");
    let full = (1u32 << n) - 1;
    let widest = jobs.iter().map(|j| j.train_width).max().unwrap_or(1);
    let mut group: Vec<Option<GroupPlan>> = vec![None; 1 << n];
    let mut dead = vec![false; 1 << n];
    for mask in 1..=full {
        // Supersets of a hopeless subset are hopeless too.
        if (0..n).any(|i| mask >> i & 1 == 1 && dead[(mask & !(1 << i)) as usize]) || hopeless(jobs, mask, widest, res)
        {
            dead[mask as usize] = true;
            continue;
        }
        let subset: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
        group[mask as usize] = best_group(jobs, &subset, prices, res);
    }
    // best[mask]: cheapest cover of `mask` by disjoint groups; each step takes the group
    // holding the lowest job of what is left.
    let mut best: Vec<Option<(Money, u32)>> = vec![None; 1 << n];
    best[0] = Some((Money::ZERO, 0));
    for mask in 1..=full {
        let low = mask & mask.wrapping_neg();
        let rest = mask & !low;
        let mut sub = rest;
        loop {
            let g = sub | low;
            if let (Some(gp), Some((c, _))) = (&group[g as usize], best[(mask & !g) as usize]) {
                let total = c + gp.cost_per_hour;
                if best[mask as usize].is_none_or(|(b, _)| total < b) {
                    best[mask as usize] = Some((total, g));
                }
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
    }
    let (cost, _) = best[full as usize]?;
    let mut groups = Vec::new();
    let mut mask = full;
    while mask != 0 {
        let (_, g) = best[mask as usize].expect("reachable");
        groups.push(group[g as usize].clone().expect("chosen groups are feasible"));
        mask &= !g;
    }
    Some(Plan { cost_per_hour: cost, groups })
}

/// Plain brute force over every set partition of the jobs into groups, for tests.
pub fn brute_force(jobs: &[PlaceJob], prices: Prices, res: &Residency) -> Option<Money> {
    let mut best: Option<Money> = None;
    for_each_partition(jobs.len(), &mut |labels| {
        let groups = labels.iter().copied().max().map_or(0, |m| m + 1);
        let mut total = Money::ZERO;
        for g in 0..groups {
            let subset: Vec<usize> = (0..jobs.len()).filter(|i| labels[*i] == g).collect();
            match best_group(jobs, &subset, prices, res) {
                Some(p) => total += p.cost_per_hour,
                None => return,
            }
        }
        if best.is_none_or(|b| total < b) {
            best = Some(total);
        }
    });
    best
}
