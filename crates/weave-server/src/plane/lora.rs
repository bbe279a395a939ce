//! LoRA jobs of one base sharing a rollout engine and a trainer (a *pack*), as the server runs
//! them: the same packs the replay forms (`weave_place::lora`, `weave_model::shared_engine`),
//! formed online. A LoRA job joins a running pack of its base and widths where every member
//! keeps its SLO with the pack's headroom, the engine's adapter budget takes its adapter and
//! the pack's group still keeps every member's SLO with the pack's longer phases
//! (`Placer::reshape`); else it opens a pack of its own, placed as one job.
//!
//! The pack is a job of the plane (key `lora-pack-N~lora-packs`, tenant [`PACK_TENANT`]):
//! one gate, one place in its group's rotation, pipelined one iteration deep (the members
//! staggered on the trainer, each on-policy). Its driver, the shared engine's runtime, asks
//! for its phases; each rollout grant names the members in the batch and their adapter slots
//! (`meta.adapters`), and when that iteration's training finishes every member still in the
//! pack has done one iteration of its own. A member holds an adapter slot, not a gate: it asks
//! for no phases. A member that ends (cancelled, failed, done) leaves its slot and the pack
//! shrinks; nothing of the other members changes. A pack that ends for good (failed, cancelled)
//! fails its members, naming it; one re-admitted after a node loss keeps them.

use super::{ev, Gate, JobEntry, JobState, Plane, PlaneError, PlaneEvent, SubmitSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use weave_core::{Bytes, JobId, JobSpec, Micros, PhaseTimes};
use weave_model::shared_engine::{alone, pack_times, Member};
use weave_place::lora::{allowed, pack_slo, pack_to_join, Candidate, PackDriver, PACK_HEADROOM};
use weave_place::PlaceJob;

/// The tenant packs run as (their keys end `~lora-packs`; no client id has a `~`).
pub const PACK_TENANT: &str = "lora-packs";

/// A pack's members and its rounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pack {
    /// Members by adapter slot.
    pub members: BTreeMap<u32, String>,
    /// The members each rollout was granted with, by the pack's iteration: each is credited an
    /// iteration when that iteration's training finishes, if still a member.
    pub rounds: BTreeMap<u64, Vec<String>>,
    /// The members' adapters and optimizer states, bytes: held beside the base on the trainer.
    #[serde(default)]
    pub adapter_bytes: u64,
}

/// A member's place: its pack and its adapter slot there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterSlot {
    pub pack: String,
    pub slot: u32,
}

/// Where a LoRA submission goes.
pub(super) enum LoraPlan {
    /// Into the running pack `pack`, slot `slot`; `place` is the pack as placement sees it
    /// with the member, `submit` its submission then.
    Join { pack: String, slot: u32, place: PlaceJob, submit: Box<SubmitSpec> },
    /// A pack of its own (`submit`: the pack's submission, `place`: as placement sees it).
    Open { submit: Box<SubmitSpec>, place: PlaceJob },
}

/// A member as the pack's model needs it: its spec, its SLO and its submission.
type MemberRef<'a> = (&'a JobSpec, f64, &'a SubmitSpec);

impl Plane {
    /// Refuses a LoRA submission this server cannot run on a shared engine, naming the field.
    pub(super) fn check_lora_submission(&self, tenant: &str, submit: &SubmitSpec) -> Result<(), PlaneError> {
        let bad = |field: &str, reason: &str| Err(PlaneError::Invalid { field: field.into(), reason: reason.into() });
        if tenant == PACK_TENANT {
            return bad("tenant", "this tenant name is the server's own (its LoRA packs run as it)");
        }
        if submit.job.lora.is_none() {
            return Ok(());
        }
        if self.share.is_some() {
            return bad("lora", "LoRA packs are not charged to tenants' quotas yet; this server has quotas");
        }
        if submit.server.launch.is_some() {
            return bad(
                "launch",
                "a LoRA job runs in its pack's shared engine, which its driver runs; it launches nothing of its own",
            );
        }
        let spec = submit.to_spec(JobId(0), Micros::ZERO)?;
        if spec.staleness != 0 {
            return bad("staleness", "a LoRA job in a pack is on-policy (the pack pipelines its members)");
        }
        if spec.agentic.is_some() {
            return bad("agentic", "an agentic job cannot share a LoRA engine yet");
        }
        let lora = spec.lora.as_ref().expect("checked");
        let budget = weave_core::lora::engine_adapter_budget(spec.rollout_nodes);
        if lora.engine_bytes() > budget {
            let reason = format!(
                "its adapter ({}) overflows the engine's adapter budget on {} rollout node(s) ({budget})",
                lora.engine_bytes(),
                spec.rollout_nodes
            );
            return bad("lora.rank", &reason);
        }
        if self.pack_shape(&[(&spec, submit.allowed_slowdown(), submit)], 0.0).is_none() {
            let reason = format!(
                "{}: too tight for a shared engine, whose mixed batch runs longer than the job alone",
                submit.allowed_slowdown()
            );
            return bad("slo", &reason);
        }
        Ok(())
    }

