//! Probes where the closed-form group timing (Theorem 1 with switch and sync costs) matches
//! the real dispatcher: samples random groups and counts mismatches by load ratio.
//!
//! `cargo run --release -p weave-dispatch --example theorem_probe [single|blocks|any]`

use rand::{Rng, SeedableRng};
use weave_core::{JobId, Micros};
use weave_dispatch::timing::{closed_form, simulate};
use weave_dispatch::{SwitchCosts, TimingMember};

fn random_nodes(shape: &str, rng: &mut impl Rng) -> Vec<u32> {
    match shape {
        "single" => vec![rng.random_range(0..4)],
        "blocks" => {
            let b = rng.random_range(0..2u32);
            vec![2 * b, 2 * b + 1]
        }
        _ => {
            let nodes: Vec<u32> = (0..4).filter(|_| rng.random_bool(0.5)).collect();
            if nodes.is_empty() {
                vec![rng.random_range(0..4)]
            } else {
                nodes
            }
        }
    }
}

fn main() {
    let shape = std::env::args().nth(1).unwrap_or_else(|| "any".into());
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(1);
    let mut buckets = [(0u32, 0u32); 10];
    let zero_costs = std::env::var("ZERO_COSTS").is_ok();
    let costs = if zero_costs {
        SwitchCosts::default()
    } else {
        SwitchCosts {
            rollout_warm: Micros::from_secs(2),
            rollout_cold: Micros::from_secs(30),
            train_warm: Micros::from_secs(5),
            train_cold: Micros::from_secs(40),
        }
    };
    for _ in 0..20_000 {
        let members: Vec<TimingMember> = (0..rng.random_range(2..=4))
            .map(|j| TimingMember {
                job: JobId(j),
                rollout: Micros::from_secs(rng.random_range(1..400)),
                train: Micros::from_secs(rng.random_range(1..400)),
                nodes: random_nodes(&shape, &mut rng),
                costs,
                sync: Micros::from_secs(if zero_costs { 0 } else { rng.random_range(0..4) }),
                resident: rng.random_bool(0.7),
            })
            .collect();
        let Some(cf) = closed_form(&members) else { continue };
        let ev = simulate(&members, std::env::var("ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(40));
        let bucket = ((cf.t_load.0 as f64 / cf.t_cycle.0 as f64 * 10.0) as usize).min(9);
        buckets[bucket].0 += 1;
        if ev.meta_iteration != cf.meta_iteration {
            buckets[bucket].1 += 1;
            if std::env::var("SHOW").is_ok() {
                for m in &members {
                    println!(
                        "    {:?} roll {} train {} nodes {:?}",
                        m.job,
                        m.rollout.as_secs_f64(),
                        m.train.as_secs_f64(),
                        m.nodes
                    );
                }
                println!(
                    "    closed form {} s, dispatcher {} s",
                    cf.meta_iteration.as_secs_f64(),
                    ev.meta_iteration.as_secs_f64()
                );
            }
        }
    }
    println!("shape {shape}: unsaturated groups by T_load / T_cycle");
    for (i, (n, bad)) in buckets.iter().enumerate().filter(|(_, (n, _))| *n > 0) {
        println!(
            "  {:.1}-{:.1}: {n:5} groups, {bad:3} where the dispatcher differs from the closed form",
            i as f64 / 10.0,
            (i + 1) as f64 / 10.0
        );
    }
}
