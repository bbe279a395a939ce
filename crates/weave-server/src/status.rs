//! The read-only status page: groups, members, current phases and a recent timeline, drawn
//! with the same timeline renderer as the simulator's report.

use crate::auth::Caller;
use crate::plane::{JobState, Plane};
use std::collections::BTreeMap;
use std::fmt::Write;
use weave_dispatch::Phase;
use weave_timeline::svg::escape;
use weave_timeline::{Bar, BarKind, GroupTimeline, Lane, Timeline};

/// Hours of history drawn.
const RECENT_H: f64 = 0.5;

pub fn render(plane: &Plane, caller: &Caller, now_us: u64) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>Weave status</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px}.muted{color:#666;font-size:12px}.legend span{margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}</style></head><body><h1>Weave status</h1>");
    let (r, t) = plane.placer().nodes_in_use();
    let _ = write!(
        h,
        "<p class=\"muted\">Tenant {}{}. Nodes held: {r} rollout, {t} training; ${:.2} per hour.</p>",
        escape(&caller.tenant),
        if caller.admin { " (admin)" } else { "" },
        plane.placer().hourly_cost().as_dollars()
    );
    h.push_str("<table><tr><th>job</th><th>state</th><th>group</th><th>now</th><th>iterations</th><th>predicted slowdown</th></tr>");
    for j in plane.jobs().filter(|j| caller.may_see(&j.tenant, &j.name)) {
        let v = crate::views::view(j);
        let name = crate::views::shown(caller, &v.id);
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td></tr>",
            escape(&name),
            format!("{:?}", v.state).to_lowercase(),
            v.group.map(|g| format!("g{g}")).unwrap_or_default(),
            escape(v.granted.as_deref().unwrap_or(if j.state == JobState::Running { "waiting" } else { "-" })),
            v.completed_iterations,
            v.iterations.map(|n| n.to_string()).unwrap_or_else(|| "∞".into()),
            v.predicted_slowdown.map(|s| format!("{s:.3}")).unwrap_or_default()
        );
    }
    h.push_str("</table><h2>Recent phases</h2>");
    let timeline = recent(plane, caller, now_us);
    if timeline.groups.is_empty() {
        h.push_str("<p class=\"muted\">No phases in the last half hour.</p>");
    } else {
        h.push_str(&weave_timeline::render_timeline(&timeline));
    }
    h.push_str("</body></html>\n");
    h
}

/// Bars from grants to finishes (open phases run to now), per group and lane.
fn recent(plane: &Plane, caller: &Caller, now_us: u64) -> Timeline {
    let now_h = now_us as f64 / 3.6e9;
    let window = ((now_h - RECENT_H).max(0.0), now_h.max(1e-9));
    let mut open: BTreeMap<(String, u8), (f64, Phase, u64, u32)> = BTreeMap::new();
    let mut lanes: BTreeMap<u32, BTreeMap<String, Vec<Bar>>> = BTreeMap::new();
    let push = |lanes: &mut BTreeMap<u32, BTreeMap<String, Vec<Bar>>>,
                job: &str,
                start: f64,
                end: f64,
                phase: Phase,
                it: u64,
                g: u32| {
        let (s, e) = (start.max(window.0), end.min(window.1));
        if e <= s {
            return;
        }
        let Some(entry) = plane.job(job) else { return };
        let lane = match phase {
            Phase::Rollout => format!("rollout block {}", entry.decision.as_ref().map(|d| d.block).unwrap_or(0)),
            Phase::Train => "training pool".to_string(),
        };
        let shown = crate::views::shown(caller, job);
        let label = format!("{shown} {} {it}", if phase == Phase::Rollout { "rollout" } else { "training" });
        lanes.entry(g).or_default().entry(lane).or_default().push(Bar {
            start_h: s,
            end_h: e,
            job: entry.id.0,
            kind: BarKind::Phase,
            label,
        });
    };
    for e in plane.events() {
        let visible = plane.job(&e.job).is_some_and(|j| caller.may_see(&j.tenant, &j.name));
        let (Some(phase), Some(it), Some(g), true) = (e.phase, e.iteration, e.group, visible) else { continue };
        let t = e.time_us as f64 / 3.6e9;
        let key = (e.job.clone(), phase as u8);
        match e.kind.as_str() {
            "grant" => {
                open.insert(key, (t, phase, it, g));
            }
            "finish" => {
                if let Some((start, p, k, g)) = open.remove(&key) {
                    push(&mut lanes, &e.job, start, t, p, k, g);
                }
            }
            _ => {}
        }
    }
    for ((job, _), (start, p, k, g)) in open {
        push(&mut lanes, &job, start, now_h, p, k, g);
    }
    let groups = lanes
        .into_iter()
        .map(|(g, ls)| GroupTimeline {
            group: g,
            lanes: ls.into_iter().map(|(name, bars)| Lane { name, bars }).collect(),
        })
        .collect();
    Timeline { policy: "live".into(), window, groups, omitted_groups: 0 }
}
