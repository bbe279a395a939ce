//! The phase gate's handlers: a job's driver asks to start a phase (long-poll), reports it
//! finished, and sends heartbeats. A launched job's first ask joins it to its group.

use super::{caller, commit, json_body, visible, ApiError, ApiResult};
use crate::plane::{JobState, Record};
use crate::state::Shared;
use crate::views::JobView;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use weave_dispatch::Phase;

fn parse_phase(p: &str) -> ApiResult<Phase> {
    match p {
        "rollout" => Ok(Phase::Rollout),
        "train" | "training" => Ok(Phase::Train),
        _ => Err(ApiError::new(StatusCode::BAD_REQUEST, format!("phase `{p}`: expected rollout or train"))),
    }
}

#[derive(Deserialize)]
pub(super) struct WaitQuery {
    wait_s: Option<f64>,
}

/// Long-poll: 200 when the phase is granted, 202 if not yet within the wait, 409 if asking
/// for it breaks the job's on-policy barrier.
pub(super) async fn phase_start(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path((name, phase, iteration)): Path<(String, String, u64)>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let c = caller(&s, &headers)?;
    let (key, _) = visible(&s, &c, &name)?;
    let phase = parse_phase(&phase)?;
    let wait_s = q.wait_s.unwrap_or(25.0);
    // NaN passes a clamp untouched and makes Duration panic: refuse it (and infinities) here.
    if !wait_s.is_finite() {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("`wait_s`: expected finite seconds, got {wait_s}")));
    }
    let wait = Duration::from_secs_f64(wait_s.clamp(0.0, s.cfg.max_wait.as_secs_f64()));
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = s.changed.subscribe();
    let waiting_to_start = s.lock().plane.awaits_start(&key);
    if let Some(admission) = waiting_to_start {
        // A launched job's first ask: it has started and joins its group's rotation. Two of
        // its processes may ask at once; the one refused finds it joined.
        let job = key.clone();
        if let Err(e) = commit(&s, &c, move |time_us| Record::Ready { time_us, job, admission }).await {
            if s.lock().plane.awaits_start(&key).is_some() {
                return Err(e);
            }
        }
    }
    loop {
        let admission = {
            let g = s.lock();
            // The admission a grant belongs to: the client sends it back with the finish.
            let granted = g.plane.may_start(&key, phase, iteration)?;
            granted
                .then(|| {
                    g.plane.job(&key).map(|j| {
                        let loan = crate::views::loan_of(&g.plane, j).filter(|_| phase == Phase::Rollout);
                        let env = crate::views::environment_grant(j, phase);
                        let adapters = g.plane.pack_adapters(&key, iteration);
                        let weights = j.gate.rollout.map(|r| r.weights);
                        (j.id.0, weights, crate::views::notice_of(&g.plane, j), loan, (env, adapters))
                    })
                })
                .flatten()
        };
        if let Some((a, weights, notice, loan, (env, adapters))) = admission {
            let mut body =
                json!({ "status": "granted", "job": name, "phase": phase.name(), "iteration": iteration, "uid": a });
            // The weights version the rollout samples with (the iteration itself on-policy).
            if let (Phase::Rollout, Some(w)) = (phase, weights) {
                body["weights"] = json!(w);
            }
            // A node of the job's is being taken: the driver moves its work off it (or saves).
            if let Some(n) = notice {
                body["preemption_notice"] = json!(n);
            }
            // Another group's idle rollout nodes lent to this rollout: spread requests onto
            // them once loaded, and move them back by the deadline.
            if let Some(l) = loan {
                body["loan"] = l.relative(s.now_us());
            }
            // An agentic job's sandboxes: how many this rollout may hold, or (with a training)
            // the next rollout's to start now.
            if let Some(e) = env {
                body["environment"] = e;
            }
            // A LoRA pack's phase: the members whose prompts it samples and whose adapters it
            // trains, each with its adapter slot.
            if let Some(a) = adapters {
                body["adapters"] = a;
            }
            // With tracing on, the phase span's context: the job's own spans nest under it.
            if s.telemetry.is_some() {
                body["traceparent"] = json!(crate::telemetry::AdmissionIds::of(&key, a).traceparent(phase, iteration));
            }
            return Ok((StatusCode::OK, Json(body)));
        }
        let closing = || s.closing.load(std::sync::atomic::Ordering::SeqCst);
        let parked = Parked::new(&s.parked);
        let woken = tokio::time::timeout_at(deadline, rx.changed()).await;
        drop(parked);
        match woken {
            Ok(Ok(())) if !closing() => continue,
            _ => {
                let mut body =
                    json!({ "status": "waiting", "job": name, "phase": phase.name(), "iteration": iteration });
                if closing() {
                    body["reason"] = json!("the server is shutting down: ask again after it restarts");
                }
                return Ok((StatusCode::ACCEPTED, Json(body)));
            }
        }
    }
}

