//! The HTTP/JSON API (axum). Every error is JSON `{"error": "..."}` with a status that says
//! what kind of problem it is.

use crate::auth::Caller;
use crate::history::HistoryView;
use crate::plane::{JobState, PlaneError, Record, SubmitSpec};
use crate::state::{Inner, ServeError, Shared};
use crate::views::{events_for, for_caller, key_of, lookup, JobView};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{governor::GovernorConfig, GovernorError, GovernorLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;

mod cluster;
mod gate;
mod listing;
pub mod openapi;
pub mod routes;
pub use listing::{next_page, serving_replica};

pub struct ApiError {
    status: StatusCode,
    message: String,
    /// Seconds after which a retry may succeed (`Retry-After`, on 429 and 503).
    retry_after_s: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), retry_after_s: None }
    }

    fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds.max(1));
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(json!({ "error": self.message }))).into_response();
        if let Some(s) = self.retry_after_s {
            r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        r
    }
}

impl From<ServeError> for ApiError {
    fn from(e: ServeError) -> Self {
        let status = match &e {
            ServeError::Plane(PlaneError::Invalid { .. }) => StatusCode::BAD_REQUEST,
            ServeError::Plane(PlaneError::NotFound(_)) => StatusCode::NOT_FOUND,
            ServeError::Plane(PlaneError::Duplicate(_) | PlaneError::Conflict { .. } | PlaneError::Placement(_)) => {
                StatusCode::CONFLICT
            }
            // The disk refused the write: nothing changed; the client may retry once the store
            // is ready again (`/readyz`).
            // So did etcd (no quorum) or this replica no longer leads: nothing was
            // acknowledged.
            ServeError::Store(_) | ServeError::Replicated(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServeError::Recovery { .. } | ServeError::Snapshot { .. } | ServeError::Placement { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let retry = status == StatusCode::SERVICE_UNAVAILABLE;
        let e = ApiError::new(status, e.to_string());
        if retry {
            e.retry_after(1)
        } else {
            e
        }
    }
}

impl From<PlaneError> for ApiError {
    fn from(e: PlaneError) -> Self {
        ServeError::Plane(e).into()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Commits off the async workers: the durable append waits for the disk.
async fn commit(s: &Arc<Shared>, c: &Caller, make: impl FnOnce(u64) -> Record + Send + 'static) -> ApiResult<()> {
    let (s, c) = (s.clone(), c.clone());
    match tokio::task::spawn_blocking(move || s.commit_as(&c, make)).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("commit task failed: {e}"))),
    }
}

fn caller(s: &Shared, headers: &HeaderMap) -> ApiResult<Caller> {
    let h = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    s.cfg
        .tenants
        .authenticate(h)
        .or_else(|| {
            let g = s.lock();
            // A job waiting again (preempted, or after a node loss) has no admission: no job
            // token works until it is re-admitted (with a new one).
            s.job_tokens.authenticate(h, |job| {
                g.plane.job(job).filter(|_| g.plane.queued(job).is_none()).map(|j| (j.tenant.clone(), j.id.0))
            })
        })
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "missing or unknown bearer token"))
}

fn json_body<T>(body: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    body.map(|Json(v)| v).map_err(|e| {
        let status = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, format!("request body: {}", e.body_text()))
    })
}

/// The key of a job visible to `c` by `name`, and its view as `c` sees it; else 404 (another
/// tenant's job is indistinguishable from none).
fn visible(s: &Shared, c: &Caller, name: &str) -> ApiResult<(String, JobView)> {
    let now_us = s.now_us();
    let g = s.lock();
    let key = key_of(&g.plane, c, name);
    match lookup(&g.plane, &key, now_us, c) {
        Some(v) if c.may_see(&v.tenant, &key) => Ok((key, for_caller(v, c))),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, format!("job `{name}` not found"))),
    }
}

