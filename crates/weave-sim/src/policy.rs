//! The policies a replay can run, by name.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use weave_place::PlacePolicy;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Full Weave: cheapest feasible placement per unit of work, co-located mode as one of
    /// the options, consolidation of groups that fragment, warm (host-DRAM) switching,
    /// rollout scaling, long-tail migration.
    Weave,
    /// The paper's Weave: disaggregated groups only (direct packing, rollout scaling or a new
    /// group), placed once, never consolidated.
    WeaveDisaggOnly,
    /// Weave without long-tail migration (see `Policy::migration`).
    WeaveNoMigration,
    /// Weave without rollout scaling: direct packing or a new group.
    WeaveNoScaling,
    /// Weave's groups without host-DRAM residency: every switch is cold.
    WeaveCold,
    /// Every job on its own rollout and training nodes for its whole life, on-policy (a
    /// bounded-staleness job runs synchronously).
    SoloDisagg,
    /// Every job on its own rollout and training nodes, with its declared staleness: its
    /// rollouts overlap its trainings (the AReaL / veRL one-step-off-policy way). The same as
    /// `solo-disagg` for on-policy jobs.
    SoloAsync,
    /// Every job on its own H800 node(s) running both phases (the `colo` profile).
    Colocated,
    /// Co-execution groups, random feasible placement.
    Random,
    /// Co-execution groups, greedy most-idle placement.
    MostIdle,
    /// Weave as it was before the third tier, for agentic jobs: each sandbox starts when its
    /// rollout begins (environment time on the rollout GPUs), and admission does not see the
    /// environment's tails. The same as `weave` for other jobs.
    WeaveTwoTier,
    /// RollArt's way (one job per pool set, no co-scheduling): every job on its own rollout
    /// and training nodes, sandboxes started ahead, trajectory-level asynchrony with
    /// staleness 1 (its rollout n overlaps training n - 1).
    RollArt,
    /// Weave as it was before LoRA jobs shared a base: each LoRA job a full model that takes
    /// its turn in its group (its own engine and trainer while it runs). The same as `weave`
    /// for other jobs.
    WeaveFullModel,
}

impl Policy {
    pub const ALL: [Policy; 10] = [
        Policy::Weave,
        Policy::WeaveDisaggOnly,
        Policy::WeaveNoMigration,
        Policy::WeaveNoScaling,
        Policy::WeaveCold,
        Policy::SoloDisagg,
        Policy::SoloAsync,
        Policy::Colocated,
        Policy::Random,
        Policy::MostIdle,
    ];

    /// The agentic baselines: run (by default and with `all`) when a trace has agentic jobs.
    pub const AGENTIC: [Policy; 2] = [Policy::WeaveTwoTier, Policy::RollArt];

    /// The LoRA baseline: run (by default and with `all`) when a trace has LoRA jobs.
    pub const LORA: [Policy; 1] = [Policy::WeaveFullModel];