/// Counts a long-poll as parked while it lives (also when its request is dropped mid-wait).
struct Parked<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Parked<'a> {
    fn new(count: &'a std::sync::atomic::AtomicU64) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Parked(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FinishBody {
    duration_s: f64,
    #[serde(default)]
    meta: Option<serde_json::Value>,
    /// The admission the phase was granted under (the grant's `uid`): refused if it has ended.
    #[serde(default)]
    uid: Option<u32>,
}

pub(super) async fn phase_finish(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path((name, phase, iteration)): Path<(String, String, u64)>,
    body: Result<Json<FinishBody>, JsonRejection>,
) -> ApiResult<Json<JobView>> {
    let c = caller(&s, &headers)?;
    let (key, _) = visible(&s, &c, &name)?;
    let phase = parse_phase(&phase)?;
    let b = json_body(body)?;
    if let Some(meta) = &b.meta {
        s.cfg.limits.inputs.check_meta(meta).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    }
    if !(b.duration_s.is_finite() && b.duration_s >= 0.0 && b.duration_s < 1e7) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "`duration_s`: expected non-negative seconds"));
    }
    let duration_us = (b.duration_s * 1e6).round() as u64;
    let job = key.clone();
    let admission = b.uid;
    commit(&s, &c, move |time_us| Record::Finish {
        time_us,
        job,
        phase,
        iteration,
        duration_us,
        meta: b.meta,
        admission,
    })
    .await?;
    visible(&s, &c, &key).map(|(_, v)| Json(v))
}

pub(super) async fn heartbeat(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let c = caller(&s, &headers)?;
    let (key, v) = visible(&s, &c, &name)?;
    if v.state != JobState::Running {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("job `{name}` is {:?}", v.state).to_lowercase()));
    }
    s.lock().heartbeats.insert(key, std::time::Instant::now());
    // A driver mid-phase learns of a notice on its nodes here (its keepalive asks every few
    // seconds): it moves its in-flight work off the node before the deadline.
    let mut body = json!({ "status": "ok" });
    if let Some(n) = v.preemption_notice {
        body["preemption_notice"] = json!(n);
    }
    // A loan's deadline brought forward (its lender needs the nodes) is heard here.
    if let Some(l) = v.loan {
        body["loan"] = l.relative(s.now_us());
    }
    Ok(Json(body))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ReturnBody {
    /// The admission the loan was made to (the grant's `uid`).
    #[serde(default)]
    uid: Option<u32>,
}

/// The borrower's driver moved its requests off the rollout nodes lent to it: the loan ends
/// (409 if the job holds none).
pub(super) async fn return_loan(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<ReturnBody>, JsonRejection>,
) -> ApiResult<Json<JobView>> {
    let c = caller(&s, &headers)?;
    let (key, v) = visible(&s, &c, &name)?;
    let admission = json_body(body)?.uid;
    let held = v.loan.is_some() && admission.is_none_or(|a| a == v.uid);
    if !held {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("job `{name}` holds no loan")));
    }
    let job = key.clone();
    commit(&s, &c, move |time_us| Record::ReturnLoan { time_us, job, admission }).await?;
    visible(&s, &c, &key).map(|(_, v)| Json(v))
}
