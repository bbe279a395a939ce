//! OpenTelemetry export (`weave serve --otlp-endpoint URL`): one span per job admission, and
//! under it one span per granted phase (grant to finish report) with the state switch the
//! dispatcher planned at its start and, after a disaggregated training, the weight sync at
//! its end as child spans.
//!
//! Spans are made from the plane's event log after each commit (the plane itself never
//! exports anything), so off costs nothing but an `Option` check. Ids are derived from the
//! admission (job name and admission number), so a phase's span id is known when it is
//! granted: the grant answer carries it as a W3C `traceparent` for the job's own spans.
//!
//! The server does not observe switches and syncs apart from the phase that contains them (a
//! client's measured duration includes them): their spans carry the dispatcher's planned
//! durations (`weave.planned = true`).

use crate::plane::{JobEntry, Plane, PlaneEvent};
use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use thiserror::Error;
use weave_dispatch::Phase;

/// The longest an export, and the flush at shutdown, may take.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(1);

/// How often a failing collector is reported (a line on standard error, with the number of
/// failed exports since the last line), so an outage is seen without flooding the log.
const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(60);

/// The OTLP exporter, reporting failed exports at most once per [`FAILURE_REPORT_EVERY`].
#[derive(Debug)]
struct Reported<E> {
    inner: E,
    endpoint: String,
    /// When the last report was written, and failures since.
    failures: Mutex<(Option<std::time::Instant>, u64)>,
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter for Reported<E> {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        let exported = self.inner.export(batch);
        async move {
            let r = exported.await;
            if let Err(e) = &r {
                let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                f.1 += 1;
                if f.0.is_none_or(|t| t.elapsed() >= FAILURE_REPORT_EVERY) {
                    eprintln!(
                        "weave serve: OTLP export to {} failed ({} since the last report): {e}",
                        self.endpoint, f.1
                    );
                    *f = (Some(std::time::Instant::now()), 0);
                }
            }
            r
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource)
    }
}

#[derive(Debug, Error)]
pub enum TelemetryError {
    #[error("--otlp-endpoint {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
}

/// The exporter and what it remembers between events.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Wall-clock time at plane time 0.
    epoch: SystemTime,
    state: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    /// Plane events already turned into spans.
    next_event: u64,
    admissions: BTreeMap<String, Admission>,
}

struct Admission {
    ids: AdmissionIds,
    start_us: u64,
    attributes: Vec<KeyValue>,
    /// Grants waiting for their finish: (phase, iteration) -> (time, meta).
    grants: BTreeMap<(Phase, u64), (u64, Option<serde_json::Value>)>,
}

/// A job admission's trace id and root span id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionIds {
    pub trace: TraceId,
    pub root: SpanId,
}

impl AdmissionIds {
    /// Stable per admission: the same job name and admission number give the same ids in
    /// every process and after every restart.
    pub fn of(job: &str, admission: u32) -> AdmissionIds {
        let h =
            Sha256::new().chain_update(b"weave-admission\0").chain_update(job).chain_update(admission.to_be_bytes());
        let d = h.finalize();
        let trace = TraceId::from_bytes(d[..16].try_into().expect("16 bytes"));
        let root = SpanId::from_bytes(d[16..24].try_into().expect("8 bytes"));
        AdmissionIds { trace, root }
    }

    /// The span id of a phase (or of `what` inside it: "switch", "sync").
    pub fn span(&self, phase: Phase, iteration: u64, what: &str) -> SpanId {
        let d = Sha256::new()
            .chain_update(self.trace.to_bytes())
            .chain_update([phase as u8])
            .chain_update(iteration.to_be_bytes())
            .chain_update(what)
            .finalize();
        SpanId::from_bytes(d[..8].try_into().expect("8 bytes"))
    }

    /// The W3C trace context of a phase span, for the job's own spans to nest under.
    pub fn traceparent(&self, phase: Phase, iteration: u64) -> String {
        format!("00-{}-{}-01", self.trace, self.span(phase, iteration, "phase"))
    }
}