    /// What `weave simulate` runs by default.
    pub const MAIN: [Policy; 6] = [
        Policy::Weave,
        Policy::WeaveDisaggOnly,
        Policy::SoloDisagg,
        Policy::Colocated,
        Policy::Random,
        Policy::MostIdle,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Weave => "weave",
            Policy::WeaveDisaggOnly => "weave-disagg-only",
            Policy::WeaveNoMigration => "weave-no-migration",
            Policy::WeaveNoScaling => "weave-no-scaling",
            Policy::WeaveCold => "weave-cold",
            Policy::SoloDisagg => "solo-disagg",
            Policy::SoloAsync => "solo-async",
            Policy::Colocated => "colocated",
            Policy::Random => "random",
            Policy::MostIdle => "most-idle",
            Policy::WeaveTwoTier => "weave-two-tier",
            Policy::RollArt => "rollart",
            Policy::WeaveFullModel => "weave-full-model",
        }
    }

    /// The placer behind a group-based policy; `None` for the co-located baseline.
    pub fn placement(self) -> Option<PlacePolicy> {
        match self {
            Policy::Colocated => None,
            Policy::Random => Some(PlacePolicy::Random),
            Policy::MostIdle => Some(PlacePolicy::MostIdle),
            Policy::SoloDisagg | Policy::SoloAsync | Policy::RollArt => Some(PlacePolicy::Isolate),
            _ => Some(PlacePolicy::Weave),
        }
    }

    /// Whether the placer may choose co-located mode and consolidation moves jobs: full
    /// Weave and its feature ablations, not the paper's disaggregated-only Weave.
    pub fn colocate(self) -> bool {
        matches!(
            self,
            Policy::Weave
                | Policy::WeaveNoMigration
                | Policy::WeaveNoScaling
                | Policy::WeaveCold
                | Policy::WeaveTwoTier
                | Policy::WeaveFullModel
        )
    }

    /// Whether LoRA jobs of one base share its engine and trainer (packs): Weave and its
    /// ablations, not `weave-full-model` or the baselines.
    pub fn shares_bases(self) -> bool {
        matches!(self, Policy::Weave | Policy::WeaveNoMigration | Policy::WeaveNoScaling | Policy::WeaveCold)
    }

    /// Whether agentic jobs' sandboxes start during their previous training, off the rollout
    /// GPUs, and admission sees the environment's tails: Weave (with its ablations) and
    /// RollArt; not the paper's Weave, `weave-two-tier` or the other baselines.
    pub fn three_tier(self) -> bool {
        matches!(
            self,
            Policy::Weave | Policy::WeaveNoMigration | Policy::WeaveNoScaling | Policy::WeaveCold | Policy::RollArt
        )
    }

    pub fn scaling(self) -> bool {
        self != Policy::WeaveNoScaling
    }

    pub fn resident(self) -> bool {
        self != Policy::WeaveCold
    }

    /// Whether lending idle rollout blocks across groups applies (when asked for): Weave and
    /// its ablations, not the baselines.
    pub fn lends(self) -> bool {
        self.placement() == Some(PlacePolicy::Weave)
    }

    /// Long-tail migration on shared rollout blocks: every co-execution policy but the
    /// `weave-no-migration` ablation (solo jobs never share a block; colocated has none).
    pub fn migration(self) -> bool {
        !matches!(
            self,
            Policy::WeaveNoMigration | Policy::SoloDisagg | Policy::SoloAsync | Policy::Colocated | Policy::RollArt
        )
    }

    /// Whether jobs run with their declared bounded staleness: every group policy but the
    /// synchronous solo baseline; the co-located baseline is on-policy too (both phases take
    /// turns on the same GPUs).
    pub fn runs_stale(self) -> bool {
        !matches!(self, Policy::SoloDisagg | Policy::Colocated)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Policy {
    /// `named` and the baselines `jobs` call for, each once: the agentic ones where there are
    /// agentic jobs, `weave-full-model` (today's Weave, a LoRA job as a full model) where there
    /// are LoRA jobs.
    pub fn with_baselines_for(mut named: Vec<Policy>, jobs: &[weave_core::JobSpec]) -> Vec<Policy> {
        let agentic = jobs.iter().any(|j| j.agentic.is_some()).then_some(&Policy::AGENTIC[..]);
        let lora = jobs.iter().any(|j| j.lora.is_some()).then_some(&Policy::LORA[..]);
        for p in agentic.into_iter().chain(lora).flatten() {
            if !named.contains(p) {
                named.push(*p);
            }
        }
        named
    }

    /// The policies a `--policy` list names (`all`: every one), each once, in the order given.
    pub fn parse_list(names: &[String]) -> Result<Vec<Policy>, String> {
        if names.iter().any(|n| n == "all") {
            return Ok(Policy::ALL.to_vec());
        }
        // (`all` adds the agentic baselines where the trace has agentic jobs: see the CLI.)
        let mut out = Vec::new();
        for n in names {
            let p: Policy = n.trim().parse()?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err("--policy: name at least one policy".into());
        }
        Ok(out)
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "dedicated" {
            // One engine and one trainer per job: what solo-disagg is for LoRA jobs.
            return Ok(Policy::SoloDisagg);
        }
        let known = || Policy::ALL.into_iter().chain(Policy::AGENTIC).chain(Policy::LORA);
        known().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = known().map(|p| p.name()).collect();
            format!("unknown policy `{s}` (expected one of {})", names.join(", "))
        })
    }
}