async fn submit(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Json<SubmitSpec>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let c = caller(&s, &headers)?;
    if c.job.is_some() {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "a job token cannot submit jobs"));
    }
    let mut spec = json_body(body)?;
    spec.check_limits()
        .and_then(|()| spec.check_staleness(s.cfg.max_staleness))
        .and_then(|()| spec.check_environment(s.cfg.cluster.env.as_ref()))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    if let Some(launch) = &spec.server.launch {
        s.cfg.limits.inputs.check_env(&launch.env).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    }
    // Names are per tenant: another tenant's job of the same name gets a key of its own.
    let key = s.lock().plane.key_for(&c.tenant, &spec.id);
    let Some(key) = key else {
        return Err(ApiError::new(StatusCode::CONFLICT, format!("job id `{}` is taken", spec.id)));
    };
    let cap = s.cfg.max_jobs_per_tenant;
    if cap > 0 && !c.admin && s.lock().plane.active_jobs_of(&c.tenant) >= cap {
        let why = format!("this tenant has {cap} jobs running or queued, its most (`--max-jobs-per-tenant`)");
        return Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, why));
    }
    spec.id = key;
    let name = spec.id.clone();
    let tenant = c.tenant.clone();
    commit(&s, &c, move |time_us| Record::Submit { time_us, tenant, job: spec }).await?;
    let now_us = s.now_us();
    let g = s.lock();
    // Fixed pools full: the job waits in the queue (202) and starts when there is room.
    if g.plane.queued(&name).is_some() {
        let job = lookup(&g.plane, &name, now_us, &c).map(|v| for_caller(v, &c));
        return Ok((StatusCode::ACCEPTED, Json(json!({ "job": job, "decision": null }))));
    }
    let j = g.plane.job(&name).expect("just admitted");
    // The decision names the group's other members and their predicted slowdowns: a tenant
    // sees only its own job's line.
    let mut decision = j.decision.clone();
    if let Some(d) = decision.as_mut() {
        d.slowdowns.retain(|(id, _)| *id == j.id);
    }
    let job = lookup(&g.plane, &name, now_us, &c).map(|v| for_caller(v, &c));
    Ok((StatusCode::CREATED, Json(json!({ "job": job, "decision": decision }))))
}

async fn show_job(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let c = caller(&s, &headers)?;
    let (key, v) = visible(&s, &c, &name)?;
    let (owner, view) = {
        let mut g = s.lock();
        let Inner { plane, history, .. } = &mut *g;
        (plane.owner(&key).unwrap_or_default().to_string(), history.view(plane, 0))
    };
    let history = off_the_workers(move || {
        let since = admission_start(&view, &c, &key);
        // Only the current owner's events: a name let go and taken by another tenant keeps
        // its earlier history to itself.
        let mine = |e: &&crate::plane::PlaneEvent| e.job == key && e.seq >= since && e.tenant == owner;
        events_for(view.of_tenants(|t| t == owner).filter(mine).cloned(), &c)
    })
    .await?;
    Ok(Json(json!({ "job": v, "history": history })))
}

/// Where a caller's view of a job's history begins: a job token drives one admission and
/// sees only that admission's events; tenant and admin tokens see the job's whole history.
fn admission_start(history: &HistoryView, c: &Caller, name: &str) -> u64 {
    if c.job.is_none() {
        return 0;
    }
    let mine = history.of_tenants(|t| c.admin || c.tenant == t);
    mine.rev().find(|e| e.job == name && e.kind == "admitted").map_or(0, |e| e.seq)
}

/// The most events one answer carries (page on with `after`): an answer's size is bounded
/// whatever the history held.
pub const EVENTS_PAGE: usize = 10_000;

/// And at most about this many bytes of events (as retention counts them), so that a page of
/// events carrying large metadata is not tens of megabytes to build and send.
pub const EVENTS_PAGE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
struct EventsQuery {
    /// Only events with a larger sequence number (a cursor: the last `seq` seen).
    after: Option<u64>,
    /// At most this many events.
    limit: Option<usize>,
}

