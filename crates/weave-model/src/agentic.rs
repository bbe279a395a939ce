//! An agentic rollout in time: a batch of trajectories, each
//! `reset (CPU) -> [generate_k (GPU) -> env_k (CPU)] x K -> reward`, on a continuous-batching
//! engine. At trajectory level (Weave, RollArt) a trajectory's next turn is generated as soon
//! as its environment step returns, so the rollout GPUs idle only while every live trajectory
//! waits on its sandbox; at batch level (the baselines' mode) every turn waits for the slowest
//! environment of the batch.
//!
//! The engine is a processor shared by the trajectories generating at once: each decodes at
//! full speed while at most `slots` generate, and at `slots / n` of it when `n > slots` do
//! (decode is memory-bound until the batch fills the engine). Generation per turn does not
//! grow with the context here (prefix caching keeps most of a later turn's prompt: about 56%
//! in the PolyTrace Search-R1 traces); a declared `gen_s_per_turn` is the mean.

use crate::{named_stream, Stream};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use weave_core::agentic::{AgenticSpec, LatencySpec};
use weave_core::Micros;

/// How a rollout's trajectories take their turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interaction {
    /// Each trajectory on its own: its next turn as soon as its step returns.
    Trajectory,
    /// Turn by turn: every turn starts when the whole batch's previous step has returned.
    Batch,
}

/// One sampled rollout.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AgenticRollout {
    pub duration: Micros,
    /// Time at least one trajectory was generating: what the rollout GPUs worked.
    pub generating: Micros,
    /// Turns generated, all trajectories together.
    pub turns: u64,
    /// Sandbox starts that failed and were noticed at their time-out.
    pub timeouts: u32,
    /// Sandbox core-time held (for a pausable sandbox, only while it starts or steps),
    /// core-microseconds.
    pub core_us: u128,
    /// Sandboxes held at once, at most.
    pub peak_sandboxes: u32,
    /// From when at most [`TAIL_SHARE`] of the batch's trajectories are still live: the tail,
    /// where the few left mostly wait on their environments and need a small part of the
    /// engine (what long-tail migration hands the rest of the block on for).
    pub tail_from: Micros,
}

/// The share of a batch's trajectories still live in its tail (see
/// [`AgenticRollout::tail_from`]).
pub const TAIL_SHARE: f64 = 0.1;

/// One trajectory's draws: its sandbox start, and each turn's environment step (the last
/// one's includes the reward).
struct Draws {
    startup: f64,
    timeouts: u32,
    steps: Vec<f64>,
}

/// A geometric count on {0, 1, ..} with mean `mean`.
fn geometric(mean: f64, rng: &mut Stream) -> u32 {
    if mean <= 0.0 {
        return 0;
    }
    let p = 1.0 / (1.0 + mean);
    let u: f64 = 1.0 - rng.random::<f64>();
    (u.ln() / (1.0 - p).ln()).floor().min(u32::MAX as f64) as u32
}

fn env_step(env: &LatencySpec, rng: &mut Stream) -> f64 {
    let z: f64 = StandardNormal.sample(rng);
    match *env {
        LatencySpec::Normal { mean_s, sigma_s } => (mean_s + sigma_s * z).max(0.0),
        LatencySpec::LogNormal { p50_s, p99_s } => {
            // The 99th percentile of N(0, 1) is 2.3263.
            let sigma = (p99_s / p50_s.max(1e-9)).max(1.0).ln() / 2.326_347_9;
            p50_s * (sigma * z).exp()
        }
    }
}

fn draw(spec: &AgenticSpec, rng: &mut Stream) -> Draws {
    let t = &spec.turns;
    let mean = if rng.random::<f64>() < t.long_share { t.long_mean } else { t.short_mean };
    let turns = (1 + geometric(mean - 1.0, rng)).min(t.max.max(1));
    let s = &spec.startup;
    let (mut startup, mut timeouts) = (0.0, 0);
    let mut cached = rng.random::<f64>() < s.cached_share;
    // A failed start is noticed at its time-out and retried cold (at most 10 times).
    while timeouts < 10 && rng.random::<f64>() < s.failure_rate {
        startup += s.timeout_s;
        timeouts += 1;
        cached = false;
    }
    startup += if cached { s.cached_s } else { s.cold_s };
    let mut steps: Vec<f64> = (0..turns).map(|_| env_step(&spec.env, rng)).collect();
    if let Some(last) = steps.last_mut() {
        *last += spec.reward_s;
    }
    Draws { startup, timeouts, steps }
}

