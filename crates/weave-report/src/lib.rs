//! Weave's pictures: one self-contained HTML file (inline SVG, inline CSS, no scripts, fonts
//! or network) with a phase timeline per co-execution group, GPUs held and cost per hour over
//! time per policy, total cost against its lower bound, slowdown against SLO per job, and the
//! headline table. Pure: takes data, returns a string.

mod charts;
pub mod group;
pub mod table;
pub mod text;

pub use weave_timeline::{render_timeline, svg, Bar, BarKind, GroupTimeline, Lane, Timeline};

use std::fmt::Write;
use svg::escape;
use weave_sim::PolicyReport;

/// Everything a report shows.
pub struct ReportData<'a> {
    pub title: String,
    /// Lines describing the workload and the run.
    pub notes: Vec<String>,
    pub reports: &'a [PolicyReport],
    /// $ per GPU-hour of the rollout and training pools (for cost over time).
    pub prices: (f64, f64),
    /// The phase timeline of one policy, if events were recorded.
    pub timeline: Option<Timeline>,
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.legend span{margin-right:14px;font-size:12px;white-space:nowrap}\
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}\
.charts{display:flex;flex-wrap:wrap;gap:16px}.muted{color:#666;font-size:12px}";

/// Renders the whole report.
pub fn render(data: &ReportData) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{}</title><style>{STYLE}</style></head><body>",
        escape(&data.title)
    );
    let _ = write!(h, "<h1>{}</h1>", escape(&data.title));
    for n in &data.notes {
        let _ = write!(h, "<p class=\"muted\">{}</p>", escape(n));
    }
    h.push_str("<h2>Headline</h2>");
    h.push_str(&headline_table(data.reports));
    if let Some(t) = staleness_table(data.reports) {
        h.push_str("<h2>Bounded staleness</h2><p class=\"muted\">Jobs that declared a staleness k: their rollouts may use weights up to k versions old. Versions behind: the mean over their rollouts of how many versions each lagged (0 where a policy ran them on-policy: solo-disagg, colocated, and co-located members).</p>");
        h.push_str(&t);
    }
    h.push_str("<h2>Total cost per policy</h2><p class=\"muted\">Bars: what was paid. Dashed line: the lower bound, what the GPUs actually kept busy would cost.</p>");
    h.push_str(&charts::cost_bars(data.reports));
    h.push_str("<h2>Where the money goes</h2><p class=\"muted\">Every GPU-hour held, by what it did: running a phase, loading a job's state, rollout GPUs waiting for their own job's weight sync, idle in a group with a single member (fragmentation), other idle (dependency bubbles and imbalance in shared groups).</p>");
    h.push_str(&charts::money_split(data.reports));
    h.push_str("<h2>GPUs held over time</h2>");
    h.push_str(&charts::gpus_over_time(data.reports));
    h.push_str("<h2>Cost per hour over time</h2>");
    h.push_str(&charts::cost_over_time(data.reports, data.prices));
    h.push_str("<h2>Slowdown against SLO, per job</h2><p class=\"muted\">Each dot is a job; above the dashed diagonal its slowdown exceeded its SLO. Grey squares: the slowdown predicted for the job at its admission.</p>");
    h.push_str(&charts::slowdown_vs_slo(data.reports));
    if let Some(t) = &data.timeline {
        let _ = write!(h, "<h2>Phase timeline: {}</h2>", escape(&t.policy));
        h.push_str(&render_timeline(t));
    }
    h.push_str("</body></html>\n");
    h
}

fn headline_table(reports: &[PolicyReport]) -> String {
    let mut t = String::from(
        "<table><tr><th>policy</th><th>cost $</th><th>lower bound $</th><th>$/h</th><th>iterations per $1k</th>\
<th>vs solo-disagg</th><th>vs colocated</th><th>peak H20 GPUs</th><th>peak H800 GPUs</th><th>idle H20 GPU-h</th>\
<th>idle H800 GPU-h</th><th>slowdown p50 / p99</th><th>SLO met (jobs / iterations)</th><th>admissions direct / scaling / isolated / colocated</th><th>moves</th></tr>",
    );
    let ratio = |v: Option<f64>| v.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
    for r in reports {
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.3} / {:.3}</td><td>{:.1}% / {:.1}%</td><td>{} / {} / {} / {}</td><td>{}</td></tr>",
            escape(&r.policy),
            r.total_cost.as_dollars(),
            r.lower_bound_cost.as_dollars(),
            r.cost_per_hour,
            r.iterations_per_k_dollars,
            ratio(r.vs_solo_disagg),
            ratio(r.vs_colocated),
            r.rollout.peak_gpus,
            r.training.peak_gpus,
            r.rollout.idle_gpu_hours,
            r.training.idle_gpu_hours,
            r.slowdown.p50,
            r.slowdown.p99,
            r.slo_attainment_jobs * 100.0,
            r.slo_attainment_iterations * 100.0,
            r.admissions.direct,
            r.admissions.scaling,
            r.admissions.isolated,
            r.admissions.colocated,
            r.events.consolidation_moves
        );
    }
    t.push_str("</table>");
    t
}

