//! The phase timeline (Gantt) of co-execution groups: one lane per rollout block, one for the
//! training pool, one for weight syncs; bars coloured by job; switches dark; gaps are idle.

use crate::svg::{color, legend, Plot};
use std::collections::BTreeMap;
use weave_dispatch::{EventRecord, LogKind, Phase};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    Phase,
    Switch,
    Sync,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub start_h: f64,
    pub end_h: f64,
    pub job: u32,
    pub kind: BarKind,
    pub label: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    pub name: String,
    pub bars: Vec<Bar>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GroupTimeline {
    pub group: u32,
    pub lanes: Vec<Lane>,
    /// Hours this group is drawn over: its own bars' span within the timeline's window (a
    /// group active two minutes of an hour is drawn over those two minutes, not as a sliver).
    pub window: (f64, f64),
}

impl GroupTimeline {
    /// A group's lanes, drawn over the span of their bars (`fallback` when there are none).
    pub fn new(group: u32, lanes: Vec<Lane>, fallback: (f64, f64)) -> GroupTimeline {
        let bars = || lanes.iter().flat_map(|l| &l.bars);
        let start = bars().map(|b| b.start_h).fold(f64::INFINITY, f64::min);
        let end = bars().map(|b| b.end_h).fold(f64::NEG_INFINITY, f64::max);
        let window = if start < end { (start, end) } else { fallback };
        GroupTimeline { group, lanes, window }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub policy: String,
    /// Hours shown.
    pub window: (f64, f64),
    pub groups: Vec<GroupTimeline>,
    /// Groups active in the window but not drawn (to stay legible).
    pub omitted_groups: usize,
    /// Jobs' names by the number their bars carry (the legend shows `job N` for others).
    pub names: BTreeMap<u32, String>,
}

/// Hours shown when no window is given.
pub const DEFAULT_WINDOW_H: f64 = 2.0;

impl Timeline {
    /// Builds the timeline of `policy` from its dispatcher events; `window` in hours (default:
    /// the first two hours), at most `max_groups` groups (the busiest in the window).
    pub fn from_events(
        policy: &str,
        events: &[EventRecord],
        window: Option<(f64, f64)>,
        max_groups: usize,
    ) -> Timeline {
        let first = events.iter().map(|e| e.entry.time.as_hours_f64()).fold(f64::INFINITY, f64::min);
        let first = if first.is_finite() { first } else { 0.0 };
        let window = window.unwrap_or((first, first + DEFAULT_WINDOW_H));
        let mut by_group: BTreeMap<u32, Vec<&EventRecord>> = BTreeMap::new();
        for e in events {
            by_group.entry(e.group.0).or_default().push(e);
        }
        let mut groups: Vec<GroupTimeline> = by_group
            .into_iter()
            .map(|(g, evs)| GroupTimeline::new(g, lanes(&evs, window), window))
            .filter(|g| g.lanes.iter().any(|l| !l.bars.is_empty()))
            .collect();
        let active = groups.len();
        // The busiest groups, then in id order.
        groups.sort_by_key(|g| std::cmp::Reverse(g.lanes.iter().map(|l| l.bars.len()).sum::<usize>()));
        groups.truncate(max_groups);
        groups.sort_by_key(|g| g.group);
        let omitted_groups = active - groups.len();
        Timeline { policy: policy.to_string(), window, omitted_groups, groups, names: BTreeMap::new() }
    }