/// Where one trajectory is.
#[derive(Clone, Copy)]
enum At {
    /// Starting its sandbox or waiting on a step, until the time given; then turn `next`.
    Waiting {
        until: f64,
        next: usize,
    },
    /// Generating turn `turn`, with this much full-speed work left.
    Generating {
        left: f64,
        turn: usize,
    },
    Done,
}

/// A sampled rollout of `batch` trajectories on an engine of `slots`.
pub fn sample_rollout(
    spec: &AgenticSpec,
    batch: u32,
    slots: u32,
    how: Interaction,
    rng: &mut Stream,
) -> AgenticRollout {
    sample_rollout_started(spec, batch, slots, how, 0.0, rng)
}

/// [`sample_rollout`] with the sandboxes started `head_start_s` before the rollout (during
/// the previous training: an environment's reset does not depend on the new weights). A
/// start that takes longer still delays its trajectory; a sandbox that is not pausable is
/// held (and paid) from its start. The draws are the same as without the head start.
pub fn sample_rollout_started(
    spec: &AgenticSpec,
    batch: u32,
    slots: u32,
    how: Interaction,
    head_start_s: f64,
    rng: &mut Stream,
) -> AgenticRollout {
    let mut draws: Vec<Draws> = (0..batch.max(1)).map(|_| draw(spec, rng)).collect();
    let head = head_start_s.max(0.0);
    for d in &mut draws {
        d.startup = (d.startup - head).max(0.0);
    }
    let mut r = match how {
        Interaction::Trajectory => trajectory_level(spec, &draws, slots.max(1) as f64),
        Interaction::Batch => batch_level(spec, &draws, slots.max(1) as f64),
    };
    r.turns = draws.iter().map(|d| d.steps.len() as u64).sum();
    r.timeouts = draws.iter().map(|d| d.timeouts).sum();
    if !spec.sandbox.pausable {
        r.core_us += (spec.sandbox.cores * head * 1e6) as u128 * draws.len() as u128;
    }
    r
}

fn trajectory_level(spec: &AgenticSpec, draws: &[Draws], slots: f64) -> AgenticRollout {
    let w = spec.gen_s_per_turn;
    let mut at: Vec<At> = draws.iter().map(|d| At::Waiting { until: d.startup, next: 0 }).collect();
    let (mut now, mut generating) = (0.0f64, 0.0f64);
    let mut done = vec![0.0f64; draws.len()];
    let mut peak_waiting = 0u32;
    loop {
        let n = at.iter().filter(|a| matches!(a, At::Generating { .. })).count();
        let waiting = at.iter().filter(|a| matches!(a, At::Waiting { .. })).count();
        peak_waiting = peak_waiting.max(waiting as u32);
        if n == 0 && waiting == 0 {
            break;
        }
        let rate = if n == 0 { 0.0 } else { (slots / n as f64).min(1.0) };
        let next_wait = at.iter().filter_map(|a| if let At::Waiting { until, .. } = a { Some(*until) } else { None });
        let next_gen =
            at.iter().filter_map(|a| if let At::Generating { left, .. } = a { Some(now + left / rate) } else { None });
        let next = next_wait.chain(next_gen).fold(f64::INFINITY, f64::min);
        let dt = (next - now).max(0.0);
        if n > 0 {
            generating += dt;
        }
        now = next;
        for (i, a) in at.iter_mut().enumerate() {
            *a = match *a {
                At::Generating { left, turn } => {
                    let left = left - rate * dt;
                    // Work left below a nanosecond is done (floating-point remainders).
                    if left <= 1e-9 {
                        At::Waiting { until: now + draws[i].steps[turn], next: turn + 1 }
                    } else {
                        At::Generating { left, turn }
                    }
                }
                At::Waiting { until, next } if until <= now => {
                    if next < draws[i].steps.len() {
                        At::Generating { left: w, turn: next }
                    } else {
                        done[i] = now;
                        At::Done
                    }
                }
                other => other,
            };
        }
    }
    finish(spec, draws, &done, now, generating, peak_waiting)
}

