//! LoRA jobs sharing a base in the replay: the jobs of one arrival instant (a sweep's burst)
//! on the same base are formed into packs (`weave_place::lora`), and each pack runs as one job
//! of the replay: its rollout the members' mixed batch plus their stagger, its training theirs
//! one after another, pipelined one iteration deep (staleness 1), which is how members
//! staggered on the trainer run while each stays on-policy
//! (`weave_model::shared_engine::pack_times`). Members leave as their iterations run out, so the pack's
//! iteration shrinks at those points (the schedule); each member is judged against its own
//! SLO and its own solo run (an engine and a trainer of its own), on the same variation the
//! pack drew.
//!
//! Packs form only at arrival, from jobs that arrive together; a job arriving later never
//! joins a running pack (not modelled yet: it would need a pack's membership to change in its
//! group's dispatcher).

use crate::workload::{Pack, SimJob};
use std::collections::BTreeMap;
use weave_core::{ClusterConfig, JobId, JobSpec, Lifetime, Micros, PhaseTimes};
use weave_model::lora::adapter_train_bytes;
use weave_model::shared_engine::{pack_times, Member};
use weave_model::ProfileModel;
use weave_place::lora::{allowed, form_packs, pack_slo, Candidate};
use weave_place::PlaceJob;

pub use weave_place::lora::PACK_HEADROOM;

/// `jobs` with the LoRA jobs of each arrival instant formed into packs (a pack of one stays the
/// job it was). Jobs keep their streams (`spec.id`); the placer's ids are renumbered to the
/// new positions, in arrival order.
pub fn pack_jobs(jobs: &[SimJob], profile: &ProfileModel, cluster: &ClusterConfig) -> Vec<SimJob> {
    let mut instants: BTreeMap<Micros, Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if packable(&j.spec) {
            instants.entry(j.spec.arrival).or_default().push(i);
        }
    }
    // The first member's position carries the pack; the other members' positions are skipped.
    let mut carried: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for indices in instants.values() {
        let candidates: Vec<Candidate> = indices.iter().map(|&i| candidate(i, &jobs[i])).collect();
        let times = |c: &[&Candidate]| {
            let members: Vec<Member> = c.iter().filter_map(|c| Member::of(&jobs[c.index].spec)).collect();
            (members.len() == c.len()).then(|| pack_times(profile, &members)).flatten()
        };
        for pack in form_packs(&candidates, PACK_HEADROOM, &times) {
            carried.insert(pack[0], pack);
        }
    }
    let skipped: std::collections::BTreeSet<usize> = carried.values().flat_map(|p| p[1..].iter().copied()).collect();
    let mut out = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        if skipped.contains(&i) {
            continue;
        }
        let mut j = match carried.get(&i) {
            Some(p) if p.len() > 1 => pack_job(p.iter().map(|&m| &jobs[m]).collect(), profile, cluster),
            _ => job.clone(),
        };
        j.place.id = JobId(out.len() as u32);
        out.push(j);
    }
    out
}

/// Whether a replay forms packs: it has LoRA jobs, and no failures or tenants' preemptions (a
/// member's bookkeeping does not yet roll back to a checkpoint).
pub fn packs_apply(jobs: &[SimJob], cfg: &crate::SimConfig) -> bool {
    cfg.failures.is_none() && cfg.share.is_none() && jobs.iter().any(|j| packable(&j.spec))
}

fn packable(spec: &JobSpec) -> bool {
    spec.lora.is_some() && spec.staleness == 0 && spec.agentic.is_none() && spec.phase_times.is_none()
}

fn candidate(index: usize, job: &SimJob) -> Candidate {
    let base = job.spec.lora.as_ref().map(|l| l.base.clone()).unwrap_or_default();
    let key = (base, job.spec.rollout_nodes, job.spec.train_nodes);
    Candidate { index, key, slo: job.slo, alone: job.disagg, iterations: Some(job.iterations) }
}

/// A member's seat in a pack: the job, the pack's iteration that is its first, and its SLO as
/// packing sees it (its own, less what it waited for its first rollout if it joined running).
#[derive(Clone, Copy)]
struct Seat<'a> {
    job: &'a SimJob,
    first: u64,
    slo: f64,
}

