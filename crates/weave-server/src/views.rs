//! Jobs and events as each caller may see them: the wire view of a job (running or queued)
//! and the names and events shown to a job token, a tenant or an admin. Used by the HTTP API
//! and the status page alike.

use crate::auth::Caller;
use crate::plane::{JobEntry, JobState};
use serde::{Deserialize, Serialize};

/// A preemption notice on one of a job's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NoticeView {
    pub node: String,
    pub deadline_us: u64,
}

/// The earliest preemption notice on `j`'s nodes, if it runs.
pub(crate) fn notice_of(plane: &crate::plane::Plane, j: &JobEntry) -> Option<NoticeView> {
    let d = j.decision.as_ref().filter(|_| j.state == JobState::Running)?;
    plane
        .notices()
        .filter(|(n, _)| d.rollout_nodes.contains(n) || d.training_nodes.contains(n))
        .min_by_key(|(n, x)| (x.deadline_us, **n))
        .map(|(n, x)| NoticeView { node: n.to_string(), deadline_us: x.deadline_us })
}

/// Rollout nodes of another group lent to the job for its current rollout (`weave serve
/// --lending`), on the server's clock: its engine should be up there from `from_us`, and its
/// requests back off them by `deadline_us`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LoanView {
    pub nodes: Vec<String>,
    pub iteration: u64,
    pub from_us: u64,
    pub deadline_us: u64,
}

impl LoanView {
    /// The loan as a driver needs it: seconds from `now_us` to its load and its deadline
    /// (negative: past).
    pub fn relative(&self, now_us: u64) -> serde_json::Value {
        let secs = |t: u64| (t as f64 - now_us as f64) / 1e6;
        serde_json::json!({
            "nodes": self.nodes,
            "iteration": self.iteration,
            "load_in_s": secs(self.from_us),
            "reclaim_in_s": secs(self.deadline_us),
        })
    }
}

pub(crate) fn loan_of(plane: &crate::plane::Plane, j: &JobEntry) -> Option<LoanView> {
    let l = plane.loan_of(&j.name).filter(|l| l.admission == j.id.0)?;
    let nodes = l.nodes.iter().map(|n| n.to_string()).collect();
    Some(LoanView { nodes, iteration: l.iteration, from_us: l.from_us, deadline_us: l.deadline_us })
}

/// [`view`] with what the plane knows beyond the entry (preemption notices, loans).
fn placed_view(plane: &crate::plane::Plane, j: &JobEntry) -> JobView {
    let v = JobView { preemption_notice: notice_of(plane, j), loan: loan_of(plane, j), ..view(j) };
    let members = plane.pack(&j.name).map(|p| p.members.clone());
    // A running LoRA job is where its pack is.
    let pack = j.adapter.as_ref().filter(|_| j.state == JobState::Running).and_then(|a| plane.job(&a.pack));
    match pack.filter(|p| p.state == JobState::Running) {
        Some(p) => {
            let at = view(p);
            JobView {
                group: at.group,
                placement: Some("lora-pack".into()),
                rollout_nodes: at.rollout_nodes,
                training_nodes: at.training_nodes,
                members,
                ..v
            }
        }
        None => JobView { members, ..v },
    }
}

/// A job as clients see it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct JobView {
    pub id: String,
    /// This admission's number (a re-admitted job gets a new one); names its launch.
    pub uid: u32,
    pub tenant: String,
    pub state: JobState,
    pub job_type: String,
    pub slo: f64,
    pub iterations: Option<u64>,
    pub completed_iterations: u64,
    pub group: Option<u32>,
    pub placement: Option<String>,
    pub rollout_nodes: Vec<String>,
    pub training_nodes: Vec<String>,
    pub predicted_slowdown: Option<f64>,
    /// The phases granted now ("rollout 5, train 4": a stale job may hold one of each).
    pub granted: Option<String>,
    /// The next phase in iteration order (on-policy: the barrier's one next phase).
    pub next: String,
    /// Bounded staleness the job runs with (absent: 0, on-policy; a co-located job runs
    /// on-policy whatever it asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness: Option<u32>,
    /// A stale job's rollout lane: the next rollout's iteration (up to k ahead of training).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_rollout: Option<u64>,
    pub estimate_rollout_s: f64,
    pub estimate_train_s: f64,
    /// Medians of the warm and cold switches the job reported with its phases (`meta.switch`,
    /// `meta.switch_s`): its re-admissions and moves are placed with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_switch_warm_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_switch_cold_s: Option<f64>,
    /// Admitted for an execution backend to launch and not yet asked for a phase: its group's
    /// other members run meanwhile; it joins their rotation when it first asks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starting: bool,
    /// Host memory the job's runtime reported holding, per node of each pool, against what the
    /// ledger admission fills models for it (absent until the runtime reports some).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<HostMemoryView>,
    /// An agentic job's environment: the sandboxes its rollouts may hold, and what its driver
    /// reported (`meta.agentic` with rollout finishes) beside what it declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentView>,
    /// A node of the job's is under a preemption notice: the job should move its in-flight
    /// rollout requests off it (or save) before the deadline, when the node leaves service
    /// and the job is re-admitted from its last completed iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_notice: Option<NoticeView>,
    /// Rollout nodes lent to the job's current rollout (lending on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loan: Option<LoanView>,
    pub failure: Option<String>,
    /// A queued job's place in the queue (0: next to start) and why it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_reason: Option<String>,
    /// A queued job's projected start, seconds from now (absent: none in view). An estimate:
    /// running jobs are assumed to take their remaining iterations at their SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start_s: Option<f64>,
    /// A LoRA job's place: its pack (the shared engine and trainer, whose nodes are the job's)
    /// and its adapter slot there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<crate::plane::AdapterSlot>,
    /// A LoRA pack's members by adapter slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<std::collections::BTreeMap<u32, String>>,
}

