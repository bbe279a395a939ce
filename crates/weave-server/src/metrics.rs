//! `/metrics`: Prometheus text exposition of the plane.

use crate::plane::Plane;
use std::fmt::Write;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

fn jobs_by_state<'a>(out: &mut String, jobs: impl Iterator<Item = &'a crate::plane::JobEntry>, queued: u64) {
    let mut counts = std::collections::BTreeMap::new();
    for j in jobs {
        *counts.entry(format!("{:?}", j.state).to_lowercase()).or_insert(0u64) += 1;
    }
    // A job re-queued after a node failure still has its failed admission's entry.
    counts.insert("queued".to_string(), queued);
    family(out, "weave_jobs", "gauge", "Jobs by state.");
    for state in ["queued", "running", "completed", "cancelled", "failed"] {
        let _ = writeln!(out, "weave_jobs{{state=\"{state}\"}} {}", counts.get(state).copied().unwrap_or(0));
    }
}

/// A label value as the Prometheus text format writes it: backslash, double quote and line
/// feed escaped, so no name can end the label or the line and forge another.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Per tenant with quotas: nominal quota and quota in use per pool, waiting jobs and
/// preemptions suffered (`only`: just that tenant's lines).
fn tenants(out: &mut String, plane: &Plane, only: Option<&str>) {
    let quotas = plane.quota_use();
    if quotas.is_empty() {
        return;
    }
    let shown = |t: &str| only.is_none_or(|o| o == t);
    family(out, "weave_tenant_quota_nodes", "gauge", "A tenant's nominal quota per pool (nodes).");
    for (name, nominal, _) in quotas.iter().filter(|q| shown(&q.0)) {
        let t = label(name);
        for (p, pool) in ["rollout", "training"].iter().enumerate() {
            let _ = writeln!(out, "weave_tenant_quota_nodes{{tenant=\"{t}\",pool=\"{pool}\"}} {}", nominal[p]);
        }
    }
    family(
        out,
        "weave_tenant_nodes_in_use",
        "gauge",
        "Quota a tenant uses per pool (shared nodes split among members).",
    );
    for (name, _, used) in quotas.iter().filter(|q| shown(&q.0)) {
        let t = label(name);
        for (p, pool) in ["rollout", "training"].iter().enumerate() {
            let _ = writeln!(out, "weave_tenant_nodes_in_use{{tenant=\"{t}\",pool=\"{pool}\"}} {:.6}", used[p]);
        }
    }
    family(out, "weave_tenant_queued_jobs", "gauge", "Jobs of a tenant waiting in the queue.");
    for (name, _, _) in quotas.iter().filter(|q| shown(&q.0)) {
        let n = plane.queue().iter().filter(|q| &q.tenant == name).count();
        let _ = writeln!(out, "weave_tenant_queued_jobs{{tenant=\"{}\"}} {n}", label(name));
    }
    family(out, "weave_tenant_preemptions_total", "counter", "Admissions of a tenant's jobs ended by preemption.");
    for (name, _, _) in quotas.iter().filter(|q| shown(&q.0)) {
        let _ =
            writeln!(out, "weave_tenant_preemptions_total{{tenant=\"{}\"}} {}", label(name), plane.preemptions(name));
    }
}

/// What a tenant's token sees: its own jobs by state (a job token: that job's) and, with
/// quotas, its own quota lines.
pub fn render_tenant(plane: &Plane, tenant: &str, job: Option<&str>) -> String {
    let mut out = String::new();
    let mine = |owner: &str, name: &str| owner == tenant && job.is_none_or(|n| n == name);
    let queued = plane.queue().iter().filter(|q| mine(&q.tenant, &q.submit.id)).count() as u64;
    jobs_by_state(&mut out, plane.jobs().filter(|j| mine(&j.tenant, &j.name)), queued);
    if job.is_none() {
        tenants(&mut out, plane, Some(tenant));
    }
    out
}

