//! Policy-level charts.

use crate::svg::{color, legend, Plot, Svg};
use weave_sim::PolicyReport;

const W: f64 = 560.0;
const H: f64 = 260.0;

pub fn cost_bars(reports: &[PolicyReport]) -> String {
    let max = reports.iter().map(|r| r.total_cost.as_dollars()).fold(0.0, f64::max).max(1.0);
    let row = 26.0;
    let (left, width) = (150.0, 520.0);
    let mut s = Svg::new(left + width + 90.0, 20.0 + row * reports.len() as f64 + 30.0);
    for (i, r) in reports.iter().enumerate() {
        let y = 10.0 + i as f64 * row;
        let cost = r.total_cost.as_dollars();
        let w = cost / max * width;
        s.text(left - 8.0, y + 15.0, "end", &r.policy);
        s.rect(left, y + 3.0, w, row - 8.0, color(i), Some(&format!("{}: ${cost:.0}", r.policy)));
        s.text(left + w + 6.0, y + 15.0, "start", &format!("${cost:.0}"));
        let lb = left + r.lower_bound_cost.as_dollars() / max * width;
        s.line(lb, y, lb, y + row - 2.0, "#000", true);
    }
    let axis_y = 14.0 + row * reports.len() as f64;
    s.line(left, axis_y, left + width, axis_y, "#333", false);
    s.text(left + width / 2.0, axis_y + 18.0, "middle", "total cost ($); dashed: lower bound (busy GPU-time only)");
    s.finish("total cost per policy")
}

/// Where the money goes: one stacked bar per policy (busy, switching, sync, idle alone in a
/// group, other idle), in dollars.
pub fn money_split(reports: &[PolicyReport]) -> String {
    const PARTS: [(&str, &str); 5] = [
        ("busy", "#4e79a7"),
        ("switching", "#f28e2b"),
        ("weight sync", "#edc948"),
        ("idle alone in a group", "#e15759"),
        ("other idle", "#bab0ac"),
    ];
    let max = reports.iter().map(|r| r.total_cost.as_dollars()).fold(0.0, f64::max).max(1.0);
    let row = 26.0;
    let (left, width) = (150.0, 520.0);
    let mut s = Svg::new(left + width + 90.0, 20.0 + row * reports.len() as f64 + 50.0);
    for (i, r) in reports.iter().enumerate() {
        let y = 10.0 + i as f64 * row;
        let m = &r.money;
        s.text(left - 8.0, y + 15.0, "end", &r.policy);
        let mut x = left;
        for ((name, fill), part) in PARTS.iter().zip([&m.busy, &m.switching, &m.sync, &m.idle_alone, &m.idle_other]) {
            let w = part.cost.as_dollars() / max * width;
            let title = format!("{}: {name} ${:.0} ({:.1}%)", r.policy, part.cost.as_dollars(), part.share * 100.0);
            s.rect(x, y + 3.0, w, row - 8.0, fill, Some(&title));
            x += w;
        }
        s.text(x + 6.0, y + 15.0, "start", &format!("${:.0}", r.total_cost.as_dollars()));
    }
    let axis_y = 14.0 + row * reports.len() as f64;
    s.line(left, axis_y, left + width, axis_y, "#333", false);
    let mut lx = left;
    for (name, fill) in PARTS {
        s.rect(lx, axis_y + 10.0, 10.0, 10.0, fill, None);
        s.text(lx + 14.0, axis_y + 19.0, "start", name);
        lx += 24.0 + name.len() as f64 * 6.0;
    }
    s.finish("where the money goes, per policy")
}

fn series_end(reports: &[PolicyReport]) -> f64 {
    reports.iter().flat_map(|r| r.gpu_series.last()).map(|p| p.hours).fold(0.0, f64::max).max(r_makespan(reports))
}

fn r_makespan(reports: &[PolicyReport]) -> f64 {
    reports.iter().map(|r| r.makespan_h).fold(0.0, f64::max)
}

/// Step line of a series (value holds until the next point).
fn steps(p: &Plot, pts: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(pts.len() * 2 + 1);
    for (i, &(x, y)) in pts.iter().enumerate() {
        if i > 0 {
            out.push((p.px(x), p.py(pts[i - 1].1)));
        }
        out.push((p.px(x), p.py(y)));
    }
    if let Some(&(_, y)) = pts.last() {
        out.push((p.px(end), p.py(y)));
    }
    out
}

fn line_chart(
    reports: &[PolicyReport],
    title: &str,
    y_title: &str,
    value: &dyn Fn(&weave_sim::metrics::SeriesPoint) -> f64,
) -> String {
    let end = series_end(reports);
    let ymax = reports.iter().flat_map(|r| r.gpu_series.iter().map(value)).fold(0.0, f64::max).max(1.0) * 1.05;
    let mut p = Plot::new(W, H, (0.0, end.max(1e-6)), (0.0, ymax), "time (hours)", y_title);
    for (i, r) in reports.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r.gpu_series.iter().map(|q| (q.hours, value(q))).collect();
        let line = steps(&p, &pts, end);
        p.svg.polyline(&line, color(i));
    }
    p.svg.finish(title)
}

