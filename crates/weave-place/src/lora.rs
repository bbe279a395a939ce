//! Which LoRA jobs share one base's rollout engine and trainer (a *pack*): its members run
//! **at the same time** (one mixed-adapter batch on the engine, each adapter trained in turn
//! on the trainer), and the pack takes its place in a co-execution group as one job.
//!
//! A job joins a pack of its base only while every member's SLO keeps `headroom` of its slack
//! with its iteration in the pack: `in_pack x (1 + headroom x (slo - 1)) <= slo x solo` for
//! each member, where `in_pack` is the pack's period plus the pipeline's fill spread over the
//! member's iterations, `solo` is the member's own iteration on an engine and a trainer of its own and
//! the period is the pack's iteration pipelined one deep, `max(rollout, train)` (each member
//! on-policy, staggered on the trainer: `weave_model::shared_engine::pack_times`).
//! What the pack leaves of the members' slack, the group it joins may use (the pack's SLO as
//! the placer sees it is the tightest member's allowance over the pack's iteration).
//! Pure: the caller gives each pack's iteration (`weave_model::lora::pack_times`).

use crate::{PlaceJob, Placer};
use weave_core::{JobId, PhaseTimes};

/// Share of each member's slack a pack leaves for the group it joins: 0.4, chosen with packs
/// that grow on the LoRA mix's seeds 1-3 among 0, 0.2, 0.3, 0.4, 0.5, 0.6 and 0.8 (the best
/// mean there; held-out seeds 4-5 above `weave-full-model` too; see docs/experiments/lora.md).
pub const PACK_HEADROOM: f64 = 0.4;

/// A LoRA job that may join a pack.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The caller's index of the job.
    pub index: usize,
    /// What must match to share an engine and a trainer: the base and the widths.
    pub key: (String, u32, u32),
    pub slo: f64,
    /// Its iteration alone (engine and trainer of its own).
    pub alone: PhaseTimes,
    /// Iterations it runs (`None`: until it leaves): a short job feels the pack's pipeline
    /// filling, which its few iterations do not spread.
    pub iterations: Option<u64>,
}

impl Candidate {
    /// Its iteration in a pack of iteration `t`: the pack's period, plus the pipeline's fill
    /// (its first iteration runs the pack's rollout and then its trainings, not the period)
    /// spread over its iterations.
    pub fn in_pack(&self, t: PhaseTimes) -> f64 {
        let pack = period(t);
        let fill = (t.rollout + t.train).as_secs_f64() - pack;
        pack + self.iterations.map_or(0.0, |n| fill / n.max(1) as f64)
    }
}

/// Packs for `candidates` (each a list of their indices, in the candidates' order; a job no
/// pack takes is a pack of one): first fit, the jobs with the most room (SLO x solo) placed
/// first. `pack_times` gives a set of candidates' pack iteration.
pub fn form_packs(
    candidates: &[Candidate],
    headroom: f64,
    pack_times: &dyn Fn(&[&Candidate]) -> Option<PhaseTimes>,
) -> Vec<Vec<usize>> {
    let room = |c: &Candidate| c.slo * c.alone.solo().as_secs_f64();
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by(|a, b| room(b).total_cmp(&room(a)).then(a.index.cmp(&b.index)));
    let mut packs: Vec<Vec<&Candidate>> = Vec::new();
    for c in order {
        let fits = |pack: &Vec<&Candidate>| {
            if pack[0].key != c.key {
                return false;
            }
            let mut with: Vec<&Candidate> = pack.clone();
            with.push(c);
            allowed(&with, headroom, pack_times)
        };
        match packs.iter().position(fits) {
            Some(p) => packs[p].push(c),
            None => packs.push(vec![c]),
        }
    }
    let mut out: Vec<Vec<usize>> = packs
        .into_iter()
        .map(|p| {
            let mut v: Vec<usize> = p.iter().map(|c| c.index).collect();
            v.sort_unstable();
            v
        })
        .collect();
    out.sort_unstable();
    out
}

/// Whether `members` may form a pack: every member keeps `headroom` of its slack.
pub fn allowed(
    members: &[&Candidate],
    headroom: f64,
    pack_times: &dyn Fn(&[&Candidate]) -> Option<PhaseTimes>,
) -> bool {
    let Some(t) = pack_times(members) else { return false };
    members.iter().all(|m| m.in_pack(t) * (1.0 + headroom * (m.slo - 1.0)) <= m.slo * m.alone.solo().as_secs_f64())
}

/// What the join policy needs from its driver (the replay, the server) for one arriving LoRA
/// job: the running packs it may join and what each would become with it.
pub trait PackDriver {
    /// A running pack (or a LoRA job running alone), as the driver names it.
    type Pack;
    /// What the pack becomes with the joiner, as the driver keeps it.
    type Grown;
    /// The packs the joiner may try, in the order tried.
    fn open_packs(&self) -> Vec<Self::Pack>;
    /// The pack's job in the placer.
    fn pack_job(&self, pack: &Self::Pack) -> JobId;
    /// The pack with the joiner, and its placement view then, if every member keeps its slack
    /// ([`allowed`] with [`PACK_HEADROOM`]) and the engine takes every adapter.
    fn grown(&self, pack: &Self::Pack) -> Option<(Self::Grown, PlaceJob)>;
    fn placer(&self) -> &Placer;
}

/// The pack an arriving LoRA job joins: the first the driver offers that takes it and whose
/// group still keeps every member's SLO with the pack's new phases ([`Placer::reshaped`]); its
/// placement view then, for the driver's `Placer::reshape`. `None`: it joins none.
pub fn pack_to_join<D: PackDriver>(driver: &D) -> Option<(D::Pack, D::Grown, PlaceJob)> {
    driver.open_packs().into_iter().find_map(|pack| {
        let (grown, place) = driver.grown(&pack)?;
        driver.placer().reshaped(driver.pack_job(&pack), place.clone(), true)?;
        Some((pack, grown, place))
    })
}

/// The pack's SLO as the placer sees it: the slowdown of the pack's period that the tightest
/// member allows, its allowance over its iteration in the pack (at least 1).
pub fn pack_slo(members: &[&Candidate], pack: PhaseTimes) -> f64 {
    let allows = |m: &&Candidate| m.slo * m.alone.solo().as_secs_f64() / m.in_pack(pack).max(1e-9);
    members.iter().map(allows).fold(f64::INFINITY, f64::min).max(1.0)
}

/// A pack's period, seconds: its phases pipelined one deep (staleness 1).
fn period(t: PhaseTimes) -> f64 {
    weave_dispatch::timing::solo_period_f64(t.rollout.as_secs_f64(), t.train.as_secs_f64(), 1)
}