    /// Where a LoRA submission goes (the first running pack, in key order, that takes it:
    /// `weave_place::lora::pack_to_join`, the replay's policy too).
    pub(super) fn lora_plan(&self, time_us: u64, submit: &SubmitSpec) -> Result<LoraPlan, PlaneError> {
        let spec = submit.to_spec(self.names.next_id(), Micros(time_us))?;
        let slo = submit.allowed_slowdown();
        let joining = Joining { plane: self, joiner: (&spec, slo, submit) };
        if let Some((pack, pack_submit, place)) = pack_to_join(&joining) {
            let slot = (0..).find(|s| !self.packs[&pack].members.contains_key(s)).expect("a free slot");
            return Ok(LoraPlan::Join { pack, slot, place, submit: Box::new(pack_submit) });
        }
        let id = self.names.next_id();
        let name = format!("lora-pack-{}~{PACK_TENANT}", id.0);
        let alone = [(&spec, slo, submit)];
        let (times, pack_slo) = self.pack_shape(&alone, 0.0).ok_or_else(|| PlaneError::Invalid {
            field: "slo".into(),
            reason: "too tight for a shared engine".into(),
        })?;
        let pack_submit = pack_submission(&name, &alone, times, pack_slo);
        let place = self.pack_place(&pack_submit, id, &alone)?;
        Ok(LoraPlan::Open { submit: Box::new(pack_submit), place })
    }

