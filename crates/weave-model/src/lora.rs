//! LoRA jobs: their phase times, what each holds, and a shared-base engine's mixed batch.
//!
//! Calibration, all cited:
//! - **Mixed-adapter decoding costs about 8% over the base.** Punica (Chen et al., MLSys 2024,
//!   arXiv 2310.18547) batches requests of different adapters with its SGMV kernel at "only
//!   2 ms latency per token" added, against a 7B decode step of about 25 ms at a full batch;
//!   S-LoRA (Sheng et al., 2023) serves thousands of adapters on one base at up to 4x vLLM's
//!   throughput. How many distinct adapters share a batch barely matters to SGMV, so one
//!   adapter on its own engine pays the same 8% (engines serve a job's adapter unmerged, as
//!   vLLM's LoRA support does).
//! - **LoRA training takes two thirds of full fine-tuning's compute** ("LoRA Without Regret",
//!   Schulman et al., Thinking Machines 2025: about 67%; the base's weight gradients are
//!   never formed). Training stays FLOP-bound (the profile model's batch exponent 1), so
//!   training several adapters in one batch saves no time: a shared trainer trains its
//!   members' adapters one after another, with their optimizer states resident (megabytes).
//! - **A rollout's time follows its decode step, on the GPU's roofline**: a step reads the
//!   weights once and each sequence's KV cache (at half the generation length on average), or
//!   computes two FLOPs per parameter and sequence, whichever takes longer on the GPU's
//!   published bandwidth and bf16 rate (H20: 4 TB/s, 148 TFLOPS; H800: 3.35 TB/s, 989.5). The
//!   profile table's measured time at its reference batch anchors it: a batch `b` takes
//!   `step(b) / step(512)` of it. This is why Punica's 12x holds: below the reference batch
//!   the weights' reads dominate, so one small job leaves most of a step's bandwidth unused
//!   and a mixed batch fills it. (The profile model's `batch^0.5`, which full-model jobs keep
//!   so their outputs stay as they were, is an assumption no published figure covers; for a
//!   7B at 8k it says a 128-sequence batch takes 0.50 of the reference, the roofline 0.61.)
//! - **Until the engine's KV cache is full**; past that, sequences wait for a slot and time
//!   grows linearly with the batch. The capacity is the KV cache of every sequence at its full
//!   length (conservative: real responses are shorter), never below the profile table's
//!   reference batch (which was measured, so it ran).

use weave_core::lora::{BaseModel, LoraSpec};
use weave_core::{Bytes, GpuKind, JobSpec, Micros, PhaseTimes, GPUS_PER_NODE};

/// Mixed-adapter decoding's cost over the base (Punica: 2 ms per token on a ~25 ms step).
pub const MIX_OVERHEAD: f64 = 0.08;

/// LoRA training's compute against full fine-tuning's ("LoRA Without Regret": about 67%).
pub const TRAIN_COMPUTE: f64 = 2.0 / 3.0;

/// The share of an engine's GPU memory vLLM gives weights and KV cache (its default
/// `gpu_memory_utilization`).
const GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// Bytes a trainer keeps per adapter parameter: bf16 weight and gradient, fp32 master copy,
/// Adam's two moments.
const TRAIN_BYTES_PER_PARAM: u64 = 2 + 2 + 4 + 8;

/// A LoRA job's phase times on an engine of `gpu` and a trainer of its own, from its base's:
/// `reference_rollout` (the base's rollout at `reference_batch`, measured or scaled by the
/// profile) moved along the roofline to the job's batch, with the mixing kernels' overhead;
/// two thirds of `train` (the base's training at the job's batch).
pub fn adapter_times(
    base: &BaseModel,
    job: &JobSpec,
    gpu: GpuKind,
    rollout_width: u32,
    (reference_batch, reference_rollout): (u32, Micros),
    train: Micros,
) -> PhaseTimes {
    let scale = step_ratio(base, (job.job_type.max_tokens, rollout_width, gpu), f64::from(job.batch), reference_batch);
    PhaseTimes { rollout: reference_rollout.scale(scale * (1.0 + MIX_OVERHEAD)), train: train.scale(TRAIN_COMPUTE) }
}

