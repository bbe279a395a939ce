#![allow(dead_code)]

use weave_core::{Bytes, ClusterConfig, JobId, Micros, ModelSize, PhaseTimes};
use weave_dispatch::from_model::switch_costs;
use weave_place::{PlaceJob, PlacePolicy, PlacerConfig, Residency};

pub fn job(id: u32, roll: u64, train: u64, slo: f64) -> PlaceJob {
    PlaceJob {
        id: JobId(id),
        times: PhaseTimes { rollout: Micros::from_secs(roll), train: Micros::from_secs(train) },
        slo,
        rollout_width: 1,
        train_width: 1,
        rollout_state: Bytes::from_gb_f64(275.7),
        train_state_total: Bytes::from_gb_f64(240.0),
        costs: switch_costs(ModelSize::billions(7)),
        sync: Micros::from_secs_f64(0.9),
        colo: None,
        variation: Default::default(),
        staleness: 0,
        spot: false,
        env_cores: 0.0,
    }
}

/// A job of `model` billion parameters: its switch costs and cached states, one node a phase.
pub fn of_model(id: u32, roll: u64, train: u64, slo: f64, model: u32) -> PlaceJob {
    let mut j = job(id, roll, train, slo);
    let m = ModelSize::billions(model);
    j.costs = switch_costs(m);
    j.rollout_state = weave_model::rollout_state_per_node(m, 1);
    j.train_state_total = weave_model::training_state_per_node(m, 1);
    j
}

pub fn config(policy: PlacePolicy) -> PlacerConfig {
    let c = ClusterConfig::default();
    PlacerConfig {
        policy,
        scaling: true,
        residency: Residency {
            rollout_dram: c.rollout.host_dram(),
            train_dram: c.training.host_dram(),
            resident: true,
            max_members: None,
        },
        rollout_node_price: c.rollout.price().cost(8, Micros(Micros::PER_HOUR)),
        train_node_price: c.training.price().cost(8, Micros(Micros::PER_HOUR)),
        spot_rollout_node_price: None,
        capacity: None,
        env_cores: None,
        env_node_cores: None,
        skip_saturated: true,
        colocate: false,
        seed: 7,
    }
}

/// A Weave placer on fixed pools of `rollout` and `training` nodes.
pub fn fixed_placer(rollout: u32, training: u32) -> weave_place::Placer {
    let mut cfg = config(PlacePolicy::Weave);
    cfg.capacity = Some((rollout, training));
    weave_place::Placer::new(cfg)
}

/// Tenant `name` entitled to `nodes` of each pool, borrowing without limit.
pub fn quota(name: &str, nodes: f64) -> weave_place::share::TenantQuota {
    weave_place::share::TenantQuota {
        name: name.into(),
        rollout_nodes: nodes,
        training_nodes: nodes,
        borrow_limit: None,
        env_cores: None,
    }
}

/// One tenant `a` entitled to `nodes` of each pool; no minimum run, a checkpoint every
/// iteration, no decay, only `high` displaces the tenant's jobs, victims stop at once.
pub fn one_tenant_policy(mode: weave_place::share::ShareMode, nodes: f64) -> weave_place::share::SharePolicy {
    weave_place::share::SharePolicy {
        mode,
        tenants: vec![quota("a", nodes)],
        min_run: Micros::ZERO,
        checkpoint_every: 1,
        half_life: None,
        preempts_own: weave_core::Priority::High,
        grace: Micros::ZERO,
    }
}

/// Running job `id` of tenant 0 as preemption sees it, one minute into its admission.
pub fn running(id: u32, priority: weave_core::Priority, unsaved: u64, held: f64) -> weave_place::share::Running {
    weave_place::share::Running { job: JobId(id), tenant: 0, priority, ran: Micros::from_secs(60), unsaved, held }
}
