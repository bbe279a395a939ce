//! The co-located baseline: every job on its own H800 node(s), running both phases there
//! with the `colo` profile, for its whole life. No contention, so each job's life is the sum
//! of its iterations; only fixed capacity makes jobs wait (for training nodes, and for an
//! agentic job's sandboxes in the environment pool, as placement reserves them for the others).

use crate::metrics::{JobOutcome, Metrics};
use crate::workload::{draw_iteration, SimJob};
use crate::{CapacityMode, SimConfig};
use std::collections::VecDeque;
use weave_core::{ClusterConfig, EventQueue, Micros, Pool};

enum Ev {
    Arrival(usize),
    Departure(usize),
}

pub fn run(jobs: &[SimJob], cluster: &ClusterConfig, cfg: &SimConfig) -> Metrics {
    let mut m = Metrics::default();
    let gpus = (cluster.rollout.gpus_per_node, cluster.training.gpus_per_node);
    let (capacity, env_capacity) = match cfg.capacity {
        CapacityMode::Elastic => (u32::MAX, f64::INFINITY),
        CapacityMode::Fixed => (cluster.training.nodes, cluster.env.as_ref().map_or(f64::INFINITY, |e| e.cores())),
    };
    // Co-located runs are on-policy: one batch of sandboxes at most.
    let env_cores = |i: usize| jobs[i].spec.agentic.as_ref().map_or(0.0, |a| a.cores_held(jobs[i].spec.batch, 0));
    let mut queue = EventQueue::new();
    for (i, j) in jobs.iter().enumerate() {
        queue.push(j.spec.arrival, 1, Ev::Arrival(i));
    }
    let mut held = 0u32;
    let mut env_held = 0.0;
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut now = Micros::ZERO;
    while let Some((t, ev)) = queue.pop() {
        now = t;
        match ev {
            Ev::Arrival(i) => waiting.push_back(i),
            Ev::Departure(i) => {
                held -= jobs[i].spec.train_nodes;
                env_held -= env_cores(i);
                m.nodes(now, (0, held), gpus);
            }
        }
        while let Some(&i) = waiting.front() {
            let job = &jobs[i];
            if job.spec.train_nodes > capacity || env_cores(i) > env_capacity {
                m.rejected += 1;
                waiting.pop_front();
                continue;
            }
            if held + job.spec.train_nodes > capacity || env_held + env_cores(i) > env_capacity + 1e-9 {
                break;
            }
            waiting.pop_front();
            held += job.spec.train_nodes;
            env_held += env_cores(i);
            m.nodes(now, (0, held), gpus);
            let life = run_job(job, cfg, &mut m, gpus.1, now);
            queue.push(now + life, 0, Ev::Departure(i));
        }
    }
    m.rejected += waiting.len() as u64;
    m.nodes(now, (0, held), gpus);
    m.end = now;
    m
}

/// Runs one job's iterations back to back; returns its life.
fn run_job(job: &SimJob, cfg: &SimConfig, m: &mut Metrics, gpus_per_node: u32, start: Micros) -> Micros {
    let mut rng = job.runtime_stream(cfg.seed);
    let gpus = job.spec.train_nodes * gpus_per_node;
    m.switching(Pool::Training, gpus, job.cold_start);
    let mut life = job.cold_start;
    let mut solo_sum = Micros::ZERO;
    let mut within = 0;
    let mut done = 0;
    // Fixed lifetimes: iterations until the lifetime is over (the last one is cut).
    let end = cfg.fixed_lifetimes.then(|| job.lifetime());
    for k in 0.. {
        if end.is_none() && k >= job.iterations {
            break;
        }
        let (disagg, colo) = draw_iteration(job, &cfg.runtime, k, &mut rng);
        if let Some(end) = end.filter(|&e| life + colo.solo() > e || colo.solo() == Micros::ZERO) {
            m.busy(Pool::Training, gpus, end.saturating_sub(life));
            life = life.max(end);
            break;
        }
        done += 1;
        let took = colo.solo() + if k == 0 { job.cold_start } else { Micros::ZERO };
        let solo = job.solo_iteration(disagg, k);
        if took.0 as f64 <= job.slo * solo.0 as f64 {
            within += 1;
        }
        solo_sum += solo;
        life += colo.solo();
        m.busy(Pool::Training, gpus, colo.solo());
    }
    m.admitted(weave_place::DecisionKind::Isolated);
    m.queue_delays.push(start.saturating_sub(job.spec.arrival));
    m.jobs.push(JobOutcome::placed_once(
        job.spec.name.clone(),
        job.slo,
        (done, within),
        life.0 as f64 / solo_sum.0.max(1) as f64,
        start.saturating_sub(job.spec.arrival),
        job.colo.solo().0 as f64 / (job.disagg.solo() + job.sync).0.max(1) as f64,
    ));
    life
}
