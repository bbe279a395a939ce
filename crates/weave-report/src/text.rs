//! The replay's reports as text tables, as `weave simulate` prints them: the headline
//! comparison, then money, staleness, spot and lending where the run has them.

use crate::table;
use serde::Serialize;
use weave_sim::PolicyReport;

fn ratio(r: Option<f64>) -> String {
    r.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into())
}

pub fn render(reports: &[&PolicyReport]) -> String {
    // Only with bounded-staleness jobs: the solo baseline that runs them asynchronously.
    let with_async = reports.iter().any(|r| r.vs_solo_async.is_some());
    let mut header = vec!["policy", "cost $", "$/h", "lower bound $", "iters/$1k", "vs solo", "vs colo"];
    if with_async {
        header.push("vs solo-async");
    }
    header.extend(["H20 GPU-h", "H800 GPU-h", "peak H20", "peak H800", "idle H20 GPU-h", "idle H800 GPU-h"]);
    let mut cost = table::new(&header);
    for r in reports {
        let mut row = vec![
            r.policy.clone(),
            format!("{:.0}", r.total_cost.as_dollars()),
            format!("{:.1}", r.cost_per_hour),
            format!("{:.0}", r.lower_bound_cost.as_dollars()),
            format!("{:.1}", r.iterations_per_k_dollars),
            ratio(r.vs_solo_disagg),
            ratio(r.vs_colocated),
        ];
        if with_async {
            row.push(ratio(r.vs_solo_async));
        }
        row.extend([
            format!("{:.0}", r.rollout.gpu_hours),
            format!("{:.0}", r.training.gpu_hours),
            r.rollout.peak_gpus.to_string(),
            r.training.peak_gpus.to_string(),
            format!("{:.0}", r.rollout.idle_gpu_hours),
            format!("{:.0}", r.training.idle_gpu_hours),
        ]);
        cost.add_row(row);
    }
    table::align_numbers(&mut cost);
    let mut service = table::new(&[
        "policy",
        "jobs",
        "iterations",
        "slowdown p50",
        "p99",
        "max",
        "SLO met (jobs)",
        "SLO met (iters)",
        "direct/scaling/isolated/colocated",
        "moves",
        "queued",
        "rejected",
    ]);
    for r in reports {
        service.add_row(vec![
            r.policy.clone(),
            r.jobs.to_string(),
            r.iterations.to_string(),
            format!("{:.3}", r.slowdown.p50),
            format!("{:.3}", r.slowdown.p99),
            format!("{:.3}", r.slowdown.max),
            format!("{:.1}%", r.slo_attainment_jobs * 100.0),
            format!("{:.1}%", r.slo_attainment_iterations * 100.0),
            format!(
                "{}/{}/{}/{}",
                r.admissions.direct, r.admissions.scaling, r.admissions.isolated, r.admissions.colocated
            ),
            r.events.consolidation_moves.to_string(),
            format!("{} (max {:.1} h)", r.queued_jobs, r.max_queue_delay_h),
            r.rejected.to_string(),
        ]);
    }
    table::align_numbers(&mut service);
    let extra = [
        render_money(reports),
        render_environment(reports),
        render_staleness(reports),
        render_spot(reports),
        render_lending(reports),
    ];
    format!("{cost}\n{service}\n{}", extra.concat())
}