impl Seat<'_> {
    /// Whether it runs the pack's iteration `k`.
    fn runs(&self, k: u64) -> bool {
        self.first <= k && k < self.first + self.job.iterations
    }

    fn candidate(&self) -> Candidate {
        Candidate { slo: self.slo, ..candidate(0, self.job) }
    }
}

/// One replay job for `members` (at least two, one base), all from the pack's start.
fn pack_job(members: Vec<&SimJob>, profile: &ProfileModel, cluster: &ClusterConfig) -> SimJob {
    let founders: Vec<Seat> = members.into_iter().map(|job| Seat { job, first: 0, slo: job.slo }).collect();
    pack_of(&founders, 0, profile, cluster)
}

/// `pack` (a pack, or a LoRA job running alone) with `joiner` joining it at the pack's
/// iteration `at` (its next rollout), if every member running then keeps [`PACK_HEADROOM`] of
/// its slack, the joiner counting its wait for that rollout: the replay's job the pack becomes,
/// its placement view estimated from `at` on (the placer still has to take it).
pub fn joined(
    pack: &SimJob,
    joiner: &SimJob,
    at: u64,
    profile: &ProfileModel,
    cluster: &ClusterConfig,
) -> Option<SimJob> {
    if !packable(&joiner.spec) || candidate(0, pack).key != candidate(0, joiner).key {
        return None;
    }
    let mut seats: Vec<Seat> = match &pack.pack {
        Some(p) => {
            (0..p.members.len()).map(|m| Seat { job: &p.members[m], first: p.firsts[m], slo: p.slos[m] }).collect()
        }
        None if packable(&pack.spec) => vec![Seat { job: pack, first: 0, slo: pack.slo }],
        None => return None,
    };
    // It waits for the pack's next rollout: at most one period of the pack as it runs now,
    // which its group may stretch up to the pack's SLO. That wait is slack it no longer has.
    let period =
        weave_dispatch::timing::solo_period(pack.disagg.rollout, pack.disagg.train + pack.sync, pack.spec.staleness);
    let wait = period.as_secs_f64() * pack.slo;
    let solo = joiner.disagg.solo().as_secs_f64().max(1e-9);
    seats.push(Seat { job: joiner, first: at, slo: joiner.slo - wait / (joiner.iterations.max(1) as f64 * solo) });
    let running: Vec<Seat> = seats.iter().copied().filter(|s| s.runs(at)).collect();
    let model: Vec<Member> = running.iter().filter_map(|s| Member::of(&s.job.spec)).collect();
    let times = pack_times(profile, &model)?;
    let candidates: Vec<Candidate> = running.iter().map(Seat::candidate).collect();
    let refs: Vec<&Candidate> = candidates.iter().collect();
    allowed(&refs, PACK_HEADROOM, &|_| Some(times)).then(|| {
        let mut j = pack_of(&seats, at, profile, cluster);
        j.place.id = pack.place.id;
        j
    })
}

