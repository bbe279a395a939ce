//! The read-only status page: groups, members, current phases and a recent timeline, drawn
//! with the same timeline renderer as the simulator's report.

use crate::auth::Caller;
use crate::history::HistoryView;
use crate::plane::{JobState, Plane, PlaneEvent};
use crate::views::JobView;
use std::collections::BTreeMap;
use std::fmt::Write;
use weave_dispatch::Phase;
use weave_timeline::svg::escape;
use weave_timeline::{Bar, BarKind, GroupTimeline, Lane, Timeline};

/// Hours of history drawn.
const RECENT_H: f64 = 0.5;

/// What the page shows, copied under the plane's lock; drawn after it is released.
pub struct StatusData {
    nodes: (u32, u32),
    hourly_cost: f64,
    /// The caller's jobs: their view, and whether they run.
    rows: Vec<(JobView, bool)>,
    /// Per job the caller sees: its admission number and its rollout block, for the lanes.
    lanes_of: BTreeMap<String, (u32, u32)>,
    history: HistoryView,
    /// The replicas on etcd, for an admin.
    replicas: Option<crate::metrics::Replicas>,
}

/// Takes what the page needs (under the lock: views of the caller's jobs and the history's
/// chunks, nothing proportional to the events).
/// What the page shows, from a plane (a frozen copy, off the lock: building a row per job for
/// thousands of jobs must not hold the gate up) and the history's view taken with it.
pub fn collect(
    plane: &Plane,
    history: HistoryView,
    caller: &Caller,
    replicas: Option<crate::metrics::Replicas>,
) -> StatusData {
    let (r, t) = plane.placer().nodes_in_use();
    let mut rows = Vec::new();
    let mut lanes_of = BTreeMap::new();
    for j in plane.jobs().filter(|j| caller.may_see(&j.tenant, &j.name)) {
        rows.push((crate::views::view(j), j.state == JobState::Running));
        lanes_of.insert(j.name.clone(), (j.id.0, j.decision.as_ref().map(|d| d.block).unwrap_or(0)));
    }
    let hourly_cost = plane.placer().hourly_cost().as_dollars();
    StatusData { nodes: (r, t), hourly_cost, rows, lanes_of, history, replicas }
}

/// Which replica is active, its log, and how far each standby lags.
fn replicas_line(r: &crate::metrics::Replicas) -> String {
    let standbys: Vec<String> = r
        .standbys
        .iter()
        .map(|(name, applied)| format!("{} {} behind", escape(name), r.records.saturating_sub(*applied)))
        .collect();
    format!(
        "<p class=\"muted\">Replicas on etcd: {} active ({} records, the newest snapshot covers {}); standbys: {}.</p>",
        escape(&r.active),
        r.records,
        r.snapshot_records,
        if standbys.is_empty() { "none reporting".to_string() } else { standbys.join(", ") }
    )
}

pub fn render(d: &StatusData, caller: &Caller, now_us: u64) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>Weave status</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px}.muted{color:#666;font-size:12px}.legend span{margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}</style></head><body><h1>Weave status</h1>");
    let _ = write!(
        h,
        "<p class=\"muted\">Tenant {}{}. Nodes held: {} rollout, {} training; ${:.2} per hour.</p>",
        escape(&caller.tenant),
        if caller.admin { " (admin)" } else { "" },
        d.nodes.0,
        d.nodes.1,
        d.hourly_cost
    );
    if let Some(r) = &d.replicas {
        h.push_str(&replicas_line(r));
    }
    if let Some(r) = &d.replicas {
        h.push_str(&replicas_line(r));
    }
    h.push_str("<table><tr><th>job</th><th>state</th><th>group</th><th>now</th><th>iterations</th><th>predicted slowdown</th></tr>");
    for (v, running) in &d.rows {
        let name = crate::views::shown(caller, &v.id);
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td></tr>",
            escape(&name),
            format!("{:?}", v.state).to_lowercase(),
            v.group.map(|g| format!("g{g}")).unwrap_or_default(),
            escape(v.granted.as_deref().unwrap_or(if *running { "waiting" } else { "-" })),
            v.completed_iterations,
            v.iterations.map(|n| n.to_string()).unwrap_or_else(|| "∞".into()),
            v.predicted_slowdown.map(|s| format!("{s:.3}")).unwrap_or_default()
        );
    }
    h.push_str("</table><h2>Recent phases</h2>");
    let timeline = recent(d, caller, now_us);
    if timeline.groups.is_empty() {
        h.push_str("<p class=\"muted\">No phases in the last half hour.</p>");
    } else {
        h.push_str(&weave_timeline::render_timeline(&timeline));
    }
    h.push_str("</body></html>\n");
    h
}

/// Bars from grants to finishes (open phases run to now), per group and lane.
fn recent(d: &StatusData, caller: &Caller, now_us: u64) -> Timeline {
    let now_h = now_us as f64 / 3.6e9;
    let window = ((now_h - RECENT_H).max(0.0), now_h.max(1e-9));
    // The job's owner when it happened: a name taken later by another tenant keeps its
    // earlier phases to itself.
    let mine = d.history.of_tenants(|t| caller.admin || caller.tenant == t);
    let visible = mine.filter(|e| !e.job.is_empty() && caller.may_see(&e.tenant, &e.job));
    phase_bars(visible, window, now_h, |job, phase| {
        let &(id, block) = d.lanes_of.get(job)?;
        let lane = match phase {
            Phase::Rollout => format!("rollout block {block}"),
            Phase::Train => "training pool".to_string(),
        };
        Some((id, lane, crate::views::shown(caller, job)))
    })
    .with_names(d.lanes_of.iter().map(|(job, &(id, _))| (id, crate::views::shown(caller, job))))
}