/// What an agentic job may hold of the environment pool, what it declared, and the medians
/// of what its rollouts reported (absent until one reports).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EnvironmentView {
    pub sandboxes: u32,
    pub cores: f64,
    pub mem_gib: f64,
    pub pausable: bool,
    pub declared_turns_per_trajectory: f64,
    pub declared_env_step_median_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<EnvironmentMeasured>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EnvironmentMeasured {
    pub turns_per_trajectory: f64,
    pub env_step_s: f64,
    pub startup_s_per_trajectory: f64,
    /// Rollouts behind the medians (the most recent ones).
    pub rollouts: usize,
}

/// What an agentic job's grant says of the environment. A rollout may hold one sandbox per
/// trajectory (`sandboxes`, each of `sandbox`); a training tells the driver to start the
/// next rollout's sandboxes now (`start_sandboxes_for`, that rollout's iteration), which the
/// plan the job was admitted under assumes (a sandbox's start needs no new weights).
pub(crate) fn environment_grant(j: &JobEntry, phase: weave_dispatch::Phase) -> Option<serde_json::Value> {
    let a = j.spec.agentic.as_ref()?;
    let sandbox =
        serde_json::json!({ "cores": a.sandbox.cores, "mem_gib": a.sandbox.mem_gib, "pausable": a.sandbox.pausable });
    let mut grant = serde_json::json!({ "sandboxes": j.spec.batch, "sandbox": sandbox });
    if phase == weave_dispatch::Phase::Train {
        // The next rollout not granted yet (with staleness one may already run).
        let next = j.gate.rollout.map_or(j.gate.rolled, |r| r.iteration + 1);
        if j.iterations.is_some_and(|n| next >= n) {
            return None;
        }
        grant["start_sandboxes_for"] = next.into();
    }
    Some(grant)
}

fn environment_of(j: &JobEntry) -> Option<EnvironmentView> {
    let a = j.spec.agentic.as_ref()?;
    let hold = crate::plane::EnvironmentHold::of(a, j.spec.batch, j.gate.staleness);
    let measured = j.environment.medians().map(|(turns, step, startup, rollouts)| EnvironmentMeasured {
        turns_per_trajectory: turns,
        env_step_s: step,
        startup_s_per_trajectory: startup,
        rollouts,
    });
    Some(EnvironmentView {
        sandboxes: hold.sandboxes,
        cores: hold.cores,
        mem_gib: hold.mem_gib,
        pausable: a.sandbox.pausable,
        declared_turns_per_trajectory: a.mean_turns(),
        declared_env_step_median_s: a.env_step_median_s(),
        measured,
    })
}

/// Bytes of host memory per node: what the job's runtime reported (`meta.host_bytes` with its
/// last phase on that pool) and what the host-memory ledger holds for it there. `within_model`:
/// every report is at most the modelled state, so the ledger never under-counts this job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HostMemoryView {
    pub rollout_reported: Option<u64>,
    pub rollout_modelled: u64,
    pub train_reported: Option<u64>,
    pub train_modelled: u64,
    pub within_model: bool,
}