fn batch_level(spec: &AgenticSpec, draws: &[Draws], slots: f64) -> AgenticRollout {
    let w = spec.gen_s_per_turn;
    let mut now = draws.iter().map(|d| d.startup).fold(0.0, f64::max);
    let mut generating = 0.0;
    let mut done = vec![0.0f64; draws.len()];
    let turns = draws.iter().map(|d| d.steps.len()).max().unwrap_or(0);
    for k in 0..turns {
        let live: Vec<usize> = (0..draws.len()).filter(|&i| draws[i].steps.len() > k).collect();
        let gen = w * (live.len() as f64 / slots).max(1.0);
        now += gen;
        generating += gen;
        now += live.iter().map(|&i| draws[i].steps[k]).fold(0.0, f64::max);
        for &i in &live {
            done[i] = now;
        }
    }
    // Turn by turn, every live sandbox steps at once.
    finish(spec, draws, &done, now, generating, draws.len() as u32)
}

fn finish(
    spec: &AgenticSpec,
    draws: &[Draws],
    done: &[f64],
    end: f64,
    generating: f64,
    peak_waiting: u32,
) -> AgenticRollout {
    let cores = spec.sandbox.cores;
    let core_s: f64 = if spec.sandbox.pausable {
        draws.iter().map(|d| cores * (d.startup + d.steps.iter().sum::<f64>())).sum()
    } else {
        done.iter().map(|t| cores * t).sum()
    };
    let mut ends = done.to_vec();
    ends.sort_by(f64::total_cmp);
    let live_in_tail = ((ends.len() as f64 * TAIL_SHARE).ceil() as usize).max(1);
    let tail_from = ends.len().checked_sub(live_in_tail + 1).map_or(0.0, |k| ends[k]);
    AgenticRollout {
        duration: Micros::from_secs_f64(end),
        tail_from: Micros::from_secs_f64(tail_from),
        generating: Micros::from_secs_f64(generating),
        core_us: (core_s * 1e6) as u128,
        peak_sandboxes: if spec.sandbox.pausable { peak_waiting } else { draws.len() as u32 },
        ..Default::default()
    }
}

/// A job's sampled rollouts, run two ways on the same draws: with each sandbox started when
/// the rollout begins (`at_rollout`: how frameworks run today, environment time on the
/// rollout GPUs) and started during the previous training (`started_early`, by
/// `head_start_s`: the first iteration has no previous training and uses `at_rollout`).
#[derive(Clone, Debug, PartialEq)]
pub struct SampledRollouts {
    pub at_rollout: Vec<AgenticRollout>,
    pub started_early: Vec<AgenticRollout>,
}

impl SampledRollouts {
    /// `n` rollouts of `batch` trajectories (an engine holding the whole batch), each from
    /// its own stream `name` numbered by job and sample.
    pub fn draw(
        spec: &AgenticSpec,
        batch: u32,
        head_start_s: f64,
        (seed, name, job): (u64, &str, u32),
        n: u32,
    ) -> SampledRollouts {
        let mut at_rollout = Vec::with_capacity(n as usize);
        let mut started_early = Vec::with_capacity(n as usize);
        for i in 0..n.max(1) {
            let stream = ((job as u64) << 32) | i as u64;
            let mut rng = named_stream(seed, name, stream);
            at_rollout.push(sample_rollout(spec, batch, batch, Interaction::Trajectory, &mut rng));
            let mut rng = named_stream(seed, name, stream);
            started_early.push(sample_rollout_started(
                spec,
                batch,
                batch,
                Interaction::Trajectory,
                head_start_s,
                &mut rng,
            ));
        }
        SampledRollouts { at_rollout, started_early }
    }

    /// Mean duration of a list of rollouts.
    pub fn mean_duration(runs: &[AgenticRollout]) -> Micros {
        let total: u128 = runs.iter().map(|r| r.duration.0 as u128).sum();
        Micros((total / runs.len().max(1) as u128) as u64)
    }

    /// Mean generating time of a list of rollouts.
    pub fn mean_generating(runs: &[AgenticRollout]) -> Micros {
        let total: u128 = runs.iter().map(|r| r.generating.0 as u128).sum();
        Micros((total / runs.len().max(1) as u128) as u64)
    }

    /// Mean sandbox core-hours per rollout.
    pub fn mean_core_hours(runs: &[AgenticRollout]) -> f64 {
        let total: u128 = runs.iter().map(|r| r.core_us).sum();
        total as f64 / 3.6e9 / runs.len().max(1) as f64
    }
}

/// A co-located agentic rollout: generation at the training GPUs' speed (`speed`: generation
/// time on them over on the rollout GPUs), the environment's time as it is.
pub fn colocated_rollout(duration: Micros, generating: Micros, speed: f64) -> Micros {
    duration.saturating_sub(generating) + generating.scale(speed)
}