    /// Admits a LoRA submission into a pack (see [`Plane::lora_plan`]).
    pub(super) fn admit_lora(&mut self, time_us: u64, tenant: &str, submit: &SubmitSpec) -> Result<(), PlaneError> {
        let (pack, slot) = match self.lora_plan(time_us, submit)? {
            LoraPlan::Join { pack, slot, place, submit: pack_submit } => {
                let id = self.jobs[&pack].id;
                Arc::make_mut(&mut self.placer).reshape(id, place.clone(), true);
                self.reshaped_pack(&pack, *pack_submit, place.times);
                if let Some(p) = self.packs.get_mut(&pack) {
                    p.adapter_bytes = p.adapter_bytes.saturating_add(submitted_adapter_bytes(submit));
                }
                (pack, slot)
            }
            LoraPlan::Open { submit: pack_submit, .. } => {
                let pack = pack_submit.id.clone();
                // The opener is a member from the pack's first grant on.
                let adapter_bytes = submitted_adapter_bytes(submit);
                let members = BTreeMap::from([(0, submit.id.clone())]);
                self.packs.insert(pack.clone(), Pack { members, adapter_bytes, ..Pack::default() });
                if let Err(e) = self.submit(time_us, PACK_TENANT, &pack_submit, None, None) {
                    self.packs.remove(&pack);
                    return Err(e);
                }
                (pack, 0)
            }
        };
        self.enter_member(time_us, tenant, submit, AdapterSlot { pack: pack.clone(), slot })?;
        let meta = serde_json::json!({ "member": submit.id, "slot": slot });
        let group = self.group_of(&pack);
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &pack, "member-joined", None, None, group) });
        if let Some(g) = group {
            self.follow_order(time_us, g);
        }
        Ok(())
    }

    /// The member's entry: running, in its slot, with no gate of its own to ask.
    fn enter_member(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        slot: AdapterSlot,
    ) -> Result<(), PlaneError> {
        let id = self.names.next_id();
        let spec = submit.to_spec(id, Micros(time_us))?;
        let start = submit.server.resume_from.unwrap_or(0);
        let estimate = alone(&self.profile, &spec);
        self.names.push(submit.id.clone());
        // It joins the engine's batch at once if the pack's rollout runs (continuous batching).
        let running = self.jobs.get(&slot.pack).and_then(|j| j.gate.rollout).map(|g| g.iteration);
        if let Some(p) = self.packs.get_mut(&slot.pack) {
            p.members.insert(slot.slot, submit.id.clone());
            if let Some(round) = running.and_then(|k| p.rounds.get_mut(&k)).filter(|r| !r.contains(&submit.id)) {
                round.push(submit.id.clone());
            }
        }
        let meta = serde_json::json!({ "pack": slot.pack, "slot": slot.slot });
        self.jobs.insert(
            submit.id.clone(),
            Arc::new(JobEntry {
                adapter: Some(slot),
                ..JobEntry::running(submit, tenant, (id, spec), time_us, Gate::new(0, start), estimate)
            }),
        );
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &submit.id, "admitted", None, None, None) });
        Ok(())
    }

    /// The pack's entry after its membership changed: its submission (a re-admission places it
    /// as it is now), its estimate and SLO; what it measured with other members is let go.
    fn reshaped_pack(&mut self, pack: &str, submit: SubmitSpec, times: PhaseTimes) {
        let Some(j) = self.job_mut(pack) else { return };
        j.slo = submit.allowed_slowdown();
        j.submit = submit;
        j.estimate = times;
        j.measured = Default::default();
    }

    /// The members of `pack` still running, in slot order.
    fn member_refs<'a>(&'a self, pack: &'a Pack) -> Vec<MemberRef<'a>> {
        let entries = pack.members.values().filter_map(|m| self.jobs.get(m));
        entries.filter(|j| j.state == JobState::Running).map(|j| (&j.spec, j.slo, &j.submit)).collect()
    }

    /// A pack's phases and SLO with `members`, if they may share an engine: one base and
    /// widths, their adapters within the engine's budget, every member keeping `headroom` of
    /// its slack.
    fn pack_shape(&self, members: &[MemberRef], headroom: f64) -> Option<(PhaseTimes, f64)> {
        let model: Vec<Member> = members.iter().filter_map(|m| Member::of(m.0)).collect();
        let first = members.first()?.0;
        if model.len() != members.len() || members.iter().any(|m| pack_key(m.0) != pack_key(first)) {
            return None;
        }
        let times = pack_times(&self.profile, &model)?;
        let candidates: Vec<Candidate> = members.iter().enumerate().map(|(i, m)| self.candidate(i, m)).collect();
        let refs: Vec<&Candidate> = candidates.iter().collect();
        allowed(&refs, headroom, &|_| Some(times)).then(|| (times, pack_slo(&refs, times)))
    }

    /// A member as packing sees it (`index`: the caller's).
    fn candidate(&self, index: usize, m: &MemberRef) -> Candidate {
        let iterations = match m.0.lifetime {
            weave_core::Lifetime::Iterations(n) => Some(n),
            weave_core::Lifetime::SoloUntil(_) => None,
        };
        Candidate { index, key: pack_key(m.0), slo: m.1, alone: alone(&self.profile, m.0), iterations }
    }

    /// The pack as placement sees it: its submission's job, the base held once and each
    /// member's adapter and optimizer state beside it (as the replay's pack).
    fn pack_place(&self, pack: &SubmitSpec, id: JobId, members: &[MemberRef]) -> Result<PlaceJob, PlaneError> {
        let spec = pack.to_spec(id, Micros::ZERO)?;
        let mut place = PlaceJob::from_spec(&spec, pack.allowed_slowdown(), &self.profile, &self.cluster);
        let adapters: u64 = members.iter().map(|m| submitted_adapter_bytes(m.2)).sum();
        place.train_state_total = Bytes(place.train_state_total.0.saturating_add(adapters));
        Ok(place)
    }

    /// A pack's placement when it is (re-)admitted as a job: its members' adapters beside the
    /// base (as [`Plane::pack_place`]).
    pub(super) fn pack_place_job(&self, pack: &SubmitSpec, place: &mut PlaceJob) {
        let Some(p) = self.packs.get(&pack.id) else { return };
        place.train_state_total = Bytes(place.train_state_total.0.saturating_add(p.adapter_bytes));
    }

    /// The pack `name`, if it is one.
    pub fn pack(&self, name: &str) -> Option<&Pack> {
        self.packs.get(name)
    }

    /// Whether `name` is a pack.
    pub(super) fn is_pack(&self, name: &str) -> bool {
        self.packs.contains_key(name)
    }

    /// A pack's rollout of `iteration` is granted: its round is the members now (and those that
    /// join while it runs); what the grant's `meta.adapters` says.
    pub(super) fn pack_rollout_granted(&mut self, pack: &str, iteration: u64) -> Option<serde_json::Value> {
        let p = self.packs.get_mut(pack)?;
        p.rounds.insert(iteration, p.members.values().cloned().collect());
        self.pack_adapters(pack, iteration)
    }

    /// The members in a pack's round `iteration` and still in it, with their adapter slots
    /// (`[{"job", "slot"}]`): whose prompts the rollout samples and whose adapters the training
    /// trains. `None` for a job that is not a pack.
    pub fn pack_adapters(&self, pack: &str, iteration: u64) -> Option<serde_json::Value> {
        let p = self.packs.get(pack)?;
        let round = p.rounds.get(&iteration);
        let adapters: Vec<serde_json::Value> = p
            .members
            .iter()
            .filter(|(_, job)| round.is_some_and(|r| r.contains(job)))
            .map(|(slot, job)| serde_json::json!({ "job": job, "slot": slot }))
            .collect();
        Some(adapters.into())
    }

    /// A pack's rollout finished: when its driver says which members' prompts it sampled
    /// (`meta.adapters`, their job keys), the round is those; else every member in it.
    pub(super) fn pack_rolled(&mut self, pack: &str, iteration: u64, meta: Option<&serde_json::Value>) {
        let Some(sampled) = meta.and_then(|m| m.get("adapters")).and_then(serde_json::Value::as_array) else { return };
        let Some(round) = self.packs.get_mut(pack).and_then(|p| p.rounds.get_mut(&iteration)) else { return };
        round.retain(|m| sampled.iter().any(|s| s.as_str() == Some(m.as_str())));
    }

    /// A pack's training of `iteration` finished: each member in that round and still in the
    /// pack has done an iteration; one whose iterations are done completes and leaves.
    pub(super) fn pack_trained(&mut self, time_us: u64, pack: &str, iteration: u64) {
        let Some(p) = self.packs.get_mut(pack) else { return };
        let round = p.rounds.remove(&iteration).unwrap_or_default();
        p.rounds.retain(|k, _| *k > iteration);
        let members: Vec<String> = round.into_iter().filter(|m| p.members.values().any(|x| x == m)).collect();
        for m in members {
            let Some(j) = self.job_mut(&m).filter(|j| j.state == JobState::Running) else { continue };
            j.completed_iterations += 1;
            let done = j.completed_iterations;
            let finished = j.iterations.is_some_and(|n| done >= n);
            j.iteration_started_us = time_us;
            let meta = serde_json::json!({ "pack": pack, "pack_iteration": iteration });
            let e = ev(time_us, &m, "finish", Some(weave_dispatch::Phase::Train), Some(done - 1), None);
            self.event(PlaneEvent { meta: Some(meta), ..e });
            if finished {
                self.end(time_us, &m, JobState::Completed, None);
            }
        }
    }

    /// A member that ended leaves its slot; its pack shrinks (or, left empty, completes).
    pub(super) fn leave_pack(&mut self, time_us: u64, member: &str) {
        let Some(slot) = self.jobs.get(member).and_then(|j| j.adapter.clone()) else { return };
        let Some(p) = self.packs.get_mut(&slot.pack) else { return };
        if p.members.get(&slot.slot).is_none_or(|m| m != member) {
            return;
        }
        p.members.remove(&slot.slot);
        let pack = slot.pack;
        let running = self.jobs.get(&pack).is_some_and(|j| j.state == JobState::Running);
        if !running {
            return;
        }
        let meta = serde_json::json!({ "member": member, "slot": slot.slot });
        let group = self.group_of(&pack);
        self.event(PlaneEvent { meta: Some(meta), ..ev(time_us, &pack, "member-left", None, None, group) });
        if self.packs[&pack].members.is_empty() {
            self.end(time_us, &pack, JobState::Completed, None);
            return;
        }
        self.shrink(time_us, &pack);
    }

    /// A pack that lost a member runs the smaller batch: its phases and SLO follow (never
    /// refused: fewer members never slow the others).
    fn shrink(&mut self, time_us: u64, pack: &str) {
        let members = self.member_refs(&self.packs[pack]);
        let model: Vec<Member> = members.iter().filter_map(|m| Member::of(m.0)).collect();
        let Some(times) = pack_times(&self.profile, &model) else { return };
        let candidates: Vec<Candidate> = members.iter().map(|m| self.candidate(0, m)).collect();
        let slo = pack_slo(&candidates.iter().collect::<Vec<_>>(), times);
        let id = self.jobs[pack].id;
        let submit = pack_submission(pack, &members, times, slo);
        let Ok(place) = self.pack_place(&submit, id, &members) else { return };
        let adapter_bytes: u64 = members.iter().map(|m| submitted_adapter_bytes(m.2)).sum();
        Arc::make_mut(&mut self.placer).reshape(id, place, false);
        self.reshaped_pack(pack, submit, times);
        if let Some(p) = self.packs.get_mut(pack) {
            p.adapter_bytes = adapter_bytes;
        }
        if let Some(g) = self.group_of(pack) {
            self.follow_order(time_us, g);
        }
    }

    /// Packs that ended for good (not running, waiting or preempted to wait) fail their
    /// members, naming the pack; the pack is let go.
    pub(super) fn sweep_packs(&mut self, time_us: u64) {
        let gone: Vec<String> = self
            .packs
            .keys()
            .filter(|name| {
                let waiting = self.queued(name).is_some();
                let state = self.jobs.get(*name).map(|j| j.state);
                !waiting && !matches!(state, Some(JobState::Running | JobState::Preempted))
            })
            .cloned()
            .collect();
        for name in gone {
            let Some(p) = self.packs.remove(&name) else { continue };
            let state = self.jobs.get(&name).map_or("let go".to_string(), |j| format!("{:?}", j.state).to_lowercase());
            for m in p.members.values() {
                if self.jobs.get(m).is_some_and(|j| j.state == JobState::Running) {
                    let why = format!("its shared engine `{name}` ended ({state})");
                    self.end(time_us, m, JobState::Failed, Some(why));
                }
            }
        }
    }

    /// Why a member may not ask for phases (its pack's driver does).
    pub(super) fn member_refusal(&self, name: &str) -> Option<PlaneError> {
        let slot = self.jobs.get(name)?.adapter.as_ref()?;
        Some(PlaneError::Conflict {
            job: name.into(),
            reason: format!(
                "a LoRA job runs in its pack's shared engine `{}` (adapter slot {}): the pack's driver asks for its phases",
                slot.pack, slot.slot
            ),
        })
    }
}