pub fn gpus_over_time(reports: &[PolicyReport]) -> String {
    let items: Vec<(String, &str)> = reports.iter().enumerate().map(|(i, r)| (r.policy.clone(), color(i))).collect();
    format!(
        "{}<div class=\"charts\"><div><p class=\"muted\">Rollout pool (H20)</p>{}</div><div><p class=\"muted\">Training pool (H800)</p>{}</div></div>",
        legend(&items),
        line_chart(reports, "H20 GPUs held over time", "H20 GPUs held", &|q| q.rollout_gpus as f64),
        line_chart(reports, "H800 GPUs held over time", "H800 GPUs held", &|q| q.training_gpus as f64),
    )
}

pub fn cost_over_time(reports: &[PolicyReport], prices: (f64, f64)) -> String {
    let items: Vec<(String, &str)> = reports.iter().enumerate().map(|(i, r)| (r.policy.clone(), color(i))).collect();
    let cost =
        move |q: &weave_sim::metrics::SeriesPoint| q.rollout_gpus as f64 * prices.0 + q.training_gpus as f64 * prices.1;
    format!("{}{}", legend(&items), line_chart(reports, "cost per hour over time", "cost ($ per hour)", &cost))
}

pub fn slowdown_vs_slo(reports: &[PolicyReport]) -> String {
    let mut out = String::from("<div class=\"charts\">");
    let ymax = reports.iter().flat_map(|r| r.per_job.iter().map(|j| j.slowdown)).fold(2.0, f64::max) * 1.05;
    let xmax = reports.iter().flat_map(|r| r.per_job.iter().map(|j| j.slo)).fold(2.0, f64::max) * 1.02;
    for (i, r) in reports.iter().enumerate() {
        let mut p = Plot::new(360.0, 240.0, (0.9, xmax), (0.0, ymax), "job's SLO (allowed slowdown)", "slowdown");
        let (a, b) = (p.px(0.9), p.px(xmax));
        let (ya, yb) = (p.py(0.9), p.py(xmax.min(ymax)));
        p.svg.line(a, ya, b.min(p.px(ymax)), yb, "#000", true);
        for j in &r.per_job {
            if j.predicted_slowdown > 0.0 {
                // Predicted at admission: a small grey square under the realized dot.
                let (x, y) = (p.px(j.slo), p.py(j.predicted_slowdown));
                let title = format!("{}: predicted {:.3} at admission", j.name, j.predicted_slowdown);
                p.svg.rect(x - 1.5, y - 1.5, 3.0, 3.0, "#999", Some(&title));
            }
            let (x, y) = (p.px(j.slo), p.py(j.slowdown));
            p.svg.circle(x, y, 2.5, color(i), &format!("{}: slowdown {:.3}, SLO {:.2}", j.name, j.slowdown, j.slo));
        }
        out.push_str(&format!(
            "<div><p class=\"muted\">{}</p>{}</div>",
            crate::svg::escape(&r.policy),
            p.svg.finish(&format!("slowdown vs SLO: {}", r.policy))
        ));
    }
    out.push_str("</div>");
    out
}

/// Two horizontal bars per row (against solo-disagg and against colocated) with a dashed line
/// at 1x (break-even); a missing value draws no bar.
pub fn ratio_bars(rows: &[(&str, Option<f64>, Option<f64>)], axis: &str) -> String {
    let max = rows.iter().flat_map(|r| [r.1, r.2]).flatten().fold(1.0, f64::max) * 1.1;
    let row = 34.0;
    let (left, width) = (210.0, 480.0);
    let mut s = Svg::new(left + width + 70.0, 20.0 + row * rows.len() as f64 + 30.0);
    for (i, (name, a, b)) in rows.iter().enumerate() {
        let y = 10.0 + i as f64 * row;
        s.text(left - 8.0, y + 19.0, "end", name);
        for (k, v) in [a, b].into_iter().enumerate() {
            let Some(v) = v else { continue };
            let (w, by) = (v / max * width, y + 3.0 + k as f64 * 14.0);
            s.rect(left, by, w, 12.0, color(k), Some(&format!("{name}: {v:.2}x")));
            s.text(left + w + 4.0, by + 10.0, "start", &format!("{v:.2}x"));
        }
    }
    let axis_y = 14.0 + row * rows.len() as f64;
    s.line(left, axis_y, left + width, axis_y, "#333", false);
    let one = left + width / max;
    s.line(one, 6.0, one, axis_y, "#000", true);
    s.text(left + width / 2.0, axis_y + 18.0, "middle", &format!("{axis}; dashed: 1x"));
    s.finish(axis)
}

/// Nodes of pool `pool` (0 rollout, 1 training) each tenant used, hour by hour, with its
/// entitlement as a dashed line of the same colour.
pub fn share_over_time(tenants: &[weave_sim::tenancy::TenantReport], pool: usize, title: &str) -> String {
    let hours = tenants.iter().map(|t| t.hourly_use.len()).max().unwrap_or(0).max(1) as f64;
    let ymax = tenants
        .iter()
        .flat_map(|t| t.hourly_use.iter().map(|u| u[pool]).chain([t.entitlement[pool]]))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let mut p = Plot::new(W, H, (0.0, hours), (0.0, ymax), "time (hours)", "nodes in use");
    for (i, t) in tenants.iter().enumerate() {
        let pts: Vec<(f64, f64)> = t.hourly_use.iter().enumerate().map(|(k, u)| (k as f64, u[pool])).collect();
        let line = steps(&p, &pts, hours);
        p.svg.polyline(&line, color(i));
        let y = p.py(t.entitlement[pool]);
        let (x0, x1) = (p.px(0.0), p.px(hours));
        p.svg.line(x0, y, x1, y, color(i), true);
    }
    p.svg.finish(title)
}
