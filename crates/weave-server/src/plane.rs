//! The control plane's core: a deterministic state machine over durable records. It holds the
//! same `Placer` and `Dispatcher`s the simulator uses, driven by wall-clock records instead of
//! simulated events. Replaying the records of a store through a fresh `Plane` rebuilds jobs,
//! groups, placements and every group's dispatch position exactly.
//!
//! Run-time gating: a job's switch and weight sync are done by the job itself as part of its
//! phases, so the plane completes them at once; what it hands out are phase grants.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use weave_core::{ClusterConfig, GroupId, JobId, JobSpec, Micros, NodeId};
use weave_dispatch::{Dispatcher, Input, Phase};
use weave_model::ProfileModel;
use weave_place::consolidate::{Churn, ChurnLimits};
use weave_place::{PlaceError, PlaceJob, Placer, PlacerConfig, Variation};

mod admission;
mod agentic;
mod consolidation;
mod dispatch;
mod gate;
mod job;
mod lending;
mod lora;
mod names;
mod nodes;
mod queue;
mod record;
mod retention;
mod snapshot;
pub use agentic::{EnvironmentHold, EnvironmentUse};
pub use gate::{Gate, RolloutGrant};
use job::Measured;
pub use job::{JobEntry, JobState};
pub use lending::Loan;
pub use lora::{AdapterSlot, Pack, PACK_TENANT};
pub use queue::Queued;
pub use record::{limits, LaunchSpec, PlaneError, Record, ServerFields, SubmitSpec, DEFAULT_SLO};
pub use retention::{event_bytes, Retention};

/// What happened, for clients and tests (grants, finishes with their metadata, endings).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PlaneEvent {
    pub seq: u64,
    pub time_us: u64,
    pub job: String,
    pub kind: String,
    pub phase: Option<Phase>,
    pub iteration: Option<u64>,
    pub group: Option<u32>,
    pub meta: Option<serde_json::Value>,
    /// Whose job it was when it happened (empty for events of no job, and in snapshots written
    /// before events named it): visibility goes by this, so a name another tenant takes later
    /// never shows it the first tenant's history.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
}

#[derive(Clone)]
pub struct Plane {
    cluster: ClusterConfig,
    profile: ProfileModel,
    // The large parts are persistent collections (imbl: B-trees and RRB vectors sharing
    // their nodes): a clone of the plane (the frozen copy a snapshot encodes off the lock)
    // copies a few pointers, and a change after it copies only the nodes on its path, never a
    // whole collection (copying whole collections on the first change after a copy held the
    // lock 13-18 ms at 11,000 jobs and 220,000 events). An entry is copied (`Arc::make_mut`)
    // only when changed while a copy still holds it. The placer stays copy-on-write as a
    // whole (its groups shared inside): copying it is under a millisecond, and persistent
    // maps inside it slowed the simulator, which shares it, by 5%.
    placer: Arc<Placer>,
    dispatchers: imbl::OrdMap<GroupId, Arc<Dispatcher>>,
    jobs: imbl::OrdMap<String, Arc<JobEntry>>,
    /// The names of the admissions still held, by number.
    names: names::JobNames,
    /// Shared with readers (`history`): an event is held once however many read it.
    events: imbl::Vector<Arc<PlaneEvent>>,
    /// Changes with every applied record (long-polls wait for it to move).
    pub version: u64,
    /// Consolidation (co-located mode and moves); `None`: off.
    churn: Option<Churn>,
    /// Groups left with one member by the record being applied: consolidation looks at them
    /// once the record's own effects are done.
    lone_pending: Vec<GroupId>,
    /// Standard-normal quantile of admission's allowed SLO risk.
    slo_z: f64,
    /// Grant events tell their wait and the planned switch in `meta` (for tracing; off, a
    /// grant builds no metadata).
    grant_detail: bool,
    /// Submissions waiting for room in fixed pools, first to start first.
    queue: Vec<Queued>,
    /// Each job's place by arrival (its first submission): a job re-queued after a node loss
    /// or a preemption keeps it.
    arrivals: imbl::OrdMap<String, u64>,
    next_arrival: u64,
    /// Tenants' quotas with fixed pools (`None`: first come, first served).
    share: Option<weave_place::share::SharePolicy>,
    /// Time of the last applied record (the server's clock continues from it).
    last_time_us: Option<u64>,
    /// Time of the last periodic consolidation pass (before the first: of the first record),
    /// from which the next is due.
    last_pass_us: Option<u64>,
    /// Sequence number of the first event still held (older ones were let go).
    events_base: u64,
    /// What the held events cost, by [`event_bytes`] (derived: recounted on restore).
    events_bytes: u64,
    /// Ended admissions, oldest first: let go (with their events' visibility) beyond
    /// `retention.jobs`.
    ended: imbl::Vector<(String, JobId)>,
    retention: Retention,
    /// Admissions ended by preemption, per tenant (a counter: events are let go).
    preemptions: BTreeMap<String, u64>,
    /// Tenants' recent use, for fair share with decay (advanced at every record).
    usage_history: weave_place::share::UsageHistory,
    /// Nodes under a preemption notice: taken out of service at their deadline.
    notices: BTreeMap<NodeId, nodes::Notice>,
    /// Lending idle rollout blocks across groups (`None`: off): the request-level model's
    /// cached answers (derived, not state).
    lending: Option<weave_place::lending::LoanModel>,
    /// Loans out, by the lender's (group, block).
    loans: BTreeMap<(GroupId, u32), lending::Loan>,
    /// Consolidation moves decided while their job held work, by the admission's id: each
    /// takes effect when that job's training finishes (see `consolidate::iteration_ended`).
    deferred: BTreeMap<JobId, weave_place::consolidate::Deferred>,
    /// LoRA jobs' shared engines, by the pack's key (see `lora`).
    packs: BTreeMap<String, lora::Pack>,
    pub stats: PlaneStats,
}