fn host_memory(j: &JobEntry) -> Option<HostMemoryView> {
    if j.host.is_empty() {
        return None;
    }
    let rollout_modelled = weave_model::job_rollout_state(&j.spec).0;
    let train_modelled = weave_model::job_training_state(&j.spec).0;
    let within = |reported: Option<u64>, modelled: u64| reported.is_none_or(|r| r <= modelled);
    Some(HostMemoryView {
        rollout_reported: j.host.rollout,
        rollout_modelled,
        train_reported: j.host.train,
        train_modelled,
        within_model: within(j.host.rollout, rollout_modelled) && within(j.host.train, train_modelled),
    })
}

pub(crate) fn grants_text(gate: &crate::plane::Gate) -> Option<String> {
    let grants: Vec<String> = gate.grants().iter().map(|(p, k)| format!("{} {k}", p.name())).collect();
    (!grants.is_empty()).then(|| grants.join(", "))
}

pub fn view(j: &JobEntry) -> JobView {
    let d = j.decision.as_ref();
    JobView {
        id: j.name.clone(),
        uid: j.id.0,
        tenant: j.tenant.clone(),
        state: j.state,
        job_type: j.spec.job_type.to_string(),
        slo: j.slo,
        iterations: j.iterations,
        completed_iterations: j.completed_iterations,
        group: d.map(|d| d.group.0),
        placement: d.map(|d| format!("{:?}", d.kind).to_lowercase()),
        rollout_nodes: d.map(|d| d.rollout_nodes.iter().map(|n| n.to_string()).collect()).unwrap_or_default(),
        training_nodes: d.map(|d| d.training_nodes.iter().map(|n| n.to_string()).collect()).unwrap_or_default(),
        predicted_slowdown: d.and_then(|d| d.slowdowns.iter().find(|(id, _)| *id == j.id).map(|(_, s)| *s)),
        granted: grants_text(&j.gate),
        next: format!("{} {}", j.gate.next().0.name(), j.gate.next().1),
        staleness: (j.gate.staleness > 0).then_some(j.gate.staleness),
        next_rollout: (j.gate.staleness > 0).then_some(j.gate.rolled),
        estimate_rollout_s: j.estimate.rollout.as_secs_f64(),
        estimate_train_s: j.estimate.train.as_secs_f64(),
        measured_switch_warm_s: j.switches.medians().0.map(|m| m.as_secs_f64()),
        measured_switch_cold_s: j.switches.medians().1.map(|m| m.as_secs_f64()),
        starting: j.starting(),
        host_memory: host_memory(j),
        environment: environment_of(j),
        preemption_notice: None,
        loan: None,
        failure: j.failure.clone(),
        queue_position: None,
        queue_reason: None,
        estimated_start_s: None,
        adapter: j.adapter.clone(),
        members: None,
    }
}

/// The job key `c` means by `name`: job names are per tenant (see `Plane::resolve`); an
/// admin, or a job token, may also give a key itself.
pub(crate) fn key_of(plane: &crate::plane::Plane, c: &Caller, name: &str) -> String {
    plane.resolve(&c.tenant, name).unwrap_or_else(|| name.to_string())
}

/// How `c` sees job key `key`: its own tenant's jobs by their names, an admin by keys.
pub(crate) fn shown(c: &Caller, key: &str) -> String {
    if c.admin {
        return key.to_string();
    }
    key.strip_suffix(&format!("~{}", c.tenant)).unwrap_or(key).to_string()
}

/// A view as `c` sees it.
pub(crate) fn for_caller(mut v: JobView, c: &Caller) -> JobView {
    v.id = shown(c, &v.id);
    v
}

/// Events as `c` sees them (jobs by the names it knows them by).
pub(crate) fn events_for(
    events: impl Iterator<Item = crate::plane::PlaneEvent>,
    c: &Caller,
) -> Vec<crate::plane::PlaneEvent> {
    events
        .map(|mut e| {
            e.job = shown(c, &e.job);
            e
        })
        .collect()
}

/// Each waiting job's place as `c` may know it, and its projected start: an admin sees its
/// place in the whole queue, anyone else its place among its own tenant's waiting jobs (how
/// many other tenants' jobs wait is not theirs to learn).
fn places(plane: &crate::plane::Plane, now_us: u64, c: &Caller) -> Vec<(usize, Option<u64>)> {
    let outlook = plane.queue_outlook(now_us);
    if c.admin {
        return outlook;
    }
    // Number each tenant's jobs in the order of the whole queue.
    let queue = plane.queue();
    let mut by_position: Vec<usize> = (0..queue.len()).collect();
    by_position.sort_by_key(|&k| outlook[k].0);
    let mut seen: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let mut places = outlook;
    for k in by_position {
        let n = seen.entry(queue[k].tenant.as_str()).or_default();
        places[k].0 = *n;
        *n += 1;
    }
    places
}