thread_local! {
    /// The ids the next span built on this thread gets (set just before building it).
    static PLANNED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Hands the SDK the ids we derived; random ones for anything else.
#[derive(Debug)]
struct DerivedIds;

impl IdGenerator for DerivedIds {
    fn new_trace_id(&self) -> TraceId {
        PLANNED.with(|p| p.get()).map_or_else(|| RandomIdGenerator::default().new_trace_id(), |(t, _)| t)
    }

    fn new_span_id(&self) -> SpanId {
        PLANNED.with(|p| p.get()).map_or_else(|| RandomIdGenerator::default().new_span_id(), |(_, s)| s)
    }
}

impl Telemetry {
    /// Exports OTLP/HTTP (protobuf) to `endpoint` (e.g. `http://collector:4318/v1/traces`)
    /// in batches from a background thread. `now_us` is the plane's clock now.
    pub fn otlp(endpoint: &str, now_us: u64) -> Result<Telemetry, TelemetryError> {
        use opentelemetry_otlp::{Protocol, WithExportConfig};
        let bad = |reason: String| TelemetryError::Exporter { endpoint: endpoint.into(), reason };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(bad("expected an http:// or https:// URL".into()));
        }
        let url = endpoint.to_string();
        // The blocking HTTP client must not be built on an async worker.
        let exporter = std::thread::spawn(move || {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(url)
                .with_protocol(Protocol::HttpBinary)
                // A collector that does not answer holds an export no longer than this (the
                // flush at shutdown: `SHUTDOWN_FLUSH`).
                .with_timeout(Duration::from_secs(5))
                .build()
        })
        .join()
        .map_err(|_| bad("the exporter could not be built".into()))?
        .map_err(|e| bad(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty().with_service_name("weave").build();
        let exporter = Reported { inner: exporter, endpoint: endpoint.to_string(), failures: Mutex::new((None, 0)) };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(DerivedIds)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("weave-server");
        let epoch = SystemTime::now() - Duration::from_micros(now_us);
        Ok(Telemetry { provider, tracer, epoch, state: Mutex::new(Open::default()) })
    }

    /// Events up to now were exported by an earlier process (or never): start after them.
    pub fn skip_to(&self, plane: &Plane) {
        self.lock().next_event = plane.next_event_seq();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn at(&self, time_us: u64) -> SystemTime {
        self.epoch + Duration::from_micros(time_us)
    }

    /// Turns the plane's new events into spans.
    pub fn observe(&self, plane: &Plane) {
        let mut open = self.lock();
        for e in plane.events_from(open.next_event) {
            self.event(&mut open, plane, e);
        }
        open.next_event = plane.next_event_seq();
    }

    fn event(&self, open: &mut Open, plane: &Plane, e: &PlaneEvent) {
        match (e.kind.as_str(), e.phase, e.iteration) {
            ("admitted", _, _) => {
                if let Some(j) = plane.job(&e.job) {
                    open.admissions.insert(e.job.clone(), admission(j, e.time_us));
                }
            }
            ("grant", Some(phase), Some(k)) => {
                if let Some(a) = open.admissions.get_mut(&e.job) {
                    a.grants.insert((phase, k), (e.time_us, e.meta.clone()));
                }
            }
            ("finish", Some(phase), Some(k)) => {
                if let Some(a) = open.admissions.get_mut(&e.job) {
                    if let Some((granted_us, meta)) = a.grants.remove(&(phase, k)) {
                        let sync =
                            plane.job(&e.job).and_then(|j| planned_sync(plane, j)).filter(|_| phase == Phase::Train);
                        self.phase_span(a, phase, k, (granted_us, e.time_us), meta.as_ref(), sync);
                    }
                }
            }
            ("completed" | "cancelled" | "failed" | "moved", _, _) => {
                if let Some(a) = open.admissions.remove(&e.job) {
                    self.root_span(&a, e.time_us, &e.kind);
                }
            }
            _ => {}
        }
    }

    /// Builds a span with our ids under `parent` (none: a root with `ids.trace`).
    fn span(&self, name: &'static str, ids: (TraceId, SpanId), parent: Option<SpanId>, start_us: u64) -> impl Span {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(SpanContext::new(
                ids.0,
                p,
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        PLANNED.with(|c| c.set(Some(ids)));
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(self.at(start_us))
            .start_with_context(&self.tracer, &cx);
        PLANNED.with(|c| c.set(None));
        span
    }

    fn root_span(&self, a: &Admission, end_us: u64, outcome: &str) {
        let mut s = self.span("weave.job", (a.ids.trace, a.ids.root), None, a.start_us);
        s.set_attributes(a.attributes.iter().cloned());
        s.set_attribute(KeyValue::new("weave.outcome", outcome.to_string()));
        s.end_with_timestamp(self.at(end_us));
    }

    fn phase_span(
        &self,
        a: &Admission,
        phase: Phase,
        iteration: u64,
        (granted_us, finished_us): (u64, u64),
        meta: Option<&serde_json::Value>,
        sync: Option<Duration>,
    ) {
        let id = a.ids.span(phase, iteration, "phase");
        let mut s = self.span("weave.phase", (a.ids.trace, id), Some(a.ids.root), granted_us);
        s.set_attributes(a.attributes.iter().cloned());
        s.set_attribute(KeyValue::new("weave.phase", phase.name()));
        s.set_attribute(KeyValue::new("weave.iteration", iteration as i64));
        s.set_attribute(KeyValue::new("weave.duration_s", finished_us.saturating_sub(granted_us) as f64 / 1e6));
        let wait = meta.and_then(|m| m.get("wait_s")).and_then(|v| v.as_f64()).unwrap_or(0.0);
        s.set_attribute(KeyValue::new("weave.wait_s", wait));
        s.end_with_timestamp(self.at(finished_us));
        let switch = meta.and_then(|m| Some((m.get("switch")?.as_str()?, m.get("switch_planned_s")?.as_f64()?)));
        if let Some((kind, secs)) = switch {
            let d = Duration::from_secs_f64(secs.max(0.0)).as_micros() as u64;
            let ids = (a.ids.trace, a.ids.span(phase, iteration, "switch"));
            let mut sw = self.span("weave.switch", ids, Some(id), granted_us);
            sw.set_attributes([
                KeyValue::new("weave.switch", kind.to_string()),
                KeyValue::new("weave.phase", phase.name()),
                KeyValue::new("weave.planned", true),
            ]);
            sw.end_with_timestamp(self.at((granted_us + d).min(finished_us)));
        }
        if let Some(d) = sync {
            let start = finished_us.saturating_sub(d.as_micros() as u64).max(granted_us);
            let mut sy = self.span("weave.sync", (a.ids.trace, a.ids.span(phase, iteration, "sync")), Some(id), start);
            sy.set_attribute(KeyValue::new("weave.planned", true));
            sy.end_with_timestamp(self.at(finished_us));
        }
    }

    /// Exports what is still buffered and stops (the batch processor's shutdown exports
    /// its remaining spans first), within [`SHUTDOWN_FLUSH`]: an unreachable collector never
    /// holds up the server's exit for longer.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_FLUSH) {
            eprintln!("weave serve: OTLP flush at shutdown: {e}");
        }
    }
}

fn admission(j: &JobEntry, start_us: u64) -> Admission {
    let d = j.decision.as_ref();
    let nodes = |v: Option<&Vec<weave_core::NodeId>>| {
        v.map(|n| n.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")).unwrap_or_default()
    };
    let attributes = vec![
        KeyValue::new("weave.job", j.name.clone()),
        KeyValue::new("weave.tenant", j.tenant.clone()),
        KeyValue::new("weave.admission", j.id.0 as i64),
        KeyValue::new("weave.group", d.map_or(-1, |d| d.group.0 as i64)),
        KeyValue::new("weave.placement", d.map(|d| format!("{:?}", d.kind).to_lowercase()).unwrap_or_default()),
        KeyValue::new("weave.rollout_nodes", nodes(d.map(|d| &d.rollout_nodes))),
        KeyValue::new("weave.training_nodes", nodes(d.map(|d| &d.training_nodes))),
    ];
    Admission { ids: AdmissionIds::of(&j.name, j.id.0), start_us, attributes, grants: BTreeMap::new() }
}

/// The weight sync a disaggregated job pays after each training (co-located: none).
fn planned_sync(plane: &Plane, j: &JobEntry) -> Option<Duration> {
    let d = j.decision.as_ref()?;
    if d.kind == weave_place::DecisionKind::Colocated {
        return None;
    }
    let us = weave_dispatch::from_model::job_sync(&j.spec, plane.cluster()).0;
    (us > 0).then(|| Duration::from_micros(us))
}