/// Counters for `/metrics`, derived from records (so a restart rebuilds them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaneStats {
    /// Per phase (rollout, training): grants, and the summed wait from the job becoming ready
    /// for the phase to its grant (what sharing the group costs it).
    pub grants: [u64; 2],
    pub wait_us: [u64; 2],
    /// Completed iterations, and those whose wall-clock period stayed within the job's SLO
    /// times its own measured phases.
    pub iterations: u64,
    pub iterations_within_slo: u64,
    /// Lending: loans made, deadlines brought forward for a lender, returns by a borrower's
    /// driver, and their summed lateness past the deadline.
    pub loans: u64,
    pub loans_reclaimed_early: u64,
    pub loan_returns: u64,
    pub loan_returns_late_us: u64,
}

impl Plane {
    pub fn new(cluster: ClusterConfig, placer: PlacerConfig) -> Plane {
        Plane {
            cluster,
            profile: ProfileModel::builtin(),
            placer: Arc::new(Placer::new(placer)),
            dispatchers: Default::default(),
            jobs: Default::default(),
            names: Default::default(),
            events: Default::default(),
            version: 0,
            churn: None,
            lone_pending: Vec::new(),
            slo_z: Variation::z_for(weave_place::DEFAULT_SLO_EPSILON),
            stats: PlaneStats::default(),
            grant_detail: false,
            queue: Vec::new(),
            last_time_us: None,
            last_pass_us: None,
            events_base: 0,
            events_bytes: 0,
            ended: imbl::Vector::new(),
            retention: Retention::default(),
            preemptions: BTreeMap::new(),
            usage_history: Default::default(),
            notices: BTreeMap::new(),
            lending: None,
            loans: BTreeMap::new(),
            deferred: BTreeMap::new(),
            packs: BTreeMap::new(),
            arrivals: Default::default(),
            next_arrival: 0,
            share: None,
        }
    }

    /// Grant events carry their wait and planned switch from now on (tracing is on).
    pub fn set_grant_detail(&mut self, on: bool) {
        self.grant_detail = on;
    }

    /// Holds at most this much history (see [`Retention`]).
    pub fn with_retention(mut self, retention: Retention) -> Plane {
        self.retention = Retention { events: retention.events.max(1), ..retention };
        self
    }

    /// Turns on co-located mode and consolidation: jobs that run alone are paired into groups
    /// on arrivals and departures, by the same code the simulator runs. A move re-admits the
    /// job from its last completed iteration (a new admission: the old driver's token stops
    /// working), so drivers must follow re-admissions, as the Ray backend's launches do.
    pub fn with_consolidation(mut self, limits: ChurnLimits) -> Plane {
        let mut cfg = self.placer.config().clone();
        cfg.colocate = true;
        self.placer = Arc::new(Placer::new(cfg));
        self.churn = Some(Churn::new(limits));
        self
    }

