//! GPU kinds and their published specifications.

use crate::units::Price;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Every node in the paper's testbed has 8 GPUs.
pub const GPUS_PER_NODE: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GpuKind {
    /// Inference GPU used for rollout.
    H20,
    /// Training GPU.
    H800,
}

impl fmt::Display for GpuKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuKind::H20 => "H20",
            GpuKind::H800 => "H800",
        })
    }
}

/// Published per-GPU figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    pub kind: GpuKind,
    pub bf16_tflops: f64,
    pub hbm_gb: f64,
    pub hbm_tb_per_s: f64,
    pub default_price: Price,
}

impl GpuKind {
    /// [paper, Table 1].
    pub fn spec(self) -> GpuSpec {
        match self {
            GpuKind::H20 => GpuSpec {
                kind: self,
                bf16_tflops: 148.0,
                hbm_gb: 96.0,
                hbm_tb_per_s: 4.0,
                default_price: Price(1_850_000),
            },
            GpuKind::H800 => GpuSpec {
                kind: self,
                bf16_tflops: 989.5,
                hbm_gb: 80.0,
                hbm_tb_per_s: 3.35,
                default_price: Price(5_280_000),
            },
        }
    }
}