/// Every phase from its grant to its finish (a phase still open runs to `end_h`), clipped
/// to `window` (hours), per group and lane; `lane_of` gives a job's colour, the lane of a phase
/// and the name to label it with (`None`: not drawn).
fn phase_bars<'a>(
    events: impl Iterator<Item = &'a PlaneEvent>,
    window: (f64, f64),
    end_h: f64,
    lane_of: impl Fn(&str, Phase) -> Option<(u32, String, String)>,
) -> Timeline {
    let mut open: BTreeMap<(String, u8), (f64, Phase, u64, u32)> = BTreeMap::new();
    let mut lanes: BTreeMap<u32, BTreeMap<String, Vec<Bar>>> = BTreeMap::new();
    let mut push = |job: &str, start: f64, end: f64, phase: Phase, it: u64, g: u32| {
        let (s, e) = (start.max(window.0), end.min(window.1));
        let Some((id, lane, name)) = lane_of(job, phase).filter(|_| e > s) else { return };
        let label = format!("{name} {} {it}", if phase == Phase::Rollout { "rollout" } else { "training" });
        let bar = Bar { start_h: s, end_h: e, job: id, kind: BarKind::Phase, label };
        lanes.entry(g).or_default().entry(lane).or_default().push(bar);
    };
    for e in events {
        let (Some(phase), Some(it), Some(g)) = (e.phase, e.iteration, e.group) else { continue };
        let t = e.time_us as f64 / 3.6e9;
        let key = (e.job.clone(), phase as u8);
        match e.kind.as_str() {
            "grant" => {
                open.insert(key, (t, phase, it, g));
            }
            "finish" => {
                if let Some((start, p, k, g)) = open.remove(&key) {
                    push(&e.job, start, t, p, k, g);
                }
            }
            _ => {}
        }
    }
    for ((job, _), (start, p, k, g)) in open {
        push(&job, start, end_h, p, k, g);
    }
    let groups = lanes
        .into_iter()
        .map(|(g, ls)| GroupTimeline::new(g, ls.into_iter().map(|(name, bars)| Lane { name, bars }).collect(), window))
        .collect();
    Timeline { policy: "live".into(), window, groups, omitted_groups: 0, names: Default::default() }
}

/// An HTML report of a saved event log (the events of `GET /v1/events`): per job, its
/// phases, their mean durations and its restarts; and every phase on a timeline per group, as
/// the status page draws its recent ones.
pub fn events_report(title: &str, events: &[PlaneEvent]) -> String {
    let mut jobs: BTreeMap<&str, JobSummary> = BTreeMap::new();
    let mut open: BTreeMap<(&str, u8), u64> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.job.is_empty()) {
        let j = jobs.entry(&e.job).or_default();
        match (e.kind.as_str(), e.phase) {
            ("grant", Some(p)) => {
                open.insert((&e.job, p as u8), e.time_us);
            }
            ("finish", Some(p)) => {
                if let Some(t) = open.remove(&(&e.job, p as u8)) {
                    let held = if p == Phase::Rollout { &mut j.rollouts } else { &mut j.trainings };
                    held.push(e.time_us.saturating_sub(t));
                }
            }
            ("requeued" | "readmitted" | "preempted" | "moved", _) => j.restarts += 1,
            _ => {}
        }
    }
    let ids: BTreeMap<&str, u32> = jobs.keys().enumerate().map(|(i, j)| (*j, i as u32)).collect();
    let hours = |t: u64| t as f64 / 3.6e9;
    let start = events.iter().map(|e| e.time_us).min().unwrap_or(0);
    let end = events.iter().map(|e| e.time_us).max().unwrap_or(0).max(start + 1);
    let timeline = phase_bars(events.iter(), (hours(start), hours(end)), hours(end), |job, phase| {
        let lane = if phase == Phase::Rollout { "rollout" } else { "training pool" };
        Some((*ids.get(job)?, lane.to_string(), job.to_string()))
    })
    .with_names(ids.iter().map(|(name, id)| (*id, name.to_string())));
    let mut h = format!("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{0}</title><style>body{{font-family:sans-serif;margin:24px}}table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:3px 6px}}</style></head><body><h1>{0}</h1>", escape(title));
    let _ = write!(
        h,
        "<p>{} events over {:.1} s. A phase's time is from its grant to its finish as the server saw them (a driver that \
         is slow to take a grant, e.g. while its processes start, is counted); the median is shown.</p>",
        events.len(),
        (end - start) as f64 / 1e6
    );
    h.push_str("<table><tr><th>job</th><th>rollouts</th><th>median rollout s</th><th>trainings</th><th>median training s</th><th>re-admissions</th></tr>");
    let median = |held: &[u64]| {
        let mut v = held.to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).map(|us| format!("{:.3}", *us as f64 / 1e6)).unwrap_or_default()
    };
    for (job, j) in &jobs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(job),
            j.rollouts.len(),
            median(&j.rollouts),
            j.trainings.len(),
            median(&j.trainings),
            j.restarts
        );
    }
    h.push_str("</table><h2>Phases</h2>");
    h.push_str(&weave_timeline::render_timeline(&timeline));
    h.push_str("</body></html>\n");
    h
}

/// Per job in a report: the microseconds each rollout and training was held; re-admissions.
#[derive(Default)]
struct JobSummary {
    rollouts: Vec<u64>,
    trainings: Vec<u64>,
    restarts: u32,
}