    /// Tenants' quotas: the queue goes by priority, then the least-served tenant, then arrival,
    /// and a tenant starts jobs within its quota or by borrowing others' unused quota.
    pub fn with_share(mut self, policy: weave_place::share::SharePolicy) -> Plane {
        self.share = Some(policy);
        self
    }

    /// Admission's allowed risk that a job's life slowdown exceeds its SLO.
    pub fn with_slo_risk(mut self, epsilon: f64) -> Plane {
        self.slo_z = Variation::z_for(epsilon);
        self
    }

    /// Time of the last record applied, if any.
    pub fn last_time_us(&self) -> Option<u64> {
        self.last_time_us
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.cluster
    }

    pub fn placer(&self) -> &Placer {
        &self.placer
    }

    pub fn job(&self, name: &str) -> Option<&JobEntry> {
        self.jobs.get(name).map(|j| &**j)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &JobEntry> {
        self.jobs.values().map(|j| &**j)
    }

    /// The jobs held whose keys follow `after` (all of them for `None`), in key order.
    pub fn jobs_after(&self, after: Option<&str>) -> impl Iterator<Item = &JobEntry> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        self.jobs.range::<_, str>((from, Unbounded)).map(|(_, j)| &**j)
    }

    /// The events still held, oldest first (see [`Retention`]).
    pub fn events(&self) -> &imbl::Vector<Arc<PlaneEvent>> {
        &self.events
    }

    /// The sequence number the next event will get.
    /// The sequence number of the oldest event held (older ones were let go).
    pub fn first_event_seq(&self) -> u64 {
        self.events_base
    }

    /// Jobs of `tenant` running or queued.
    pub fn active_jobs_of(&self, tenant: &str) -> usize {
        self.jobs
            .values()
            .filter(|j| j.tenant == tenant && matches!(j.state, JobState::Running | JobState::Queued))
            .count()
    }

    pub fn next_event_seq(&self) -> u64 {
        self.events_base + self.events.len() as u64
    }

    /// The events held with a sequence number of `seq` or more.
    /// The tenant an event belongs to: the one it names, or for an event from before events
    /// named it, the job's owner now (empty: an event of no job).
    pub fn event_tenant<'a>(&'a self, e: &'a PlaneEvent) -> &'a str {
        if e.tenant.is_empty() {
            self.owner(&e.job).unwrap_or_default()
        } else {
            &e.tenant
        }
    }

    pub fn events_from(&self, seq: u64) -> impl Iterator<Item = &Arc<PlaneEvent>> {
        let k = seq.saturating_sub(self.events_base).min(self.events.len() as u64) as usize;
        self.events.focus().narrow(k..).into_iter()
    }

    /// Admissions of `tenant`'s jobs ended by preemption.
    pub fn preemptions(&self, tenant: &str) -> u64 {
        self.preemptions.get(tenant).copied().unwrap_or(0)
    }

    pub fn dispatcher(&self, g: GroupId) -> Option<&Dispatcher> {
        self.dispatchers.get(&g).map(|d| &**d)
    }

    /// Admissions whose names are still held (running, queued or retained ones').
    pub fn held_names(&self) -> usize {
        self.names.len()
    }

    pub fn job_name(&self, id: JobId) -> Option<&str> {
        self.names.get(id).map(String::as_str)
    }

    /// The job as placement sees it: the model's estimate, with what the submission says it
    /// measured of itself in place of the model's switch costs and sync.
    fn place_job(&self, spec: &JobSpec, slo: f64, submit: &SubmitSpec) -> PlaceJob {
        let mut place = PlaceJob::from_spec(spec, slo, &self.profile, &self.cluster);
        // Durations the submission gives were measured: they win over the model's plan.
        if let Some(a) = spec.agentic.as_ref().filter(|_| spec.phase_times.is_none()) {
            let measured = submit.server.measured_environment.map(|m| a.with_measured(&m));
            agentic::plan(&mut place, measured.as_ref().unwrap_or(a), spec.batch);
        }
        // check_limits refused negative and non-finite figures before they were recorded.
        let us = |s: Option<f64>| s.filter(|s| s.is_finite() && *s >= 0.0).map(Micros::from_secs_f64);
        place.costs = place.costs.with_measured(us(submit.server.switch_warm_s), us(submit.server.switch_cold_s));
        place.sync = us(submit.server.sync_s).unwrap_or(place.sync);
        self.pack_place_job(submit, &mut place);
        place
    }

