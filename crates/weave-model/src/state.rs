//! Cached host-memory state per 8-GPU node [paper, Table 2], GB:
//!
//! | model    | 3B    | 7B           | 14B          | 32B           |
//! | rollout  | 113.4 | 275.7        | 445.4        | 490.3 (TP=2)  |
//! | training | 156.2 | 240.0 (TP=2) | 456.1 (TP=2) | 520.4 (TP=4)  |
//!
//! The 32B figures are per node of a two-node deployment. We interpolate the job's *total*
//! state (per node x the reference width) linearly in model size and divide by the job's
//! width, so a job spread over more nodes holds less on each.

use crate::interp::piecewise;
use weave_core::{Bytes, JobSpec, ModelSize};

/// (model B, total state GB across the reference width).
const ROLLOUT_TOTAL_GB: &[(f64, f64)] = &[(3.0, 113.4), (7.0, 275.7), (14.0, 445.4), (32.0, 2.0 * 490.3)];
const TRAINING_TOTAL_GB: &[(f64, f64)] = &[(3.0, 156.2), (7.0, 240.0), (14.0, 456.1), (32.0, 2.0 * 520.4)];

fn per_node(points: &[(f64, f64)], model: ModelSize, width: u32) -> Bytes {
    Bytes::from_gb_f64(piecewise(points, model.params_b()) / width.max(1) as f64)
}

/// Host DRAM one rollout node holds for a job of `model` spread over `width` rollout nodes.
pub fn rollout_state_per_node(model: ModelSize, width: u32) -> Bytes {
    per_node(ROLLOUT_TOTAL_GB, model, width)
}

/// Host DRAM one training node holds for a job of `model` trained on `width` nodes.
pub fn training_state_per_node(model: ModelSize, width: u32) -> Bytes {
    per_node(TRAINING_TOTAL_GB, model, width)
}

/// Convenience: a job's rollout state per node at its own width.
pub fn job_rollout_state(job: &JobSpec) -> Bytes {
    rollout_state_per_node(job.job_type.model, job.rollout_nodes)
}

/// Convenience: a job's training state per node at its own width (a LoRA job's: the base
/// frozen, its adapter trained, [`lora_training_state_per_node`]).
pub fn job_training_state(job: &JobSpec) -> Bytes {
    match job.lora.as_ref().filter(|l| l.base_model().is_some()) {
        Some(lora) => lora_training_state_per_node(job.job_type.model, job.train_nodes, lora.params()),
        None => training_state_per_node(job.job_type.model, job.train_nodes),
    }
}

/// Full fine-tuning's resident bytes per parameter: bf16 weight and gradient, fp32 master
/// weight, Adam's two moments.
const FULL_TRAIN_BYTES_PER_PARAM: f64 = 16.0;

/// Host DRAM one training node holds for LoRA adapters of `adapter_params` trainable parameters
/// in all on a frozen base of `model` (one job's adapter, or a pack's): the table's full
/// fine-tuning state scaled by what LoRA keeps resident, the base's bf16 weights (2 bytes per
/// parameter: no gradient, no optimizer state) and 16 bytes per adapter parameter, against
/// 16 per parameter of the whole model. (Scaling the table keeps its overheads, buffers and
/// the like, in proportion: an assumption; no published LoRA figure stands beside Table 2.)
pub fn lora_training_state_per_node(model: ModelSize, width: u32, adapter_params: u64) -> Bytes {
    let params = model.params();
    let kept = 2.0 * params + FULL_TRAIN_BYTES_PER_PARAM * adapter_params as f64;
    let full = training_state_per_node(model, width).0 as f64;
    Bytes((full * kept / (FULL_TRAIN_BYTES_PER_PARAM * params)).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gb(b: Bytes) -> f64 {
        b.as_gb_f64()
    }

    #[test]
    fn table_2_points() {
        let m = ModelSize::billions;
        assert!((gb(rollout_state_per_node(m(7), 1)) - 275.7).abs() < 1e-6);
        assert!((gb(rollout_state_per_node(m(32), 2)) - 490.3).abs() < 1e-6);
        assert!((gb(training_state_per_node(m(14), 1)) - 456.1).abs() < 1e-6);
        assert!((gb(training_state_per_node(m(32), 2)) - 520.4).abs() < 1e-6);
    }

    #[test]
    fn a_lora_job_keeps_the_base_in_bf16_and_its_adapter_in_full() {
        let m = ModelSize::billions(7);
        // The base alone: 2 of full fine-tuning's 16 bytes per parameter, 240.0 / 8 GB.
        assert!((gb(lora_training_state_per_node(m, 1, 0)) - 30.0).abs() < 1e-6);
        // An adapter of 7e8 parameters (a tenth of the model) adds 16 bytes each, scaled alike.
        assert!((gb(lora_training_state_per_node(m, 1, 700_000_000)) - 54.0).abs() < 1e-6);
        assert!((gb(lora_training_state_per_node(m, 2, 0)) - 15.0).abs() < 1e-6, "spread over its width");
    }

    #[test]
    fn state_grows_with_model_size() {
        let mut last = 0.0;
        for b in [1u32, 3, 4, 7, 8, 14, 32, 70] {
            let s = gb(rollout_state_per_node(ModelSize::billions(b), 1));
            assert!(s > last, "{b}B: {s} <= {last}");
            last = s;
        }
    }
}