/// The replay's job for the members in `seats`, estimated from the pack's iteration `at` on.
fn pack_of(seats: &[Seat], at: u64, profile: &ProfileModel, cluster: &ClusterConfig) -> SimJob {
    let first = seats[0].job;
    let pack = Pack {
        members: seats.iter().map(|s| s.job.clone()).collect(),
        firsts: seats.iter().map(|s| s.first).collect(),
        slos: seats.iter().map(|s| s.slo).collect(),
        schedule: schedule(seats, profile),
    };
    let now = pack.times_at(at);
    let iterations = seats.iter().map(|s| s.first + s.job.iterations).max().unwrap_or(1);
    let running: Vec<&Seat> = seats.iter().filter(|s| s.runs(at)).collect();
    let candidates: Vec<Candidate> = running.iter().map(|s| s.candidate()).collect();
    let slo = pack_slo(&candidates.iter().collect::<Vec<_>>(), now);
    let mut spec = first.spec.clone();
    spec.name = format!("pack({})", seats.iter().map(|s| s.job.spec.name.as_str()).collect::<Vec<_>>().join("+"));
    spec.batch = running.iter().map(|s| s.job.spec.batch).sum();
    spec.job_type.max_tokens =
        running.iter().map(|s| s.job.spec.job_type.max_tokens).max().unwrap_or(spec.job_type.max_tokens);
    spec.lifetime = Lifetime::Iterations(iterations);
    // Staggered members pipeline the pack one iteration deep; each member stays on-policy.
    spec.staleness = 1;
    spec.phase_times = Some(now);
    let mut place = PlaceJob::from_spec(&spec, slo, profile, cluster);
    // The base is held once; each member adds its adapter and optimizer state (the spec's own
    // state holds the first member's already: conservative by one adapter).
    let adapters: u64 = running.iter().filter_map(|s| s.job.spec.lora.as_ref()).map(|l| adapter_train_bytes(l).0).sum();
    place.train_state_total = weave_core::Bytes(place.train_state_total.0 + adapters);
    let colo = place.colo.unwrap_or(now);
    SimJob { spec, slo, iterations, disagg: now, colo, place, pack: Some(Box::new(pack)), ..first.clone() }
}

/// A pack's iteration over its life: `(until, times)` for each stretch of its iterations in
/// which its membership stays the same.
fn schedule(seats: &[Seat], profile: &ProfileModel) -> Vec<(u64, PhaseTimes)> {
    let marks: std::collections::BTreeSet<u64> =
        seats.iter().flat_map(|s| [s.first, s.first + s.job.iterations]).collect();
    let marks: Vec<u64> = marks.into_iter().collect();
    let mut out = Vec::new();
    for w in marks.windows(2) {
        let model: Vec<Member> =
            seats.iter().filter(|s| s.runs(w[0])).filter_map(|s| Member::of(&s.job.spec)).collect();
        if let Some(t) = pack_times(profile, &model) {
            out.push((w[1], t));
        }
    }
    out
}

/// The cheapest any scheduler could run a workload's jobs, each within its SLO: every GPU
/// second busy (no idle, no switching, no sync), each LoRA job in the best pack its SLO allows
/// of partners just like it (as many as its SLO lets share one engine), each paying its share
/// of the mixed batch on the rollout nodes and its own training.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct CostFloor {
    pub dollars: f64,
    pub iterations: u64,
    pub iterations_per_k_dollars: f64,
    /// The same jobs with no sharing of a base (each alone on its engine and its trainer,
    /// still never idle): what the floor would be without mixed batches.
    pub unshared_dollars: f64,
}

/// Partners a pack may have at most in the floor's search.
const FLOOR_MAX_PACK: usize = 32;

/// The floor of `jobs` on `cluster` (see [`CostFloor`]).
pub fn cost_floor(jobs: &[SimJob], cluster: &ClusterConfig, profile: &ProfileModel) -> CostFloor {
    let node_hour =
        |pool: &weave_core::PoolConfig| pool.price().dollars_per_gpu_hour() * f64::from(pool.gpus_per_node) / 3_600.0;
    let (rollout, training) = (node_hour(&cluster.rollout), node_hour(&cluster.training));
    let mut floor = CostFloor { dollars: 0.0, iterations: 0, iterations_per_k_dollars: 0.0, unshared_dollars: 0.0 };
    for j in jobs {
        let (r_nodes, t_nodes) = (f64::from(j.spec.rollout_nodes), f64::from(j.spec.train_nodes));
        let cost = |engine_s: f64, train_s: f64| engine_s * r_nodes * rollout + train_s * t_nodes * training;
        let alone = cost(j.disagg.rollout.as_secs_f64(), j.disagg.train.as_secs_f64());
        let shared = best_share(j, profile).map_or(alone, |(engine_s, train_s)| cost(engine_s, train_s).min(alone));
        let n = j.iterations as f64;
        floor.dollars += shared * n;
        floor.unshared_dollars += alone * n;
        floor.iterations += j.iterations;
    }
    floor.iterations_per_k_dollars = floor.iterations as f64 / (floor.dollars / 1_000.0).max(1e-9);
    floor
}