    /// Checks a record without changing anything: only records that pass are made durable.
    pub fn check(&self, rec: &Record) -> Result<(), PlaneError> {
        match rec {
            Record::Submit { time_us, job, tenant } => {
                if self.jobs.get(&job.id).is_some_and(|j| j.state == JobState::Running)
                    || self.queued(&job.id).is_some()
                {
                    return Err(PlaneError::Duplicate(job.id.clone()));
                }
                self.check_lora_submission(tenant, job)?;
                let id = self.names.next_id();
                let spec = job.to_spec(id, Micros(*time_us))?;
                let slo = job.allowed_slowdown();
                let place = match job.job.lora.is_some() {
                    true => match self.lora_plan(*time_us, job)? {
                        lora::LoraPlan::Join { .. } => return Ok(()),
                        lora::LoraPlan::Open { place, .. } => place,
                    },
                    false => self.place_job(&spec, slo, job),
                };
                match self.placer.preview(&place) {
                    Ok(_) => Ok(()),
                    // Fixed pools full now: it waits, unless it can never fit.
                    Err(
                        PlaceError::NoCapacity(_) | PlaceError::NoEnvironment { .. } | PlaceError::Infeasible { .. },
                    ) => self.may_queue(job, *time_us),
                    Err(e) => Err(PlaneError::Placement(e.to_string())),
                }
            }
            Record::Cancel { job, .. } if self.queued(job).is_some() => Ok(()),
            Record::Restart { job, .. } if self.member_refusal(job).is_some() => {
                Err(self.member_refusal(job).expect("checked"))
            }
            Record::Cancel { job, .. } | Record::Fail { job, .. } | Record::Restart { job, .. } => {
                self.running(job).map(|_| ())
            }
            Record::NodeDown { .. } | Record::NodeUp { .. } | Record::NodeNotice { .. } => self.check_node(rec),
            Record::EnvNodeDown { node, .. } => self.check_env_node(*node, true),
            Record::EnvNodeUp { node, .. } => self.check_env_node(*node, false),
            // A loan already ended (or never made: a store reopened without `--lending`)
            // makes this a no-op; the handler refuses a return when the job holds none.
            Record::ReturnLoan { job, .. } => self.running(job).map(|_| ()),
            Record::Inventory { .. } => {
                if self.placer.config().capacity.is_none() {
                    return Err(PlaneError::Invalid {
                        field: "inventory".into(),
                        reason: "the pools are elastic (rented on demand)".into(),
                    });
                }
                Ok(())
            }
            Record::Consolidate { .. } if self.churn.is_none() => Err(PlaneError::Invalid {
                field: "consolidate".into(),
                reason: "consolidation is off (the server runs with --disagg-only)".into(),
            }),
            Record::Consolidate { .. } => Ok(()),
            Record::Launched { job, admission, .. } => {
                let j = self.running(job)?;
                if j.id.0 != *admission || j.submit.server.launch.is_none() {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: format!("admission {admission} is not one an execution backend launches"),
                    });
                }
                Ok(())
            }
            Record::Ready { job, admission, .. } => {
                let j = self.running(job)?;
                if j.pending_join.is_none() || j.id.0 != *admission {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: format!("admission {admission} is not waiting for its job to start"),
                    });
                }
                Ok(())
            }
            Record::Finish { job, phase, iteration, admission, .. } => {
                let j = self.running(job)?;
                if let Some(a) = admission.filter(|a| *a != j.id.0) {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: format!(
                            "the phase was granted to admission {a}, which has ended; the job runs as admission {} \
                             from rollout of iteration {}",
                            j.id.0, j.completed_iterations
                        ),
                    });
                }
                if !j.gate.is_granted(*phase, *iteration) {
                    return Err(PlaneError::Conflict {
                        job: job.clone(),
                        reason: j.gate.order_reason(*phase, *iteration, "finish"),
                    });
                }
                Ok(())
            }
        }
    }

    fn running(&self, name: &str) -> Result<&JobEntry, PlaneError> {
        match self.jobs.get(name) {
            Some(j) if j.state == JobState::Running => Ok(j),
            Some(j) => Err(PlaneError::Conflict {
                job: name.into(),
                reason: format!("the job is {:?}", j.state).to_lowercase(),
            }),
            None => Err(PlaneError::NotFound(name.into())),
        }
    }

    /// Applies a checked record.
    pub fn apply(&mut self, rec: &Record) -> Result<(), PlaneError> {
        self.check(rec)?;
        self.apply_checked(rec)
    }

    /// Applies a record [`Plane::check`] has just accepted (the server checks before it makes
    /// the record durable; checking again would recompute the placement).
    pub fn apply_checked(&mut self, rec: &Record) -> Result<(), PlaneError> {
        self.version += 1;
        self.last_time_us = Some(self.last_time_us.unwrap_or(0).max(rec.time_us()));
        self.last_pass_us.get_or_insert(rec.time_us());
        self.advance_usage_history(rec.time_us());
        let applied = self.apply_record(rec);
        self.sweep_packs(rec.time_us());
        self.consolidate_pending(rec.time_us());
        // Whatever the record freed goes to the jobs waiting for it.
        self.admit_queued(rec.time_us());
        self.record_usage();
        applied
    }

    fn apply_record(&mut self, rec: &Record) -> Result<(), PlaneError> {
        match rec {
            Record::Submit { time_us, tenant, job } => {
                self.arrivals.insert(job.id.clone(), self.next_arrival);
                self.next_arrival += 1;
                self.admit_or_queue(*time_us, tenant, job, None, false)
            }
            Record::Cancel { time_us, job } => {
                if !self.dequeue(*time_us, job) {
                    self.end(*time_us, job, JobState::Cancelled, None);
                }
                Ok(())
            }
            Record::Fail { time_us, job, reason } => {
                self.end(*time_us, job, JobState::Failed, Some(reason.clone()));
                Ok(())
            }
            Record::Restart { time_us, job, reason } => {
                self.readmit_from_checkpoint(*time_us, vec![job.clone()], &format!("restarted: {reason}"));
                Ok(())
            }
            Record::Finish { time_us, job, phase, iteration, duration_us, meta, .. } => {
                self.finish(*time_us, job, *phase, *iteration, Micros(*duration_us), meta.clone());
                match phase {
                    Phase::Rollout => self.pack_rolled(job, *iteration, meta.as_ref()),
                    Phase::Train => self.pack_trained(*time_us, job, *iteration),
                }
                Ok(())
            }
            Record::NodeDown { time_us, node, reason } => {
                self.node_down(*time_us, *node, reason);
                Ok(())
            }
            Record::Inventory { time_us, rollout, training } => {
                self.inventory(*time_us, *rollout, *training);
                Ok(())
            }
            Record::Consolidate { time_us } => {
                self.consolidation_pass(*time_us);
                Ok(())
            }
            Record::Ready { time_us, job, .. } => {
                self.join_when_ready(*time_us, job);
                Ok(())
            }
            Record::Launched { job, admission, .. } => {
                if let Some(j) = self.job_mut(job) {
                    j.launched = Some(*admission);
                }
                Ok(())
            }
            Record::NodeUp { time_us, node } => {
                self.node_up(*time_us, *node);
                Ok(())
            }
            Record::EnvNodeDown { time_us, node, reason } => {
                self.env_node_change(*time_us, *node, Some(reason));
                Ok(())
            }
            Record::EnvNodeUp { time_us, node } => {
                self.env_node_change(*time_us, *node, None);
                Ok(())
            }
            Record::NodeNotice { time_us, node, deadline_us, reason } => {
                self.node_notice(*time_us, *node, *deadline_us, reason);
                Ok(())
            }
            Record::ReturnLoan { time_us, job, admission } => {
                if self.loan_of(job).is_some_and(|l| admission.is_none_or(|a| a == l.admission)) {
                    self.return_loan(*time_us, job, lending::RETURNED);
                }
                Ok(())
            }
        }
    }

    fn event(&mut self, mut e: PlaneEvent) {
        e.seq = self.next_event_seq();
        if e.tenant.is_empty() && !e.job.is_empty() {
            e.tenant = self.owner(&e.job).unwrap_or_default().to_string();
        }
        self.events_bytes += event_bytes(&e);
        self.events.push_back(Arc::new(e));
        // Let go of the oldest quarter at once (amortised), keeping at least the retention;
        // over the byte budget, down to three quarters of it (the newest event always stays).
        let keep = self.retention.events;
        let budget = self.retention.event_bytes;
        if self.events.len() >= keep + keep.div_ceil(4) || self.events_bytes > budget {
            let mut drop = self.events.len().saturating_sub(keep);
            let mut freed: u64 = self.events.iter().take(drop).map(|e| event_bytes(e)).sum();
            let target = budget - budget / 4;
            for e in self.events.iter().skip(drop) {
                if self.events_bytes - freed <= target || drop + 1 >= self.events.len() {
                    break;
                }
                freed += event_bytes(e);
                drop += 1;
            }
            self.events_bytes -= freed;
            let old = self.events.slice(..drop);
            // Freeing a quarter of the history (50,000 events by default, each with its
            // strings and metadata) took 20-30 ms under the lock; elsewhere it holds no one up.
            crate::drop_elsewhere(old);
            self.events_base += drop as u64;
        }
    }

    /// Remembers that this admission of `name` ended; lets go of the oldest ended ones beyond
    /// the retention (unless the name came back: running, queued, or preempted to wait).
    fn ended(&mut self, name: &str) {
        let Some(j) = self.jobs.get_mut(name) else { return };
        // An ended admission is never launched again: its command and environment (up to the
        // input limits each) are let go, so the ended jobs held cost little each. That it was
        // launched by a backend stays known.
        if j.submit.server.launch.as_ref().is_some_and(|l| !l.entrypoint.is_empty() || !l.env.is_empty()) {
            let launch = Arc::make_mut(j).submit.server.launch.as_mut().expect("checked");
            (launch.entrypoint, launch.env) = (String::new(), Default::default());
        }
        let j = &self.jobs[name];
        self.ended.push_back((name.to_string(), j.id));
        while self.ended.len() > self.retention.jobs {
            let Some((old, id)) = self.ended.pop_front() else { break };
            let current = self.jobs.get(&old).is_some_and(|j| j.id == id);
            let gone = current
                && self.jobs[&old].state != JobState::Running
                && self.jobs[&old].state != JobState::Preempted
                && self.queued(&old).is_none();
            if gone {
                self.jobs.remove(&old);
                self.arrivals.remove(&old);
            }
            // The admission's number no longer names anything placed: drop its name's bytes.
            if gone || !current {
                self.names.forget(id);
            }
        }
    }

    /// A job's entry to change (copied first if a frozen copy of the plane still shares it).
    fn job_mut(&mut self, name: &str) -> Option<&mut JobEntry> {
        self.jobs.get_mut(name).map(Arc::make_mut)
    }

    fn group_of(&self, name: &str) -> Option<GroupId> {
        self.jobs.get(name).and_then(|j| j.decision.as_ref()).map(|d| d.group)
    }

    fn end(&mut self, time_us: u64, name: &str, state: JobState, failure: Option<String>) {
        self.leave_pack(time_us, name);
        let group = self.group_of(name);
        self.return_loan(time_us, name, "its admission ended");
        let j = self.jobs.get_mut(name).map(Arc::make_mut).expect("checked");
        j.state = state;
        j.gate.withdraw();
        j.failure = failure;
        let id = j.id;
        let kind = format!("{state:?}").to_lowercase();
        let meta = j.failure.as_ref().map(|r| serde_json::json!({ "reason": r }));
        if state == JobState::Preempted {
            *self.preemptions.entry(j.tenant.clone()).or_default() += 1;
        }
        self.event(PlaneEvent { meta, ..ev(time_us, name, &kind, None, None, group) });
        if let Some(g) = group {
            self.drive(time_us, g, Input::Leave { job: id });
            self.depart(g, id);
            self.follow_order(time_us, g);
        }
        if state != JobState::Preempted {
            self.ended(name);
        }
    }
}

fn ev(
    time_us: u64,
    job: &str,
    kind: &str,
    phase: Option<Phase>,
    iteration: Option<u64>,
    group: Option<GroupId>,
) -> PlaneEvent {
    PlaneEvent {
        seq: 0,
        time_us,
        job: job.into(),
        kind: kind.into(),
        phase,
        iteration,
        group: group.map(|g| g.0),
        meta: None,
        tenant: String::new(),
    }
}