/// How much longer a rollout of `batch` sequences takes than one of `reference_batch` on an
/// engine of `(max tokens, nodes, gpu)`: the ratio of their decode steps on the roofline.
pub fn step_ratio(
    base: &BaseModel,
    (tokens, nodes, gpu): (u32, u32, GpuKind),
    batch: f64,
    reference_batch: u32,
) -> f64 {
    step(base, tokens, nodes, gpu, batch) / step(base, tokens, nodes, gpu, f64::from(reference_batch))
}

/// One decode step of `batch` sequences on an engine of `nodes` nodes of `gpu`, seconds: the
/// roofline (weights and KV cache read, or the FLOPs, whichever is longer). Tensor parallelism
/// within a node where the weights take more than half a GPU.
pub fn step(base: &BaseModel, max_tokens: u32, nodes: u32, gpu: GpuKind, batch: f64) -> f64 {
    let spec = gpu.spec();
    let gpus = f64::from(GPUS_PER_NODE * nodes.max(1));
    let params = base.params();
    let weights = params * 2.0;
    let tp = (weights / (0.5 * spec.hbm_gb * 1e9)).ceil().clamp(1.0, f64::from(GPUS_PER_NODE));
    let context = f64::from(max_tokens) / 2.0;
    let read = weights / tp + batch / gpus * kv_per_token(base) * context;
    let memory = read / (spec.hbm_tb_per_s * 1e12);
    let compute = 2.0 * params * batch / gpus / (spec.bf16_tflops * 1e12);
    memory.max(compute)
}

/// KV cache bytes per token (keys and values, every layer, bf16).
fn kv_per_token(base: &BaseModel) -> f64 {
    2.0 * f64::from(base.layers) * f64::from(base.kv_dim) * 2.0
}

/// What a job's adapter holds on a trainer (weights, gradient, optimizer state).
pub fn adapter_train_bytes(lora: &LoraSpec) -> Bytes {
    Bytes(lora.params() * TRAIN_BYTES_PER_PARAM)
}

/// Sequences an engine of `rollout_nodes` H20 nodes keeps in flight for `base` at `max_tokens`
/// each: its KV cache (what the weights leave of 90% of its memory, the weights split over the
/// nodes' GPUs as tensor parallelism over each node) over one sequence's KV at full length.
/// (A shared engine never counts fewer than the profile's measured batch: see `shared_engine`.)
pub fn engine_sequences(base: &BaseModel, max_tokens: u32, rollout_nodes: u32) -> u32 {
    let gpus = f64::from(GPUS_PER_NODE * rollout_nodes.max(1));
    let weights = base.params() * 2.0;
    let hbm = GpuKind::H20.spec().hbm_gb * 1e9 * gpus * GPU_MEMORY_UTILIZATION;
    // Each node holds a full copy of the weights (data parallel across nodes).
    let kv_room = (hbm - weights * f64::from(rollout_nodes.max(1))).max(0.0);
    let sequences = kv_room / (kv_per_token(base) * f64::from(max_tokens.max(1)));
    sequences as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_follows_the_h20s_roofline() {
        let base = weave_core::lora::base("qwen2.5-7b").unwrap();
        let ms = |b: f64| step(base, 8192, 1, GpuKind::H20, b) * 1e3;
        assert!((ms(512.0) - 7.258).abs() < 1e-3, "{}", ms(512.0));
        assert!((ms(128.0) - 4.4396).abs() < 1e-3, "{}", ms(128.0));
        // 256 sequences per GPU: 2 x 7e9 x 256 / 148 TFLOPS = 24.2 ms of FLOPs, above the
        // 74.1 GB of reads (18.5 ms): compute-bound.
        assert!((ms(2048.0) - 24.216).abs() < 1e-2, "{}", ms(2048.0));
    }

    #[test]
    fn the_kv_cache_bounds_the_sequences_in_flight() {
        let base = weave_core::lora::base("qwen2.5-7b").unwrap();
        // (8 x 96 GB x 0.9 - 14 GB of weights) / (57,344 bytes of KV per token x 8,192 tokens).
        assert_eq!(engine_sequences(base, 8192, 1), 1_441);
        // A 32B engine keeps 292 sequences of 8k on one node, 584 on two.
        let big = weave_core::lora::base("qwen2.5-32b").unwrap();
        assert_eq!(engine_sequences(big, 8192, 1), 292);
        assert_eq!(engine_sequences(big, 8192, 2), 584);
    }
}