async fn cancel_job(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<JobView>> {
    let c = caller(&s, &headers)?;
    let (key, before) = visible(&s, &c, &name)?;
    let job = key.clone();
    commit(&s, &c, move |time_us| Record::Cancel { time_us, job }).await?;
    // A job that never started leaves the queue and has no other record, and a job let go
    // as soon as it ended (`--keep-ended-jobs 0`) is no longer held: the cancel succeeded all
    // the same, so the answer is the job as it was, cancelled.
    let cancelled = || {
        let v = JobView { state: JobState::Cancelled, queue_position: None, queue_reason: None, ..before };
        Json(JobView { estimated_start_s: None, ..v })
    };
    if before.state == JobState::Queued {
        return Ok(cancelled());
    }
    Ok(visible(&s, &c, &key).map(|(_, v)| Json(v)).unwrap_or_else(|_| cancelled()))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartBody {
    /// Why (a process of the job died, ...): kept with the ended admission.
    reason: String,
}

/// The job's driver lost work in flight: this admission ends and the job is re-admitted from
/// its last completed iteration (the answer is the job as it is now, re-admitted or queued).
async fn restart_job(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<RestartBody>, JsonRejection>,
) -> ApiResult<Json<JobView>> {
    let c = caller(&s, &headers)?;
    let RestartBody { reason } = json_body(body)?;
    s.cfg.limits.inputs.check_reason(&reason).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let (key, _) = visible(&s, &c, &name)?;
    let job = key.clone();
    commit(&s, &c, move |time_us| Record::Restart { time_us, job, reason }).await?;
    Ok(Json(visible(&s, &c, &key)?.1))
}

async fn events(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> ApiResult<Json<Vec<crate::plane::PlaneEvent>>> {
    let c = caller(&s, &headers)?;
    // Sequence numbers are positions in the event history: a cursor skips straight to it
    // (events older than the plane holds are gone; the page starts at the oldest held).
    let from = q.after.map_or(0, |a| a.saturating_add(1));
    // Under the lock only the history's chunks are taken; a job token's admission start is
    // looked for in the whole history, so that view starts at 0.
    let view = {
        let mut g = s.lock();
        let Inner { plane, history, .. } = &mut *g;
        history.view(plane, if c.job.is_some() { 0 } else { from })
    };
    let limit = q.limit.unwrap_or(EVENTS_PAGE).min(EVENTS_PAGE);
    // Filtering a long history takes a while: off the async workers, which the gate needs.
    let page = off_the_workers(move || {
        let since = c.job.as_deref().map_or(0, |name| admission_start(&view, &c, name)).max(from);
        let visible = view
            .of_tenants(|t| c.admin || c.tenant == t)
            .filter(|e| e.seq >= since)
            .filter(|e| match e.tenant.as_str() {
                // Node events belong to no job: operators see them.
                "" => e.job.is_empty() && c.admin,
                tenant => c.may_see(tenant, &e.job),
            })
            .take(limit)
            // A page also ends once it holds EVENTS_PAGE_BYTES (never before its first event):
            // a client pages on by `after` until a page comes back empty.
            .scan(0u64, |bytes, e| {
                let first = *bytes == 0;
                *bytes += crate::plane::event_bytes(e);
                (first || *bytes <= EVENTS_PAGE_BYTES).then_some(e)
            })
            .cloned();
        events_for(visible, &c)
    });
    Ok(Json(page.await?))
}

/// Runs `work` (a scan of history, a page render) on the blocking pool, so that a long read
/// never holds one of the few async workers every phase-gate request needs.
async fn off_the_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a read failed: {e}")))
}

/// Ready to take writes: 503 with the reason while the store's last write failed (the
/// process itself is alive: `/healthz`).
async fn readyz(State(s): State<Arc<Shared>>) -> (StatusCode, Json<serde_json::Value>) {
    // A store that failed a write is probed (fsyncs: off the async workers); else a look.
    let ready = tokio::task::spawn_blocking(move || s.readiness())
        .await
        .unwrap_or_else(|e| Err(format!("the readiness probe failed: {e}")));
    match ready {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready", "reason": why }))),
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Prometheus text behind a token: an admin token sees the whole cluster; a tenant's token
/// sees only its own jobs (counts by state), never other tenants' jobs, nodes or cost.
async fn metrics(State(s): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<impl IntoResponse> {
    let c = caller(&s, &headers)?;
    let replicas = if c.admin { replicas(&s).await? } else { None };
    let g = s.lock();
    let text = if c.admin {
        let mut text = crate::metrics::render(&g.plane);
        crate::metrics::parked(&mut text, s.parked.load(std::sync::atomic::Ordering::SeqCst));
        if let Some(r) = &replicas {
            crate::metrics::replicas(&mut text, r);
        }
        text
    } else {
        crate::metrics::render_tenant(&g.plane, &c.tenant, c.job.as_deref())
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}

/// The replicas on etcd (`None`: the embedded store). The standbys' reports are read from
/// etcd off the async workers, the plane's lock free.
async fn replicas(s: &Arc<Shared>) -> ApiResult<Option<crate::metrics::Replicas>> {
    let Some(e) = &s.cfg.etcd else { return Ok(None) };
    let etcd = s.lock().durable().lock().ok().and_then(|d| d.etcd());
    let read = move || etcd.and_then(|(etcd, prefix)| weave_etcd::log::standbys(&etcd, &prefix).ok());
    let standbys = off_the_workers(read).await?.unwrap_or_default();
    let Some((records, snapshot_records)) = s.lock().replicated_records() else { return Ok(None) };
    Ok(Some(crate::metrics::Replicas { active: e.replica.clone(), records, snapshot_records, standbys }))
}

/// The OpenAPI document, built from the route table once (it never changes while serving).
async fn openapi_document() -> Json<serde_json::Value> {
    static DOCUMENT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    Json(DOCUMENT.get_or_init(openapi::document).clone())
}

async fn status_page(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> ApiResult<Html<String>> {
    // Browsers cannot easily send a bearer header: the token may come as ?token=.
    let mut h = headers.clone();
    if let Some(t) = q.token {
        if let Ok(v) = format!("Bearer {t}").parse() {
            h.insert(header::AUTHORIZATION, v);
        }
    }
    let c = caller(&s, &h)?;
    let replicas = if c.admin { replicas(&s).await? } else { None };
    let now_us = s.now_us();
    // Under the lock only a frozen copy of the plane (its collections are persistent: a few
    // pointers) and the history's chunks are taken; the rows are built off it.
    let (frozen, view) = {
        let mut g = s.lock();
        let Inner { plane, history, .. } = &mut *g;
        let view = history.view(plane, 0);
        (plane.clone(), view)
    };
    let page = off_the_workers(move || {
        let data = crate::status::collect(&frozen, view, &c, replicas);
        crate::drop_elsewhere(frozen);
        crate::status::render(&data, &c, now_us)
    });
    Ok(Html(page.await?))
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Per-token rate limiting: the limiter's state, kept to forget idle tokens now and then.
pub type RateLimits =
    Arc<GovernorConfig<TokenKey, governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>>>;

/// Rate-limit key: a digest of the bearer token (the token itself is never kept).
#[derive(Clone)]
pub struct TokenKey;

impl KeyExtractor for TokenKey {
    type Key = [u8; 16];

    fn extract<T>(&self, req: &axum::http::Request<T>) -> Result<[u8; 16], GovernorError> {
        use sha2::{Digest, Sha256};
        let token = req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
        Ok(Sha256::digest(token)[..16].try_into().expect("16 bytes"))
    }
}

/// The limiter for `rate` = (requests per second, burst), if any.
pub fn rate_limits(rate: Option<(u32, u32)>) -> Option<RateLimits> {
    let (per_s, burst) = rate.filter(|r| r.0 > 0)?;
    let period = std::time::Duration::from_nanos(1_000_000_000 / u64::from(per_s));
    let cfg =
        GovernorConfigBuilder::default().period(period).burst_size(burst.max(1)).key_extractor(TokenKey).finish()?;
    Some(Arc::new(cfg))
}

/// Refuses a request without a known token before anything reads its body.
async fn require_token(State(s): State<Arc<Shared>>, req: axum::extract::Request, next: Next) -> Response {
    match caller(&s, req.headers()) {
        Ok(_) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The whole body within the body deadline, not a deadline per piece (a client sending a byte
/// now and then would otherwise hold its connection and the memory behind it for good), and
/// never more than the size limit. The handler then reads it from memory. Runs after the
/// token check: no body is read for an unknown token.
/// Refuses framing a proxy in front could read differently from this server (request
/// smuggling) and bodies in another character set than the UTF-8 every body is read as: a
/// Transfer-Encoding other than plain `chunked`, a charset other than UTF-8. The connection of
/// a refused framing is closed (its end is unknown). (A Content-Length beside `chunked` never
/// reaches here: hyper reads such a request as chunked and drops the Content-Length, and
/// closes the connection after the answer, both as RFC 9112 6.3 says; `tests/api.rs` holds it
/// to that.)
async fn strict_framing(req: axum::extract::Request, next: Next) -> Response {
    let h = req.headers();
    let te: Vec<_> = h.get_all(header::TRANSFER_ENCODING).iter().collect();
    let framing = if te.is_empty() {
        None
    } else if te.len() > 1 || !te[0].to_str().is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked")) {
        Some("Transfer-Encoding: only `chunked` is accepted (no other codings)")
    } else {
        None
    };
    if let Some(why) = framing {
        let mut r = ApiError::new(StatusCode::BAD_REQUEST, why).into_response();
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return r;
    }
    let charset = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).and_then(|ct| {
        ct.split(';').skip(1).filter_map(|p| p.split_once('=')).find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
    });
    if let Some((_, v)) = charset {
        let v = v.trim().trim_matches('"');
        if !v.eq_ignore_ascii_case("utf-8") && !v.eq_ignore_ascii_case("utf8") {
            let why = format!("request body: charset `{v}` is not accepted; send UTF-8");
            return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, why).into_response();
        }
    }
    next.run(req).await
}

/// Bytes of an over-long body read and thrown away before the 413: a client still sending
/// then reads the answer instead of a connection reset (closing a socket with unread bytes
/// resets it). Longer bodies are answered at once.
const DRAIN: usize = 1 << 20;

/// The body if it is at most `limit` bytes; else `Err(())` once up to `DRAIN` more were read.
async fn read_body(body: axum::body::Body, limit: usize) -> Result<Result<axum::body::Bytes, ()>, axum::Error> {
    use hyper::body::Body as _;
    let mut body = std::pin::pin!(body);
    let (mut buf, mut over) = (Vec::new(), 0usize);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(data) = frame?.into_data() else { continue };
        if over == 0 && buf.len() + data.len() <= limit {
            buf.extend_from_slice(&data);
        } else {
            over += data.len();
            if over > DRAIN {
                break;
            }
        }
    }
    Ok(if over > 0 { Err(()) } else { Ok(buf.into()) })
}

async fn whole_body(State(s): State<Arc<Shared>>, req: axum::extract::Request, next: Next) -> Response {
    let (deadline, limit) = (s.cfg.limits.body_timeout, s.cfg.max_body_bytes);
    let too_large = || {
        let mut r = ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {limit} bytes"))
            .into_response();
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        r
    };
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(DRAIN)) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(deadline, read_body(body, limit)).await {
        // Every body this API takes is a JSON object: serde would read a struct from an array
        // of its fields in order, which no client means.
        Ok(Ok(Ok(bytes))) if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|&b| b != b'{') => {
            ApiError::new(StatusCode::BAD_REQUEST, "request body: expected a JSON object").into_response()
        }
        Ok(Ok(Ok(bytes))) => next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Ok(Ok(Err(()))) => too_large(),
        Ok(Err(e)) => {
            ApiError::new(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")).into_response()
        }
        Err(_) => {
            let why = format!("the request body did not arrive within {:.0} s", deadline.as_secs_f64());
            let mut r = ApiError::new(StatusCode::REQUEST_TIMEOUT, why).into_response();
            r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            r
        }
    }
}

/// The error a rate limiter answers with: 429, and when to try again.
fn too_many(e: GovernorError) -> Response {
    // The limiter rounds the wait down to whole seconds: a client told 0 would retry at once
    // and be refused again.
    let (message, wait) = match e {
        GovernorError::TooManyRequests { wait_time, .. } => {
            let wait = wait_time.max(1);
            (format!("rate limit for this token: try again in {wait} s"), wait)
        }
        other => (format!("rate limit: {other}"), 1),
    };
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, message).retry_after(wait).into_response()
}

/// The router over [`routes::table`]: `rate` limits every authenticated request of a token,
/// `reads` its requests to routes whose answers grow with the plane as well.
pub fn router(shared: Arc<Shared>, rate: Option<RateLimits>, reads: Option<RateLimits>) -> Router {
    let limit = shared.cfg.max_body_bytes;
    let body_timeout = shared.cfg.limits.body_timeout;
    // The status page's token may come as `?token=` (see `query_token`); rate-limited like
    // the rest of the authenticated routes.
    let (mut open, mut authenticated, mut heavy) = (Router::new(), Router::new(), Router::new());
    for r in routes::table() {
        match (r.access, r.cost) {
            (routes::Access::Open, _) => open = open.route(r.path, r.handler),
            (_, routes::Cost::Small) => authenticated = authenticated.route(r.path, r.handler),
            (_, routes::Cost::GrowsWithPlane) => heavy = heavy.route(r.path, r.handler),
        }
    }
    if let Some(cfg) = reads {
        heavy = heavy.layer(GovernorLayer::new(cfg).error_handler(too_many));
    }
    let mut authenticated = authenticated
        .merge(heavy)
        // Inside the rate limit: a limited request's body is never read.
        .route_layer(from_fn_with_state(shared.clone(), whole_body));
    if let Some(cfg) = rate {
        let layer = GovernorLayer::new(cfg).error_handler(too_many);
        authenticated = authenticated.layer(layer);
    }
    // The token is checked first (outermost), so unknown tokens never reach the limiter and
    // no body is read for them.
    let authenticated = authenticated.route_layer(from_fn_with_state(shared.clone(), require_token));
    open.merge(authenticated)
        // Every error a client can get is JSON with an `error` field, unknown paths included.
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint (see /openapi.json)") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint (see /openapi.json)")
        })
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(strict_framing))
        .layer(axum::middleware::from_fn(query_token))
        .layer(axum::middleware::from_fn(json_errors))
        .with_state(shared)
}

/// The status page's token may come as `?token=` (a browser cannot easily send a header): it
/// becomes the request's bearer token before the token check and the rate limit see it.
async fn query_token(mut req: axum::extract::Request, next: Next) -> Response {
    if req.uri().path() == "/status" && !req.headers().contains_key(header::AUTHORIZATION) {
        let token = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")).map(|t| t.to_string()));
        if let Some(v) = token.and_then(|t| format!("Bearer {t}").parse().ok()) {
            req.headers_mut().insert(header::AUTHORIZATION, v);
        }
    }
    next.run(req).await
}

/// Every error a client gets is JSON with an `error` field: the extractors' own refusals (a
/// malformed path or query) answer plain text, and are rewritten here.
async fn json_errors(req: axum::extract::Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    let json = r.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return r;
    }
    let (parts, body) = r.into_parts();
    // Extractor messages are a line or two; anything longer is cut.
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let mut out = ApiError::new(status, text.unwrap_or_else(|_| status.to_string())).into_response();
    for name in [header::RETRY_AFTER, header::CONNECTION] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}
