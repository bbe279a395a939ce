//! `weave bench timing`: the exact group timing against the dispatcher it predicts, on many
//! random groups: mismatches (there should be none), the worst measured/predicted ratio, what
//! the cyclic order changes against first-come round-robin, and how long timing takes.

use anyhow::Result;
use rand::Rng;
use serde::Serialize;
use std::time::Instant;
use weave_core::{JobId, Micros};
use weave_dispatch::cycle::Period;
use weave_dispatch::order::{best_uncached, period_of};
use weave_dispatch::timing::{run_group_first_come, run_group_unlogged, settled_period};
use weave_dispatch::{Fairness, SwitchCosts, TimingMember};
use weave_io::write_output;

#[derive(clap::Args)]
pub struct TimingArgs {
    /// Random groups to check.
    #[arg(long, default_value_t = 100_000)]
    groups: u64,
    /// Largest group (members).
    #[arg(long, default_value_t = 5)]
    max_members: u32,
    /// Largest bounded staleness a member may draw (0: every member on-policy; otherwise
    /// each member draws 0 with probability 1/2, else uniformly from 1 to this).
    #[arg(long, default_value_t = 0)]
    max_staleness: u32,
    /// Iterations each group's dispatcher runs (the transient must end well before).
    #[arg(long, default_value_t = 400)]
    iterations: u64,
    /// Seed of the `timing-groups` stream (random by default: the seed is printed).
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Outcome {
    seed: u64,
    groups: u64,
    /// Groups whose ordered dispatcher did not settle into exactly the predicted period.
    mismatches: u64,
    /// Groups whose run had not settled within the iterations (counted as mismatches).
    unsettled: u64,
    worst_measured_over_predicted: f64,
    vs_first_come: Comparison,
    /// Mean microseconds: the order search (the prediction) and one fixed order's period.
    mean_search_us: f64,
    max_search_us: f64,
    mean_period_us_5_members: f64,
    examples: Vec<String>,
}

#[derive(Serialize, Default)]
struct Comparison {
    faster: u64,
    equal: u64,
    slower: u64,
    /// Largest (ordered period / first-come period): above 1 the order lost.
    worst_ratio: f64,
    best_ratio: f64,
}

fn random_group(rng: &mut impl Rng, max_members: u32, max_staleness: u32) -> Vec<TimingMember> {
    let m = rng.random_range(2..=max_members.max(2));
    let nodes_in_use = rng.random_range(1..=4u32);
    let shape = rng.random_range(0..3);
    let sw = rng.random_range(0..3u64);
    let resident = rng.random_bool(0.7);
    (0..m)
        .map(|j| {
            let nodes = match shape {
                // one node per member (the placer's blocks)
                0 => vec![rng.random_range(0..nodes_in_use)],
                // equal or disjoint sets of two
                1 => {
                    let b = rng.random_range(0..2u32);
                    vec![2 * b, 2 * b + 1]
                }
                _ => {
                    let v: Vec<u32> = (0..nodes_in_use).filter(|_| rng.random_bool(0.5)).collect();
                    if v.is_empty() {
                        vec![rng.random_range(0..nodes_in_use)]
                    } else {
                        v
                    }
                }
            };
            TimingMember {
                job: JobId(j),
                rollout: Micros::from_secs(rng.random_range(1..400)),
                train: Micros::from_secs(rng.random_range(1..400)),
                nodes,
                costs: SwitchCosts {
                    rollout_warm: Micros::from_secs(sw),
                    rollout_cold: Micros::from_secs(sw * 20),
                    train_warm: Micros::from_secs(sw * 2),
                    train_cold: Micros::from_secs(sw * 25),
                },
                sync: Micros::from_secs(rng.random_range(0..4)),
                resident,
                staleness: if max_staleness > 0 && rng.random_bool(0.5) {
                    rng.random_range(1..=max_staleness)
                } else {
                    0
                },
            }
        })
        .collect()
}

/// The period a run settled into (member 0's training ends) if it settled, and in
/// microseconds that period or else the mean over the second half.
fn measured(ends: &[Micros], max_cycle: usize) -> (Option<Period>, f64) {
    let settled = settled_period(ends, max_cycle);
    let lo = ends.len() / 2;
    let hi = ends.len().saturating_sub(3).max(lo + 1).min(ends.len() - 1);
    let mean = (ends[hi].0 - ends[lo].0) as f64 / (hi - lo) as f64;
    (settled, settled.map_or(mean, as_micros))
}

fn as_micros(p: Period) -> f64 {
    p.total as f64 / p.rounds as f64
}

pub fn run(args: TimingArgs) -> Result<()> {
    let seed = args.seed.unwrap_or_else(|| rand::rng().random());
    let mut rng = weave_model::named_stream(seed, "timing-groups", 0);
    let mut out = Outcome { seed, groups: args.groups, vs_first_come: best_ratio_init(), ..Outcome::default() };
    let (mut search_total, mut periods5, mut n5) = (0f64, 0f64, 0u64);
    for g in 0..args.groups {
        let members = random_group(&mut rng, args.max_members, args.max_staleness);
        let t = Instant::now();
        let (order, predicted) = best_uncached(&members);
        let us = t.elapsed().as_secs_f64() * 1e6;
        search_total += us;
        out.max_search_us = out.max_search_us.max(us);
        if members.len() == 5 {
            let t = Instant::now();
            std::hint::black_box(period_of(&members, &order));
            periods5 += t.elapsed().as_secs_f64() * 1e6;
            n5 += 1;
        }
        let max_cycle = 4 * members.len() * members.len();
        let run = run_group_unlogged(&members, args.iterations, Fairness::RoundRobin);
        let (settled, mean) = measured(&run.train_ends[&members[0].job], max_cycle);
        let ratio = mean / as_micros(predicted);
        out.worst_measured_over_predicted = out.worst_measured_over_predicted.max(ratio);
        if settled != Some(predicted) {
            out.mismatches += 1;
            out.unsettled += settled.is_none() as u64;
            if out.examples.len() < 5 {
                out.examples.push(format!("group {g}: predicted {predicted:?}, settled {settled:?}: {members:?}"));
            }
        }
        let first = run_group_first_come(&members, args.iterations);
        let (_, first_mean) = measured(&first.train_ends[&members[0].job], max_cycle);
        let r = mean / first_mean;
        let c = &mut out.vs_first_come;
        c.worst_ratio = c.worst_ratio.max(r);
        c.best_ratio = c.best_ratio.min(r);
        if (r - 1.0).abs() < 1e-9 {
            c.equal += 1;
        } else if r < 1.0 {
            c.faster += 1;
        } else {
            c.slower += 1;
            if out.examples.len() < 5 {
                out.examples
                    .push(format!("group {g}: ordered {mean:.0} us vs first-come {first_mean:.0} us: {members:?}"));
            }
        }
    }
    out.mean_search_us = search_total / args.groups.max(1) as f64;
    out.mean_period_us_5_members = periods5 / n5.max(1) as f64;
    if args.json {
        return write_output(None, &serde_json::to_string_pretty(&out)?);
    }
    let c = &out.vs_first_come;
    println!(
        "seed {} ({} random groups of 2..{} members, staleness up to {}, {} iterations each)",
        seed, out.groups, args.max_members, args.max_staleness, args.iterations
    );
    println!(
        "ordered dispatcher vs exact prediction: {} mismatches ({} unsettled), worst measured/predicted {:.9}",
        out.mismatches, out.unsettled, out.worst_measured_over_predicted
    );
    println!(
        "vs first-come round-robin: {} faster, {} equal, {} slower; ratio ordered/first-come {:.4} .. {:.4}",
        c.faster, c.equal, c.slower, c.best_ratio, c.worst_ratio
    );
    println!(
        "timing: order search mean {:.1} us (max {:.0} us); one order's period, 5 members: {:.2} us",
        out.mean_search_us, out.max_search_us, out.mean_period_us_5_members
    );
    for e in &out.examples {
        println!("  {e}");
    }
    Ok(())
}

fn best_ratio_init() -> Comparison {
    Comparison { best_ratio: f64::INFINITY, ..Comparison::default() }
}