/// Waiting jobs `c` may see, in the order they will start, as clients see them.
pub(crate) fn queued_views(plane: &crate::plane::Plane, now_us: u64, c: &Caller) -> Vec<JobView> {
    let mut views: Vec<JobView> = queued_by_key(plane, now_us, c).into_values().collect();
    views.sort_by_key(|v| v.queue_position);
    views
}

/// The queued submissions `c` may see, as it sees them, by job key.
fn queued_by_key(plane: &crate::plane::Plane, now_us: u64, c: &Caller) -> std::collections::BTreeMap<String, JobView> {
    plane
        .queue()
        .iter()
        .zip(places(plane, now_us, c))
        .filter(|(q, _)| c.may_see(&q.tenant, &q.submit.id))
        .map(|(q, (position, start))| {
            let v = for_caller(queued_view(q, position, start.map(|t| t.saturating_sub(now_us))), c);
            (q.submit.id.clone(), v)
        })
        .collect()
}

/// The most jobs one list answer carries unless asked for fewer, and at most (page on with the
/// cursor): an answer's size, and the time the plane is held to build it, are bounded
/// whatever the plane holds.
pub const JOBS_PAGE: usize = 1_000;
pub const JOBS_PAGE_MAX: usize = 10_000;

/// One page of the jobs `c` may see, queued and placed alike, in order of their keys: those
/// after the key `after`, at most `limit`; and the key to page on from, if more follow.
pub(crate) fn job_page(
    plane: &crate::plane::Plane,
    now_us: u64,
    c: &Caller,
    after: Option<&str>,
    limit: usize,
) -> (Vec<JobView>, Option<String>) {
    let beyond = |key: &str| after.is_none_or(|a| key > a);
    let mut page: std::collections::BTreeMap<String, JobView> =
        queued_by_key(plane, now_us, c).into_iter().filter(|(k, _)| beyond(k)).collect();
    // Views are built for the placed jobs that can still make the page, no more (a re-queued
    // job's queued view stands for it).
    let placed: Vec<_> = plane
        .jobs_after(after)
        .filter(|j| c.may_see(&j.tenant, &j.name) && !page.contains_key(&j.name))
        .take(limit + 1)
        .collect();
    for j in placed {
        page.insert(j.name.clone(), for_caller(placed_view(plane, j), c));
    }
    let next = (page.len() > limit).then(|| page.keys().nth(limit - 1).cloned()).flatten();
    (page.into_values().take(limit).collect(), next)
}

/// A submission waiting in the queue, as clients see it; `start_in_us`: its projected start.
pub fn queued_view(q: &crate::plane::Queued, position: usize, start_in_us: Option<u64>) -> JobView {
    let spec = q.submit.to_spec(weave_core::JobId(0), weave_core::Micros(q.submitted_us)).ok();
    let first = q.submit.server.resume_from.unwrap_or(0);
    JobView {
        id: q.submit.id.clone(),
        uid: 0,
        tenant: q.tenant.clone(),
        state: JobState::Queued,
        job_type: spec.as_ref().map(|s| s.job_type.to_string()).unwrap_or_default(),
        slo: q.submit.allowed_slowdown(),
        iterations: q.submit.job.iterations,
        completed_iterations: first,
        group: None,
        placement: None,
        rollout_nodes: Vec::new(),
        training_nodes: Vec::new(),
        predicted_slowdown: None,
        granted: None,
        next: format!("rollout {first}"),
        staleness: spec.as_ref().map(|s| s.staleness).filter(|k| *k > 0),
        next_rollout: spec.as_ref().filter(|s| s.staleness > 0).map(|_| first),
        estimate_rollout_s: 0.0,
        estimate_train_s: 0.0,
        // A re-queued job's resubmission carries what it measured (see `resubmission`).
        measured_switch_warm_s: None,
        measured_switch_cold_s: None,
        starting: false,
        host_memory: None,
        environment: None,
        preemption_notice: None,
        loan: None,
        failure: None,
        queue_position: Some(position),
        queue_reason: Some(q.reason.clone()),
        estimated_start_s: start_in_us.map(|us| us as f64 / 1e6),
        adapter: None,
        members: None,
    }
}

/// The job `name` as the plane knows it now, for `c`: waiting in the queue, else its entry.
pub(crate) fn lookup(plane: &crate::plane::Plane, name: &str, now_us: u64, c: &Caller) -> Option<JobView> {
    match plane.queued(name) {
        Some((k, q)) => {
            let (position, start) = places(plane, now_us, c)[k];
            Some(queued_view(q, position, start.map(|t| t.saturating_sub(now_us))))
        }
        None => plane.job(name).map(|j| placed_view(plane, j)),
    }
}