/// Per policy: its stale jobs, their declared and effective staleness, and the ratio to
/// solo-async; `None` when every job is on-policy.
fn staleness_table(reports: &[PolicyReport]) -> Option<String> {
    if !reports.iter().any(PolicyReport::shows_staleness) {
        return None;
    }
    let mut t = String::from(
        "<table><tr><th>policy</th><th>stale jobs</th><th>declared k (mean)</th><th>versions behind (mean)</th><th>vs solo-async</th></tr>",
    );
    for r in reports {
        let [jobs, declared, behind] = r.staleness_cells();
        let vs = r.vs_solo_async.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{jobs}</td><td>{declared}</td><td>{behind}</td><td>{vs}</td></tr>",
            escape(&r.policy)
        );
    }
    t.push_str("</table>");
    Some(t)
}

/// A page's start: the document head, the title and its notes.
fn page_head(title: &str, notes: &[String]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>{}</title><style>{STYLE}</style></head><body>",
        escape(title)
    );
    let _ = write!(h, "<h1>{}</h1>", escape(title));
    for n in notes {
        let _ = write!(h, "<p class=\"muted\">{}</p>", escape(n));
    }
    h
}

/// The waterfall page (`weave experiment waterfall --report`): per row, Weave against both
/// baselines at fixed lifetimes and at fixed iterations, then the table.
pub fn render_waterfall(title: &str, notes: &[String], rows: &[weave_sim::waterfall::Row]) -> String {
    let mut h = page_head(title, notes);
    h.push_str("<h2>Cost ratio at fixed lifetimes (the paper's accounting)</h2>");
    let fixed_lifetimes: Vec<_> = rows
        .iter()
        .map(|r| (r.step.as_str(), Some(r.cost_ratio_vs_solo_disagg), Some(r.cost_ratio_vs_colocated)))
        .collect();
    h.push_str(&charts::ratio_bars(&fixed_lifetimes, "baseline cost / Weave cost"));
    h.push_str("<h2>Iterations per dollar at fixed iterations (ours)</h2>");
    let fixed_iterations: Vec<_> = rows
        .iter()
        .map(|r| (r.step.as_str(), r.iterations_per_dollar_vs_solo_disagg, r.iterations_per_dollar_vs_colocated))
        .collect();
    h.push_str(&charts::ratio_bars(&fixed_iterations, "Weave iterations per $ / baseline's"));
    h.push_str(&svg::legend(&[("vs solo-disagg".into(), svg::color(0)), ("vs colocated".into(), svg::color(1))]));
    h.push_str("<h2>Rows</h2><table><tr><th>step</th><th>change</th><th>cost ratio vs solo</th><th>vs colocated</th><th>iters/$ vs solo</th><th>vs colocated</th><th>SLO met (jobs / iterations)</th></tr>");
    let ratio = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}x"));
    for r in rows {
        let iters = r.slo_met_iterations.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}% / {iters}</td></tr>",
            escape(&r.step),
            escape(&r.change),
            ratio(Some(r.cost_ratio_vs_solo_disagg)),
            ratio(Some(r.cost_ratio_vs_colocated)),
            ratio(r.iterations_per_dollar_vs_solo_disagg),
            ratio(r.iterations_per_dollar_vs_colocated),
            r.slo_met_jobs * 100.0
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

/// The tenants page (`weave experiment tenants --report`): per sharing mode, each tenant's
/// nodes in use hour by hour against its entitlement (dashed), per pool, then a table.
pub fn render_tenants(title: &str, notes: &[String], modes: &[(&str, &[weave_sim::tenancy::TenantReport])]) -> String {
    let mut h = page_head(title, notes);
    for (mode, tenants) in modes {
        let _ = write!(h, "<h2>{}</h2>", escape(mode));
        let items: Vec<(String, &str)> =
            tenants.iter().enumerate().map(|(i, t)| (t.name.clone(), svg::color(i))).collect();
        h.push_str(&svg::legend(&items));
        h.push_str("<div class=\"charts\">");
        for (p, pool) in ["rollout pool (H20)", "training pool (H800)"].iter().enumerate() {
            let _ = write!(
                h,
                "<div><p class=\"muted\">{pool}</p>{}</div>",
                charts::share_over_time(tenants, p, &format!("{mode}: {pool} nodes in use per tenant"))
            );
        }
        h.push_str("</div>");
        h.push_str("<table><tr><th>tenant</th><th>jobs</th><th>delay mean / p99 / max h</th><th>training use / entitlement</th><th>longest below entitlement h</th><th>preemptions (lost iterations)</th></tr>");
        for t in tenants.iter() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.2} / {:.2} / {:.2}</td><td>{:.1} / {:.1} ({:.0}%)</td><td>{:.2}</td><td>{} ({})</td></tr>",
                escape(&t.name),
                t.jobs,
                t.delay_mean_h,
                t.delay_p99_h,
                t.delay_max_h,
                t.mean_use[1],
                t.entitlement[1],
                t.use_of_entitlement[1] * 100.0,
                t.longest_below_entitlement_h,
                t.preemptions,
                t.lost_iterations
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    h
}