/// What must match to share an engine and a trainer: the base and the widths.
fn pack_key(spec: &JobSpec) -> (String, u32, u32) {
    let base = spec.lora.as_ref().map(|l| l.base.clone()).unwrap_or_default();
    (base, spec.rollout_nodes, spec.train_nodes)
}

/// A LoRA submission's adapter and optimizer state on the trainer, bytes.
fn submitted_adapter_bytes(submit: &SubmitSpec) -> u64 {
    submit.job.lora.as_ref().map_or(0, |l| weave_model::lora::adapter_train_bytes(l).0)
}

/// The pack's submission with `members`: the first member's job with every member's batch,
/// the pack's phases and SLO, pipelined one deep, running until its last member leaves.
fn pack_submission(name: &str, members: &[MemberRef], times: PhaseTimes, slo: f64) -> SubmitSpec {
    let first = members[0].2;
    let batch: u32 = members.iter().map(|m| m.0.batch).fold(0u32, u32::saturating_add);
    SubmitSpec {
        id: name.to_string(),
        job: weave_trace::fields::JobFields {
            batch: Some(batch),
            rollout_s: Some(times.rollout.as_secs_f64()),
            train_s: Some(times.train.as_secs_f64()),
            slo: Some(slo),
            iterations: None,
            staleness: Some(serde_json::json!(1)),
            priority: None,
            ..first.job.clone()
        },
        server: Default::default(),
        strict: Default::default(),
    }
}