/// The rollouts a three-tier planner expects of a job (sandboxes started during a training of
/// `train`), disaggregated and co-located (`colo_speed` as in [`colocated_rollout`]): the
/// means of `samples` draws from the stream `agentic-admission` of `seed`. Remembered by
/// declaration, batch and training (the server asks for the same jobs' plans again and again,
/// and each costs a few hundred thousand trajectory steps).
pub fn planned_rollouts(
    spec: &AgenticSpec,
    batch: u32,
    train: Micros,
    colo_speed: f64,
    (seed, samples): (u64, u32),
) -> (Micros, Micros) {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static PLANS: OnceLock<Mutex<BTreeMap<String, (Micros, Micros)>>> = OnceLock::new();
    let key = format!("{spec:?}|{batch}|{}|{colo_speed}|{seed}|{samples}", train.0);
    let plans = PLANS.get_or_init(Default::default);
    if let Some(&plan) = plans.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return plan;
    }
    let drawn = SampledRollouts::draw(spec, batch, train.as_secs_f64(), (seed, "agentic-admission", 0), samples);
    let runs = &drawn.started_early;
    let (duration, generating) = (SampledRollouts::mean_duration(runs), SampledRollouts::mean_generating(runs));
    let plan = (duration, colocated_rollout(duration, generating, colo_speed));
    plans.lock().unwrap_or_else(|p| p.into_inner()).insert(key, plan);
    plan
}

/// Means over `samples` rollouts, each drawn from its own named stream (`agentic-rollout`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RolloutMeans {
    pub duration_s: f64,
    pub generating_s: f64,
    /// The share of the rollout its GPUs work.
    pub busy_share: f64,
    pub core_hours: f64,
}

