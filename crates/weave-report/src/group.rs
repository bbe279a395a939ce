//! `weave group analyze`'s report: a candidate group's steady state, member by member, its
//! pools' busy, switching and idle shares, and the host memory its cached states use.

use crate::table;
use serde::Serialize;
use weave_core::JobId;
use weave_dispatch::{GroupTiming, MemoryUse};

#[derive(Serialize)]
pub struct GroupReport {
    pub timing: GroupTiming,
    pub members: Vec<MemberRow>,
    pub memory: Vec<MemoryUse>,
    pub resident: bool,
}

#[derive(Serialize)]
pub struct MemberRow {
    pub job: JobId,
    pub job_type: String,
    pub nodes: Vec<u32>,
    pub rollout_s: f64,
    pub train_s: f64,
}

/// The report as text tables.
pub fn render_group(r: &GroupReport) -> String {
    let t = &r.timing;
    let mut out = format!(
        "meta-iteration {:.1} s ({})   T_cycle {:.1} s   T_load {:.1} s   saturated: {}   state: {}\n",
        t.meta_iteration.as_secs_f64(),
        t.method,
        t.t_cycle.as_secs_f64(),
        t.t_load.as_secs_f64(),
        if t.saturated { "yes" } else { "no" },
        if r.resident { "warm (host DRAM)" } else { "cold (no residency)" },
    );
    let mut m = table::new(&["member", "type", "nodes", "rollout s", "train s", "solo s", "co-exec s", "slowdown"]);
    for (row, mt) in r.members.iter().zip(&t.members) {
        let nodes: Vec<String> = row.nodes.iter().map(|n| format!("r{n}")).collect();
        m.add_row(vec![
            format!("m{}", row.job.0),
            row.job_type.clone(),
            nodes.join(","),
            format!("{:.1}", row.rollout_s),
            format!("{:.1}", row.train_s),
            format!("{:.1}", mt.solo.as_secs_f64()),
            format!("{:.1}", mt.coexec.as_secs_f64()),
            format!("{:.3}", mt.slowdown),
        ]);
    }
    table::align_numbers(&mut m);
    out.push_str(&format!("{m}\n"));
    let mut p = table::new(&["resource", "busy", "switching", "idle"]);
    for u in &t.pools {
        p.add_row(vec![u.resource.clone(), pct(u.busy), pct(u.switching), pct(u.idle)]);
    }
    table::align_numbers(&mut p);
    out.push_str(&format!("{p}\n"));
    let mut mem = table::new(&["node", "cached state", "host DRAM", "use"]);
    for u in &r.memory {
        let node = if u.node == "t" { "each training node".to_string() } else { u.node.clone() };
        mem.add_row(vec![
            node,
            u.used.to_string(),
            u.capacity.to_string(),
            pct(u.used.0 as f64 / u.capacity.0.max(1) as f64),
        ]);
    }
    table::align_numbers(&mut mem);
    out.push_str(&format!("{mem}\n"));
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}