/// The server as the join policy's driver, for one LoRA submission (`joiner`).
struct Joining<'a> {
    plane: &'a Plane,
    joiner: MemberRef<'a>,
}

impl PackDriver for Joining<'_> {
    /// A running pack's key.
    type Pack = String;
    /// The pack's submission with the joiner.
    type Grown = SubmitSpec;

    /// The running packs of the joiner's base and widths, in key order.
    fn open_packs(&self) -> Vec<String> {
        let plane = self.plane;
        let running = |name: &&String| plane.jobs.get(*name).is_some_and(|j| j.state == JobState::Running);
        let same_key = |name: &&String| {
            let first = plane.member_refs(&plane.packs[*name]).first().map(|m| pack_key(m.0));
            first.is_some_and(|k| k == pack_key(self.joiner.0))
        };
        plane.packs.keys().filter(running).filter(same_key).cloned().collect()
    }

    fn pack_job(&self, pack: &String) -> JobId {
        self.plane.jobs[pack].id
    }

    fn grown(&self, pack: &String) -> Option<(SubmitSpec, PlaceJob)> {
        let plane = self.plane;
        let mut members = plane.member_refs(&plane.packs[pack]);
        members.push(self.joiner);
        let (times, pack_slo) = plane.pack_shape(&members, PACK_HEADROOM)?;
        let submit = pack_submission(pack, &members, times, pack_slo);
        let place = plane.pack_place(&submit, self.pack_job(pack), &members).ok()?;
        Some((submit, place))
    }

    fn placer(&self) -> &weave_place::Placer {
        &self.plane.placer
    }
}