/// The environment tier, when the run has agentic jobs: sandbox core-hours and their share
/// of the bill.
pub fn render_environment(reports: &[&PolicyReport]) -> String {
    if !reports.iter().any(|r| r.environment.is_some()) {
        return String::new();
    }
    let mut t = table::new(&["policy", "sandbox core-h", "environment $", "environment share"]);
    for r in reports {
        let Some(e) = &r.environment else { continue };
        t.add_row(vec![
            r.policy.clone(),
            format!("{:.0}", e.core_hours),
            format!("{:.0}", e.cost.as_dollars()),
            format!("{:.1}%", e.share * 100.0),
        ]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}

/// Lending, when on: the loans made, what they saved, and what the lenders gave (never a delay).
pub fn render_lending(reports: &[&PolicyReport]) -> String {
    if !reports.iter().any(|r| r.lending.is_some()) {
        return String::new();
    }
    let mut t = table::new(&[
        "policy",
        "loans",
        "reclaimed early",
        "lender delays",
        "lent H20 GPU-h",
        "loading GPU-h",
        "lent $",
        "rollout h saved",
    ]);
    for r in reports {
        let Some(l) = r.lending else { continue };
        let c = l.counts;
        t.add_row(vec![
            r.policy.clone(),
            c.loans.to_string(),
            c.reclaimed_early.to_string(),
            c.lender_delays.to_string(),
            format!("{:.0}", l.lent_gpu_hours),
            format!("{:.1}", l.loading_gpu_hours),
            r.money.lent.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cost.as_dollars())),
            format!("{:.1}", l.saved_rollout_hours),
        ]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}

/// The spot tier, when the cluster has one: who ran on it, what it cost, what preemptions did.
pub fn render_spot(reports: &[&PolicyReport]) -> String {
    if !reports.iter().any(|r| r.spot.is_some()) {
        return String::new();
    }
    let mut t = table::new(&[
        "policy",
        "started on spot",
        "spot H20 GPU-h",
        "spot $",
        "preempted",
        "moved/restarted/idle",
        "started short",
        "rollout delay h",
        "lost to preemption $",
    ]);
    for r in reports {
        let Some(s) = r.spot else { continue };
        let c = s.counts;
        t.add_row(vec![
            r.policy.clone(),
            c.spot_jobs.to_string(),
            format!("{:.0}", s.spot_gpu_hours),
            format!("{:.0}", s.spot_cost.as_dollars()),
            c.preemptions.to_string(),
            format!("{}/{}/{}", c.moved, c.restarted, c.idle),
            c.shortages.to_string(),
            format!("{:.2}", s.delay_hours),
            r.money.lost_to_preemption.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cost.as_dollars())),
        ]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}

/// Bounded-staleness jobs, when the trace has any: how far behind their rollouts ran under
/// each policy (the synchronous baselines run them on-policy).
pub fn render_staleness(reports: &[&PolicyReport]) -> String {
    if !reports.iter().any(|r| r.shows_staleness()) {
        return String::new();
    }
    let mut t = table::new(&["policy", "stale jobs", "declared k (mean)", "versions behind (mean)", "vs solo-async"]);
    for r in reports {
        let [jobs, declared, behind] = r.staleness_cells();
        t.add_row(vec![r.policy.clone(), jobs, declared, behind, ratio(r.vs_solo_async)]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}

/// Where the money goes: each policy's cost split by what the held GPUs did.
pub fn render_money(reports: &[&PolicyReport]) -> String {
    let mut t = table::new(&[
        "policy",
        "busy $",
        "switching $",
        "sync $",
        "idle alone in a group $",
        "other idle $",
        "busy share",
        "idle alone share",
        "other idle share",
    ]);
    for r in reports {
        let m = &r.money;
        let d = |p: &weave_sim::SplitPart| format!("{:.0}", p.cost.as_dollars());
        let pct = |p: &weave_sim::SplitPart| format!("{:.1}%", p.share * 100.0);
        t.add_row(vec![
            r.policy.clone(),
            d(&m.busy),
            d(&m.switching),
            d(&m.sync),
            d(&m.idle_alone),
            d(&m.idle_other),
            pct(&m.busy),
            pct(&m.idle_alone),
            pct(&m.idle_other),
        ]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}

/// One cell of `weave sweep spot`: a discount and a preemption rate.
#[derive(Serialize)]
pub struct SpotSweepRow {
    pub discount_pct: f64,
    pub preemptions_per_node_hour: f64,
    pub weave: PolicyReport,
    pub spot_only: PolicyReport,
    /// What the sweep recommends at this cell (`weave_sim::spot_plan`): never below on-demand
    /// Weave, never worse at a deeper discount.
    pub recommended: Option<weave_sim::spot_plan::SpotPlan>,
}

#[derive(Serialize)]
pub struct SpotSweep {
    pub on_demand: PolicyReport,
    pub rows: Vec<SpotSweepRow>,
}

/// `weave sweep spot`'s table: Weave on a spot rollout tier against on-demand Weave and a
/// spot-only baseline, per discount and preemption rate (`jobs`: the trace's job count).
pub fn render_spot_sweep(s: &SpotSweep, jobs: usize) -> String {
    let mut t = table::new(&[
        "discount",
        "preemptions /node-h",
        "weave spot iters/$1k",
        "$/iter vs on-demand weave",
        "started on spot",
        "SLO met (jobs)",
        "preempted",
        "moved/restarted/idle",
        "lost to preemption $",
        "spot-only iters/$1k",
        "spot-only SLO met",
        "weave vs spot-only",
        "recommended iters/$1k",
    ]);
    let per_iteration = |r: &PolicyReport| r.total_cost.as_dollars() / r.iterations.max(1) as f64;
    let base = per_iteration(&s.on_demand);
    let pct = |v: f64| format!("{:.1}%", v * 100.0);
    for r in &s.rows {
        let (w, b) = (&r.weave, &r.spot_only);
        let spot = spot_cells(w.spot);
        t.add_row(vec![
            format!("{:.0}%", r.discount_pct),
            format!("{}", r.preemptions_per_node_hour),
            format!("{:.1}", w.iterations_per_k_dollars),
            format!("{:+.1}%", (per_iteration(w) / base - 1.0) * 100.0),
            format!("{} of {}", spot.0, jobs),
            pct(w.slo_attainment_jobs),
            spot.1.to_string(),
            spot.2,
            w.money.lost_to_preemption.map_or_else(|| "-".into(), |p| format!("{:.0}", p.cost.as_dollars())),
            format!("{:.1}", b.iterations_per_k_dollars),
            pct(b.slo_attainment_jobs),
            format!("{:.2}x", w.iterations_per_k_dollars / b.iterations_per_k_dollars.max(f64::MIN_POSITIVE)),
            r.recommended.map_or_else(|| "-".into(), recommended_cell),
        ]);
    }
    table::align_numbers(&mut t);
    format!(
        "sweep: spot (on-demand weave: {:.1} iters/$1k, ${:.2}/iteration, SLO met {})\n{t}\n",
        s.on_demand.iterations_per_k_dollars,
        base,
        pct(s.on_demand.slo_attainment_jobs)
    )
}

/// A recommended plan: its iterations per $1k, and on demand or the discount it plans as.
fn recommended_cell(p: weave_sim::spot_plan::SpotPlan) -> String {
    match p.planned_at_pct {
        None => format!("{:.1} on demand", p.iterations_per_k_dollars),
        Some(d) => format!("{:.1} planned at {d:.0}%", p.iterations_per_k_dollars),
    }
}

/// The spot columns of a report: jobs admitted on spot, preemptions, and how they were met.
fn spot_cells(s: Option<weave_sim::metrics::SpotReport>) -> (u64, u64, String) {
    match s {
        Some(s) => {
            let c = s.counts;
            (c.spot_jobs, c.preemptions, format!("{}/{}/{}", c.moved, c.restarted, c.idle))
        }
        None => (0, 0, "-".into()),
    }
}