    /// The same timeline with jobs' names for its legend and its bars' labels (`names[k]`
    /// for job number k).
    pub fn with_names(mut self, names: impl IntoIterator<Item = (u32, String)>) -> Timeline {
        self.names = names.into_iter().collect();
        for b in self.groups.iter_mut().flat_map(|g| g.lanes.iter_mut()).flat_map(|l| l.bars.iter_mut()) {
            if let Some(name) = self.names.get(&b.job) {
                let prefix = format!("job {} ", b.job);
                if let Some(rest) = b.label.strip_prefix(&prefix) {
                    b.label = format!("{name} {rest}");
                }
            }
        }
        self
    }
}

fn lane_names(phase: Option<Phase>, nodes: &[u32]) -> Vec<String> {
    match phase {
        Some(Phase::Rollout) => nodes.iter().map(|n| format!("rollout r{n}")).collect(),
        Some(Phase::Train) => vec!["training pool".to_string()],
        None => vec!["weight sync".to_string()],
    }
}

/// A bar begun but not yet ended: start (hours), kind, lanes, label.
type Open = BTreeMap<(u32, u8), (f64, BarKind, Vec<String>, String)>;

fn lanes(events: &[&EventRecord], window: (f64, f64)) -> Vec<Lane> {
    let mut open: Open = BTreeMap::new();
    let mut lanes: BTreeMap<String, Vec<Bar>> = BTreeMap::new();
    let key = |p: Option<Phase>| match p {
        Some(Phase::Rollout) => 0u8,
        Some(Phase::Train) => 1,
        None => 2,
    };
    let mut close = |open: &mut Open, job: u32, k: u8, end: f64| {
        if let Some((start, kind, names, label)) = open.remove(&(job, k)) {
            let (s, e) = (start.max(window.0), end.min(window.1));
            if e > s {
                for n in names {
                    lanes.entry(n).or_default().push(Bar { start_h: s, end_h: e, job, kind, label: label.clone() });
                }
            }
        }
    };
    for r in events {
        let e = &r.entry;
        let (t, job) = (e.time.as_hours_f64(), e.job.0);
        let what = |p: &str| format!("job {job} {p} {}", e.iteration);
        match e.kind {
            LogKind::SwitchStart => {
                let kind = e.switch.map(|k| format!("{k:?}").to_lowercase()).unwrap_or_default();
                let phase = if e.phase == Some(Phase::Rollout) { "rollout" } else { "training" };
                open.insert(
                    (job, key(e.phase)),
                    (t, BarKind::Switch, lane_names(e.phase, &e.nodes), what(&format!("{kind} switch to {phase}"))),
                );
            }
            LogKind::PhaseStart => {
                close(&mut open, job, key(e.phase), t);
                let phase = if e.phase == Some(Phase::Rollout) { "rollout" } else { "training" };
                open.insert((job, key(e.phase)), (t, BarKind::Phase, lane_names(e.phase, &e.nodes), what(phase)));
            }
            // With long-tail migration the nodes are handed on before the stragglers finish
            // on a few workers: the bar on the nodes ends at the release.
            LogKind::PhaseEnd | LogKind::RolloutReleased => close(&mut open, job, key(e.phase), t),
            LogKind::SyncStart => {
                open.insert((job, 2), (t, BarKind::Sync, lane_names(None, &[]), what("weight sync after iteration")));
            }
            LogKind::SyncEnd => close(&mut open, job, 2, t),
            LogKind::Join | LogKind::Leave | LogKind::Completed | LogKind::Lent | LogKind::LoanEnded => {}
        }
    }
    // Still running at the end of the log: draw to the window's end.
    let keys: Vec<(u32, u8)> = open.keys().copied().collect();
    for (job, k) in keys {
        close(&mut open, job, k, window.1);
    }
    // Rollout lanes in node order, then training, then sync.
    let mut out: Vec<Lane> = lanes.into_iter().map(|(name, bars)| Lane { name, bars }).collect();
    out.sort_by_key(|l| {
        let n: u32 = l.name.trim_start_matches("rollout r").parse().unwrap_or(u32::MAX);
        (l.name.starts_with("weight"), l.name.starts_with("training"), n)
    });
    out
}

/// The unit a span of `hours` reads best in: its name, its short form and how many make an hour.
fn time_unit(hours: f64) -> (&'static str, &'static str, f64) {
    if hours < 2.0 / 60.0 {
        ("seconds", "s", 3600.0)
    } else if hours < 2.0 {
        ("minutes", "min", 60.0)
    } else {
        ("hours", "h", 1.0)
    }
}

/// `(from, to)` hours in the unit that suits their span, e.g. "12.5 s to 40.1 s".
fn span_text(window: (f64, f64)) -> String {
    let (_, short, k) = time_unit(window.1 - window.0);
    format!("{} {short} to {} {short}", round_for(window.0 * k), round_for(window.1 * k))
}

fn round_for(v: f64) -> String {
    format!("{v:.2}")
}

pub fn render(t: &Timeline) -> String {
    let mut out = format!(
        "<p class=\"muted\">Window {}. Colours are jobs; dark bars are switches; white gaps are idle time.{}</p>",
        span_text(t.window),
        if t.omitted_groups > 0 {
            format!(" {} more active groups not drawn.", t.omitted_groups)
        } else {
            String::new()
        }
    );
    let mut jobs: Vec<u32> =
        t.groups.iter().flat_map(|g| g.lanes.iter().flat_map(|l| l.bars.iter().map(|b| b.job))).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let name = |j: &u32| t.names.get(j).cloned().unwrap_or_else(|| format!("job {j}"));
    let items: Vec<(String, &str)> = jobs.iter().take(30).map(|j| (name(j), color(*j as usize))).collect();
    out.push_str(&legend(&items));
    for g in &t.groups {
        let lane_h = 20.0;
        let height = 16.0 + 44.0 + lane_h * g.lanes.len() as f64;
        // Each group in the unit its own span reads in (a run of minutes drawn in hours printed
        // every tick as 0.00).
        let (unit, _, k) = time_unit(g.window.1 - g.window.0);
        let x = (g.window.0 * k, g.window.1 * k);
        let mut p =
            Plot::with_left(1100.0, height, 110.0, x, (0.0, g.lanes.len() as f64), &format!("time ({unit})"), "");
        for (i, lane) in g.lanes.iter().enumerate() {
            let y = p.py((g.lanes.len() - i) as f64);
            p.svg.rect(p.left, y, p.w, lane_h - 2.0, "#f7f7f7", None);
            p.svg.text(p.left - 6.0, y + 13.0, "end", &lane.name);
            for b in &lane.bars {
                let (x0, x1) = (p.px(b.start_h * k), p.px(b.end_h * k));
                let fill = match b.kind {
                    BarKind::Switch => "#333",
                    _ => color(b.job as usize),
                };
                let (dy, h) = if b.kind == BarKind::Sync { (5.0, lane_h - 12.0) } else { (1.0, lane_h - 4.0) };
                let title = format!("{} ({:.1} s)", b.label, (b.end_h - b.start_h) * 3600.0);
                p.svg.rect(x0, y + dy, (x1 - x0).max(0.5), h, fill, Some(&title));
            }
        }
        out.push_str(&format!(
            "<p class=\"muted\">group g{}, {}</p>{}",
            g.group,
            span_text(g.window),
            p.svg.finish(&format!("timeline of group g{}", g.group))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(job: u32, start_h: f64, end_h: f64) -> Bar {
        Bar { start_h, end_h, job, kind: BarKind::Phase, label: format!("job {job} rollout 0") }
    }

    #[test]
    fn each_group_is_drawn_over_its_own_span_and_the_legend_names_the_jobs() {
        let lane = |bars| vec![Lane { name: "rollout r0".into(), bars }];
        let t = Timeline {
            policy: "live".into(),
            window: (0.0, 1.0),
            groups: vec![
                GroupTimeline::new(0, lane(vec![bar(0, 0.0, 0.5), bar(1, 0.5, 1.0)]), (0.0, 1.0)),
                // Active two minutes of the hour.
                GroupTimeline::new(1, lane(vec![bar(2, 0.40, 0.4333)]), (0.0, 1.0)),
            ],
            omitted_groups: 0,
            names: BTreeMap::new(),
        }
        .with_names([(0, "alpha".to_string()), (2, "gamma".to_string())]);
        assert_eq!(t.groups[0].window, (0.0, 1.0));
        assert_eq!(t.groups[1].window, (0.40, 0.4333));
        assert_eq!(t.groups[1].lanes[0].bars[0].label, "gamma rollout 0");
        let html = render(&t);
        // Each in the unit its span reads in: the hour in minutes, the two minutes in seconds.
        assert!(html.contains("group g0, 0.00 min to 60.00 min"), "{html}");
        assert!(html.contains("group g1, 1440.00 s to 1559.88 s") && html.contains("time (seconds)"), "{html}");
        // The group's bar fills its own plot's width, not a thirtieth of it.
        assert!(
            html.contains(">alpha</span>") && html.contains(">job 1</span>") && html.contains(">gamma</span>"),
            "{html}"
        );
        assert!(html.contains("margin-right:12px"), "the legend's names are spaced by their own style");
        // With no bars, a group falls back to the timeline's window.
        assert_eq!(GroupTimeline::new(5, Vec::new(), (0.0, 2.0)).window, (0.0, 2.0));
    }
}