/// Every metric the server exports (the Grafana dashboard under `deploy/` uses only these);
/// for admin tokens.
pub fn render(plane: &Plane) -> String {
    let mut out = String::new();
    jobs_by_state(&mut out, plane.jobs(), plane.queue().len() as u64);
    let (r, t) = plane.placer().nodes_in_use();
    family(&mut out, "weave_nodes_in_use", "gauge", "Nodes held per pool.");
    let _ = write!(out, "weave_nodes_in_use{{pool=\"rollout\"}} {r}\nweave_nodes_in_use{{pool=\"training\"}} {t}\n");
    let c = plane.cluster();
    let (gr, gt) = (r * c.rollout.gpus_per_node, t * c.training.gpus_per_node);
    family(&mut out, "weave_gpus_in_use", "gauge", "GPUs held per pool.");
    let _ = write!(out, "weave_gpus_in_use{{pool=\"rollout\"}} {gr}\nweave_gpus_in_use{{pool=\"training\"}} {gt}\n");
    family(&mut out, "weave_groups", "gauge", "Co-execution groups.");
    let _ = writeln!(out, "weave_groups {}", plane.placer().groups().count());
    family(&mut out, "weave_hourly_cost_dollars", "gauge", "Cost per hour of the nodes held.");
    let _ = writeln!(out, "weave_hourly_cost_dollars {:.6}", plane.placer().hourly_cost().as_dollars());
    let grants = plane.stats.grants[0] + plane.stats.grants[1];
    family(&mut out, "weave_phase_grants_total", "counter", "Phases granted.");
    let _ = writeln!(out, "weave_phase_grants_total {grants}");
    let st = plane.stats;
    family(
        &mut out,
        "weave_phase_wait_seconds",
        "summary",
        "Wait from a job becoming ready for a phase to its grant (what sharing costs it).",
    );
    for (k, phase) in ["rollout", "train"].iter().enumerate() {
        let sum = st.wait_us[k] as f64 / 1e6;
        let _ = writeln!(out, "weave_phase_wait_seconds_sum{{phase=\"{phase}\"}} {sum:.6}");
        let _ = writeln!(out, "weave_phase_wait_seconds_count{{phase=\"{phase}\"}} {}", st.grants[k]);
    }
    family(&mut out, "weave_iterations_total", "counter", "Completed iterations.");
    let _ = writeln!(out, "weave_iterations_total {}", st.iterations);
    family(
        &mut out,
        "weave_iterations_within_slo_total",
        "counter",
        "Completed iterations whose wall-clock period stayed within the job's SLO times its own measured phases.",
    );
    let _ = writeln!(out, "weave_iterations_within_slo_total {}", st.iterations_within_slo);
    if plane.lends() {
        lending(&mut out, plane);
    }
    tenants(&mut out, plane, None);
    out
}

/// Loans of idle rollout blocks (`weave serve --lending`).
fn lending(out: &mut String, plane: &Plane) {
    let st = plane.stats;
    family(out, "weave_loans_out", "gauge", "Rollout blocks lent to another group's rollout now.");
    let _ = writeln!(out, "weave_loans_out {}", plane.loans_out());
    family(out, "weave_loans_total", "counter", "Rollout blocks lent.");
    let _ = writeln!(out, "weave_loans_total {}", st.loans);
    family(out, "weave_loans_reclaimed_early_total", "counter", "Loans whose deadline came forward for the lender.");
    let _ = writeln!(out, "weave_loans_reclaimed_early_total {}", st.loans_reclaimed_early);
    family(
        out,
        "weave_loan_return_late_seconds",
        "summary",
        "How long after its deadline a borrower's driver gave the lent nodes back (0 when before it).",
    );
    let _ = writeln!(out, "weave_loan_return_late_seconds_sum {:.6}", st.loan_returns_late_us as f64 / 1e6);
    let _ = writeln!(out, "weave_loan_return_late_seconds_count {}", st.loan_returns);
}

/// Long-polls waiting for a phase grant right now (held connections, not jobs).
pub fn parked(out: &mut String, n: u64) {
    family(out, "weave_parked_phase_requests", "gauge", "Phase-start long-polls waiting for a grant now.");
    let _ = writeln!(out, "weave_parked_phase_requests {n}");
}

/// A replica of `weave serve --etcd` answering is the active one: its name and the records in
/// the replicated log (a standby answers 503 until it leads).
/// The replicas of a control plane on etcd, as the active one sees them (`/metrics`, `/status`).
#[derive(Clone, Debug, Default)]
pub struct Replicas {
    /// The active replica's name (this one).
    pub active: String,
    /// Records in the replicated log, and those its newest snapshot covers.
    pub records: u64,
    pub snapshot_records: u64,
    /// Each standby that reported, and the records it has applied.
    pub standbys: Vec<(String, u64)>,
}

pub fn replicas(out: &mut String, r: &Replicas) {
    family(out, "weave_replica_active", "gauge", "1 on the replica that leads the replicated log (it is answering).");
    let _ = writeln!(out, "weave_replica_active{{replica=\"{}\"}} 1", label(&r.active));
    family(out, "weave_replicated_log_records", "gauge", "Records in the replicated log in etcd.");
    let _ = writeln!(out, "weave_replicated_log_records {}", r.records);
    family(
        out,
        "weave_replicated_log_snapshot_records",
        "gauge",
        "Records the newest snapshot in etcd covers (a replica that starts reads it and the records after it).",
    );
    let _ = writeln!(out, "weave_replicated_log_snapshot_records {}", r.snapshot_records);
    family(
        out,
        "weave_replica_standby_lag_records",
        "gauge",
        "Records a standby has still to apply (reported every half second).",
    );
    for (standby, applied) in &r.standbys {
        let _ = writeln!(
            out,
            "weave_replica_standby_lag_records{{replica=\"{}\"}} {}",
            label(standby),
            r.records.saturating_sub(*applied)
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_label_value_cannot_end_its_label_or_line() {
        assert_eq!(super::label("team-a"), "team-a");
        assert_eq!(super::label("a\"} 1\nweave_fake 9"), "a\\\"} 1\\nweave_fake 9");
        assert_eq!(super::label("back\\slash"), "back\\\\slash");
    }
}