pub fn mean_rollout(
    spec: &AgenticSpec,
    batch: u32,
    slots: u32,
    how: Interaction,
    seed: u64,
    samples: u32,
) -> RolloutMeans {
    let n = samples.max(1);
    let (mut d, mut g, mut c) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let mut rng = named_stream(seed, "agentic-rollout", i as u64);
        let r = sample_rollout(spec, batch, slots, how, &mut rng);
        d += r.duration.as_secs_f64();
        g += r.generating.as_secs_f64();
        c += r.core_us as f64 / 3.6e9;
    }
    let k = n as f64;
    RolloutMeans { duration_s: d / k, generating_s: g / k, busy_share: g / d.max(1e-12), core_hours: c / k }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weave_core::agentic::{SandboxSpec, StartupSpec, TurnsSpec};

    fn spec(turns: (f64, f64, f64), gen_s: f64, env: LatencySpec) -> AgenticSpec {
        AgenticSpec {
            turns: TurnsSpec { short_mean: turns.0, long_mean: turns.1, long_share: turns.2, max: 100 },
            gen_s_per_turn: gen_s,
            env,
            startup: StartupSpec { cold_s: 0.0, cached_s: 0.0, cached_share: 1.0, failure_rate: 0.0, timeout_s: 0.0 },
            reward_s: 0.0,
            sandbox: SandboxSpec { cores: 1.0, mem_gib: 8.0, pausable: false },
        }
    }

    fn fixed(mean_s: f64) -> LatencySpec {
        LatencySpec::Normal { mean_s, sigma_s: 0.0 }
    }

    #[test]
    fn without_environment_time_the_gpus_never_idle() {
        // One turn each, 8 trajectories on 4 slots: half speed until all finish at 2 x 5 s.
        let s = spec((1.0, 1.0, 0.0), 5.0, fixed(0.0));
        let r = sample_rollout(&s, 8, 4, Interaction::Trajectory, &mut named_stream(1, "t", 0));
        assert_eq!((r.duration, r.generating, r.turns), (Micros::from_secs(10), Micros::from_secs(10), 8));
        let b = sample_rollout(&s, 8, 4, Interaction::Batch, &mut named_stream(1, "t", 0));
        assert_eq!(b.duration, Micros::from_secs(10));
    }

    #[test]
    fn fixed_steps_cost_the_same_at_either_level_and_idle_the_gpus_meanwhile() {
        // One turn of 2 s generation and a 10 s step (the reward's 3 s with it), every
        // trajectory alike.
        let mut s = spec((1.0, 1.0, 0.0), 2.0, fixed(10.0));
        s.reward_s = 3.0;
        let r = sample_rollout(&s, 4, 8, Interaction::Trajectory, &mut named_stream(1, "t", 0));
        assert_eq!((r.duration, r.generating), (Micros::from_secs(15), Micros::from_secs(2)));
        let b = sample_rollout(&s, 4, 8, Interaction::Batch, &mut named_stream(1, "t", 0));
        assert_eq!(b.duration, r.duration);
        // Not pausable: each sandbox is held for its trajectory's whole life; pausable, only
        // for its step.
        assert_eq!(r.core_us, 4 * r.duration.0 as u128);
        s.sandbox.pausable = true;
        let p = sample_rollout(&s, 4, 8, Interaction::Trajectory, &mut named_stream(1, "t", 0));
        assert_eq!(p.core_us, 4 * 13_000_000);
    }

    #[test]
    fn batch_level_waits_for_the_slowest_step_and_loses_more_as_steps_vary() {
        let gain = |sigma: f64| {
            let s = spec((8.0, 8.0, 0.0), 2.0, LatencySpec::Normal { mean_s: 10.0, sigma_s: sigma });
            let t = mean_rollout(&s, 64, 64, Interaction::Trajectory, 7, 8).duration_s;
            let b = mean_rollout(&s, 64, 64, Interaction::Batch, 7, 8).duration_s;
            b / t
        };
        let (low, high) = (gain(1.0), gain(10.0));
        assert!(1.0 < low && low < high, "{low} {high}");
    }

    #[test]
    fn the_same_seed_draws_the_same_rollout() {
        let s = spec((3.0, 20.0, 0.4), 2.0, LatencySpec::LogNormal { p50_s: 1.0, p99_s: 5.0 });
        let a = mean_rollout(&s, 32, 16, Interaction::Trajectory, 3, 4);
        assert_eq!(a, mean_rollout(&s, 32, 16, Interaction::Trajectory, 3, 4));
        assert_ne!(a, mean_rollout(&s, 32, 16, Interaction::Trajectory, 4, 4));
        assert!(a.busy_share > 0.0 && a.busy_share < 1.0, "{a:?}");
    }

    #[test]
    fn failed_starts_are_retried_after_their_time_out() {
        let mut s = spec((1.0, 1.0, 0.0), 1.0, fixed(0.0));
        s.startup = StartupSpec { cold_s: 5.0, cached_s: 0.5, cached_share: 1.0, failure_rate: 0.5, timeout_s: 30.0 };
        let r = sample_rollout(&s, 64, 64, Interaction::Trajectory, &mut named_stream(1, "t", 0));
        assert!(r.timeouts > 10, "{r:?}");
        // The slowest start: its time-outs, then a cold start, then one turn.
        assert!(r.duration >= Micros::from_secs(30 + 5 + 1), "{r:?}");
    }

    #[test]
    fn starting_sandboxes_early_takes_their_start_off_the_rollout_and_pays_for_the_wait() {
        let mut s = spec((2.0, 2.0, 0.0), 1.0, fixed(1.0));
        s.startup = StartupSpec { cold_s: 20.0, cached_s: 20.0, cached_share: 1.0, failure_rate: 0.0, timeout_s: 0.0 };
        let runs = SampledRollouts::draw(&s, 8, 30.0, (1, "t", 0), 4);
        for (late, early) in runs.at_rollout.iter().zip(&runs.started_early) {
            assert_eq!(late.duration, early.duration + Micros::from_secs(20), "{late:?} {early:?}");
            assert_eq!(late.generating, early.generating);
            // Held from its start, 30 s before the rollout, to the trajectory's end.
            assert_eq!(early.core_us, late.core_us + 8 * 10_000_000, "{late:?} {early:?}");
        }
        // A head start shorter than the start saves only itself.
        let short = SampledRollouts::draw(&s, 8, 5.0, (1, "t", 0), 1);
        assert_eq!(short.at_rollout[0].duration, short.started_early[0].duration + Micros::from_secs(5));
    }

    #[test]
    fn the_tail_begins_when_a_tenth_of_the_trajectories_are_left() {
        // Twenty trajectories of 1 to 20 turns of 1 s generation and 1 s steps (no
        // contention): they end at 2, 4, .., 40 s; two are live after the 18th ends at 36 s.
        let s = spec((1.0, 1.0, 0.0), 1.0, fixed(1.0));
        let draws: Vec<Draws> = (1..=20).map(|k| Draws { startup: 0.0, timeouts: 0, steps: vec![1.0; k] }).collect();
        let r = trajectory_level(&s, &draws, 64.0);
        assert_eq!((r.duration, r.tail_from), (Micros::from_secs(40), Micros::from_secs(36)));
    }
}
