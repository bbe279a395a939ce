//! A base's engine and trainer shared by several LoRA jobs (a pack): one mixed-adapter batch of
//! every member's prompts on the engine, each member's adapter trained in turn. The arithmetic
//! of one step and one adapter is in [`crate::lora`]; this module adds the profile's anchor.

use crate::lora::{engine_sequences, step_ratio, MIX_OVERHEAD};
use crate::profile::{Deployment, ProfileModel, REFERENCE_BATCH};
use weave_core::lora::{BaseModel, LoraSpec};
use weave_core::{GpuKind, JobSpec, JobType, Micros, ModelSize, PhaseTimes};

/// One member of a shared-base engine and trainer, as the model needs it.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub job: &'a JobSpec,
    pub lora: &'a LoraSpec,
}

impl<'a> Member<'a> {
    /// The job's member view, if it declares an adapter of a known base.
    pub fn of(job: &'a JobSpec) -> Option<Member<'a>> {
        let lora = job.lora.as_ref()?;
        lora.base_model().map(|_| Member { job, lora })
    }
}

/// A shared-base pack's phases, as a job pipelined one iteration deep (staleness 1) whose
/// members are each on-policy: the members are staggered on the trainer, each training its
/// adapter right after its own rollout and rolling out again as soon as its own training
/// ends (its requests join the engine's running batch, continuous batching). So
///
/// - `rollout` = a mixed batch of every member's prompts (as long as the longest generation
///   any member asks for, at the sum of their batches: conservative, since staggered members
///   are not all in the batch all the time), plus the stagger, the longest member training;
/// - `train` = every member's training, one after another (the trainer's busy time).
///
/// The pack's period is `max(rollout, train)`, the staleness-1 period: each member runs one
/// iteration per period, on the weights of its own previous training. `None` for no members
/// or members of different bases.
pub fn pack_times(profile: &ProfileModel, members: &[Member]) -> Option<PhaseTimes> {
    let first = members.first()?;
    let base = first.lora.base_model()?;
    if members.iter().any(|m| m.lora.base != first.lora.base) {
        return None;
    }
    let max_tokens = members.iter().map(|m| m.job.job_type.max_tokens).max()?;
    let width = members.iter().map(|m| m.job.rollout_nodes).max()?;
    let adapters: u64 = members.iter().map(|m| m.lora.engine_bytes().0).sum();
    if adapters > weave_core::lora::engine_adapter_budget(width).0 {
        return None;
    }
    let batch: u64 = members.iter().map(|m| u64::from(m.job.batch)).sum();
    let trainings: Vec<Micros> = members.iter().map(|m| alone(profile, m.job).train).collect();
    let stagger = trainings.iter().copied().max()?;
    let rollout = mixed_rollout(profile, base, max_tokens, width, batch) + stagger;
    let train = trainings.into_iter().fold(Micros::ZERO, |a, b| a + b);
    Some(PhaseTimes { rollout, train })
}

/// A pack's period: each member's iteration (see [`pack_times`]).
pub fn pack_period(times: PhaseTimes) -> Micros {
    times.rollout.max(times.train)
}

/// One job's LoRA times on an engine and a trainer of its own (its declared ones if given).
pub fn alone(profile: &ProfileModel, job: &JobSpec) -> PhaseTimes {
    job.phase_times.unwrap_or_else(|| profile.estimate(Deployment::Disagg, job).times)
}

/// A mixed batch of `batch` sequences on an engine of `width` nodes.
fn mixed_rollout(profile: &ProfileModel, base: &BaseModel, max_tokens: u32, width: u32, batch: u64) -> Micros {
    let ty = JobType { model: ModelSize::billions(base.size_b), max_tokens };
    // Never fewer than the profile's measured batch: it was measured, so it ran.
    let capacity = engine_sequences(base, max_tokens, width).max(REFERENCE_BATCH);
    let within = batch.min(u64::from(capacity)).max(1) as f64;
    let at_reference = profile.predict(Deployment::Disagg, ty, REFERENCE_BATCH, (width, width)).times.rollout;
    let scale = step_ratio(base, (max_tokens, width, GpuKind::H20), within, REFERENCE_BATCH);
    // Past the KV cache, sequences wait for slots: time grows with the batch.
    let waits = (batch as f64 / within).max(1.0);
    at_reference.scale(scale * (1.0 + MIX_OVERHEAD) * waits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weave_core::{JobId, Lifetime};

    fn job(batch: u32, tokens_k: u32, base: &str) -> JobSpec {
        JobSpec {
            id: JobId(0),
            name: "j".into(),
            arrival: Micros::ZERO,
            job_type: JobType::new(7, tokens_k),
            batch,
            algorithm: Default::default(),
            rollout_nodes: 1,
            train_nodes: 1,
            slo: None,
            lifetime: Lifetime::Iterations(10),
            phase_times: None,
            tenant: None,
            priority: Default::default(),
            staleness: 0,
            agentic: None,
            lora: Some(LoraSpec { base: base.into(), rank: 32, targets: vec!["all-linear".into()] }),
        }
    }

    #[test]
    fn one_adapter_alone_pays_the_mixing_overhead_and_two_thirds_of_the_training() {
        let p = ProfileModel::builtin();
        let j = job(REFERENCE_BATCH, 8, "qwen2.5-7b");
        let t = alone(&p, &j);
        // The measured 7B_8k row: 133.8 s and 112.8 s.
        assert_eq!(t.rollout, Micros(133_800_000).scale(1.08));
        assert_eq!(t.train, Micros(112_800_000).scale(2.0 / 3.0));
    }

    #[test]
    fn a_mixed_batch_of_four_takes_the_rooflines_step_ratio_below_the_engines_capacity() {
        let p = ProfileModel::builtin();
        let jobs: Vec<JobSpec> = (0..4).map(|_| job(128, 8, "qwen2.5-7b")).collect();
        let members: Vec<Member> = jobs.iter().filter_map(Member::of).collect();
        let one = alone(&p, &jobs[0]);
        let pack = pack_times(&p, &members).unwrap();
        // 4 x 128 = 512 sequences. Per H20, a step of 16 sequences reads 14 GB of weights and
        // 16 x 57,344 B x 4,096 tokens of KV: 17.76 GB at 4 TB/s, 4.44 ms; of 64 sequences
        // 29.03 GB, 7.26 ms (above the 6.05 ms of FLOPs): 1.63x the time for 4x the work.
        let mixed = pack.rollout - one.train;
        let ratio = mixed.as_secs_f64() / one.rollout.as_secs_f64();
        assert!((ratio - 7.258 / 4.4396).abs() < 1e-3, "{ratio}");
        assert_eq!(pack.train, one.train + one.train + one.train + one.train);
        // 7B_8k at 128 sequences: 88.3 s of rollout and 18.8 s of training alone; four members
        // run one iteration each per 163 s (1.52x), where a job of its own takes 107 s.
        assert_eq!(pack_period(pack), pack.rollout);
        let slowdown = pack_period(pack).as_secs_f64() / one.solo().as_secs_f64();
        assert!((1.50..1.54).contains(&slowdown), "{slowdown}");
    }

    #[test]
    fn past_the_kv_cache_a_batch_waits_for_slots() {
        let base = weave_core::lora::base("qwen2.5-7b").unwrap();
        let cap = engine_sequences(base, 8192, 1);
        let p = ProfileModel::builtin();
        let at_cap = mixed_rollout(&p, base, 8192, 1, u64::from(cap));
        let double = mixed_rollout(&p, base, 8192, 1, 2 * u64::from(cap));
        assert!(double.0.abs_diff(at_cap.scale(2.0).0) <= 1, "twice the batch, twice the time: {double:?} {at_cap:?}");
    }

    #[test]
    fn members_of_different_bases_form_no_pack() {
        let p = ProfileModel::builtin();
        let mut other = job(128, 8, "qwen2.5-7b");
        other.lora.as_mut().unwrap().base = "qwen3-4b".into();
        let a = job(128, 8, "qwen2.5-7b");
        let members = [Member::of(&a).unwrap(), Member { job: &other, lora: other.lora.as_ref().unwrap() }];
        assert!(pack_times(&p, &members).is_none());
    }

    #[test]
    fn adapters_past_the_engines_budget_form_no_pack() {
        let p = ProfileModel::builtin();
        let mut big = job(128, 8, "qwen2.5-7b");
        big.lora.as_mut().unwrap().rank = 512;
        let each = big.lora.as_ref().unwrap().engine_bytes().0;
        let budget = weave_core::lora::engine_adapter_budget(1).0;
        let fit = (budget / each) as usize;
        let jobs: Vec<JobSpec> = (0..=fit).map(|_| big.clone()).collect();
        let members: Vec<Member> = jobs.iter().filter_map(Member::of).collect();
        assert!(pack_times(&p, &members[..fit]).is_some(), "{fit} adapters of {each} B fit {budget} B");
        assert!(pack_times(&p, &members).is_none(), "{} adapters overflow {budget} B", fit + 1);
    }
}