/// A LoRA job's cheapest share of a pack of copies of itself within its SLO: (engine seconds,
/// trainer seconds) per iteration.
fn best_share(j: &SimJob, profile: &ProfileModel) -> Option<(f64, f64)> {
    Member::of(&j.spec)?;
    let solo = j.disagg.solo().as_secs_f64();
    let mut best: Option<(f64, f64)> = None;
    for k in 1..=FLOOR_MAX_PACK {
        let copies: Vec<Member> = (0..k).filter_map(|_| Member::of(&j.spec)).collect();
        // Past the engine's adapter budget no larger pack exists.
        let Some(t) = pack_times(profile, &copies) else { break };
        if weave_model::shared_engine::pack_period(t).as_secs_f64() > j.slo * solo {
            break;
        }
        // The mixed batch's engine time shared k ways (the stagger is not engine work).
        let engine = (t.rollout - j.disagg.train).as_secs_f64() / k as f64;
        let train = j.disagg.train.as_secs_f64();
        if best.is_none_or(|b| engine < b.0) {
            best = Some((engine, train));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::prepare;
    use weave_trace::generate::{generate, Arrivals, GenConfig, GenMode};

    fn lora_jobs(seed: u64) -> Vec<SimJob> {
        let profile = ProfileModel::builtin();
        let cfg = GenConfig {
            mode: GenMode::Lora,
            jobs: 300,
            arrivals: Arrivals::Poisson { per_hour: 20.0 },
            seed,
            lifetime_median_h: 1.0,
        };
        let trace = generate(&cfg, &profile);
        prepare(&trace, &ClusterConfig::default(), &profile, crate::SloSetting::default(), seed)
    }

    #[test]
    fn packs_keep_every_member_and_each_members_slo_on_the_estimate() {
        let jobs = lora_jobs(1);
        let packed = pack_jobs(&jobs, &ProfileModel::builtin(), &ClusterConfig::default());
        assert!(packed.len() < jobs.len(), "some burst packs");
        let mut names: Vec<String> = Vec::new();
        for (i, j) in packed.iter().enumerate() {
            assert_eq!(j.place.id, JobId(i as u32));
            match &j.pack {
                Some(p) => {
                    assert!(p.members.len() > 1);
                    assert_eq!(j.iterations, p.members.iter().map(|m| m.iterations).max().unwrap());
                    for m in &p.members {
                        // On the estimates, each member's iteration in the pack is within its
                        // SLO, with the headroom left for the group.
                        let period = weave_model::shared_engine::pack_period(p.times_at(0));
                        let pack = period.as_secs_f64() * (1.0 + PACK_HEADROOM * (m.slo - 1.0));
                        assert!(pack <= m.slo * m.disagg.solo().as_secs_f64() + 1e-6, "{}", m.spec.name);
                        names.push(m.spec.name.clone());
                    }
                    // The schedule only shrinks as members leave.
                    assert!(p.schedule.windows(2).all(|w| w[0].0 < w[1].0 && w[1].1.solo() <= w[0].1.solo()));
                    assert_eq!(j.spec.staleness, 1, "staggered members pipeline the pack");
                }
                None => names.push(j.spec.name.clone()),
            }
        }
        names.sort();
        let mut all: Vec<String> = jobs.iter().map(|j| j.spec.name.clone()).collect();
        all.sort();
        assert_eq!(names, all, "every job once");
    }

    #[test]
    fn a_full_model_workload_is_left_as_it_was() {
        let profile = ProfileModel::builtin();
        let trace = generate(&GenConfig::default_workload(), &profile);
        let jobs = prepare(&trace, &ClusterConfig::default(), &profile, crate::SloSetting::default(), 1);
        let packed = pack_jobs(&jobs, &profile, &ClusterConfig::default());
        assert_eq!(packed.len(), jobs.len());
        assert!(packed.iter().zip(&jobs).all(|(a, b)| a.spec == b.spec && a.pack.is_none()));
    }
}
