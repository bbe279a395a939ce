//! `weave group analyze`: the steady state of a candidate co-execution group.

use crate::input::{json, load_cluster, write_output};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::PathBuf;
use weave_core::{ClusterConfig, JobId, JobSpec, JobType, Micros, PhaseTimes};
use weave_dispatch::from_model::{member_spec, timing_member};
use weave_dispatch::{timing, Dispatcher, GroupLimits, Input, TimingMember};
use weave_model::{Deployment, ProfileModel, REFERENCE_BATCH};
use weave_report::group::{render_group, GroupReport, MemberRow};

#[derive(clap::Subcommand)]
pub enum GroupCommand {
    /// Meta-iteration time, each member's slowdown, pool idle time, saturation and memory use
    /// of a group. Members come from --member flags or a TOML/JSON file.
    Analyze(AnalyzeArgs),
    /// List the groups of a running `weave serve`.
    List {
        #[command(flatten)]
        conn: crate::client_cmd::Conn,
    },
}

#[derive(clap::Args)]
pub struct AnalyzeArgs {
    /// A member as `<type>@<nodes>` (e.g. `7B_8k@0`) or `<rollout s>:<train s>@<nodes>` (e.g.
    /// `120:80@0,1`), nodes being group-local rollout node indices. Repeat for each member.
    #[arg(long = "member", value_name = "SPEC")]
    members: Vec<String>,
    /// A group file: `[[member]]` tables with `type` or `rollout_s`/`train_s` (and optional
    /// `model` for switch costs, or measured `switch_warm_s`/`switch_cold_s`/`sync_s`) and
    /// `nodes`. TOML, or JSON when the name ends in .json.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Cold time slicing: states are not kept in host DRAM, every switch is cold.
    #[arg(long)]
    cold: bool,
    /// Cluster config (host DRAM, network); the paper's testbed when omitted.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// Write the dispatcher's decision log (JSON Lines: time, job, kind, phase, iteration,
    /// nodes, switch) for the first N iterations of every member, starting cold, to FILE.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Iterations per member in the --events log.
    #[arg(long, default_value_t = 4)]
    events_iterations: u64,
}

/// One member as a group file gives it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberEntry {
    #[serde(rename = "type")]
    job_type: Option<String>,
    model: Option<String>,
    rollout_s: Option<f64>,
    train_s: Option<f64>,
    nodes: Vec<u32>,
    /// Measured switch costs and sync, seconds, in place of the model's (what Weave's
    /// runtime reports of a real job).
    #[serde(default)]
    switch_warm_s: Option<f64>,
    #[serde(default)]
    switch_cold_s: Option<f64>,
    #[serde(default)]
    sync_s: Option<f64>,
    /// Bounded staleness k (rollouts may use weights up to k versions old); 0 by default.
    #[serde(default)]
    staleness: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    member: Vec<MemberEntry>,
}

pub fn run(cmd: GroupCommand) -> Result<()> {
    let args = match cmd {
        GroupCommand::Analyze(args) => args,
        GroupCommand::List { conn } => {
            return crate::client_cmd::group(crate::client_cmd::GroupListCommand::List { conn })
        }
    };
    let cluster = load_cluster(args.cluster.as_deref())?;
    let mut entries = Vec::new();
    if let Some(path) = &args.file {
        entries.extend(read_group_file(path)?);
    }
    for (i, m) in args.members.iter().enumerate() {
        entries.push(parse_member_flag(m).with_context(|| format!("--member #{} `{m}`", i + 1))?);
    }
    if entries.is_empty() {
        bail!("no members: give --member SPEC (repeatable) or --file FILE");
    }
    let (report, members) = analyze(&entries, &cluster, !args.cold)?;
    if let Some(path) = &args.events {
        let run = timing::run_group(&members, args.events_iterations.max(1));
        let mut text = String::new();
        for e in &run.log {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        return write_output(None, &json(&report)?);
    }
    write_output(None, &render_group(&report))
}

fn read_group_file(path: &PathBuf) -> Result<Vec<MemberEntry>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read group file {}", path.display()))?;
    let file: GroupFile = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).with_context(|| format!("{}: invalid group JSON", path.display()))?
    } else {
        toml::from_str(&text).with_context(|| format!("{}: invalid group TOML", path.display()))?
    };
    Ok(file.member)
}

fn parse_member_flag(s: &str) -> Result<MemberEntry> {
    let (what, nodes) = s.split_once('@').context("expected <type or rollout:train>@<nodes>")?;
    let nodes = nodes
        .split(',')
        .map(|n| n.trim().parse::<u32>().with_context(|| format!("node `{n}` is not an index")))
        .collect::<Result<Vec<u32>>>()?;
    let mut entry = MemberEntry {
        job_type: None,
        model: None,
        rollout_s: None,
        train_s: None,
        nodes,
        switch_warm_s: None,
        switch_cold_s: None,
        sync_s: None,
        staleness: 0,
    };
    match what.split_once(':') {
        Some((r, t)) => {
            entry.rollout_s = Some(r.trim().parse().with_context(|| format!("rollout seconds `{r}`"))?);
            entry.train_s = Some(t.trim().parse().with_context(|| format!("training seconds `{t}`"))?);
        }
        None => entry.job_type = Some(what.trim().to_string()),
    }
    Ok(entry)
}

/// Turns an entry into a job and its conservative phase durations.
fn job_of(i: usize, e: &MemberEntry, profile: &ProfileModel) -> Result<(JobSpec, PhaseTimes, Vec<u32>)> {
    let ctx = || format!("member {}", i + 1);
    let ty: JobType = match (&e.job_type, &e.model) {
        (Some(t), _) => t.parse().with_context(ctx)?,
        (None, Some(m)) => JobType { model: m.parse().with_context(ctx)?, max_tokens: 8192 },
        // Explicit durations without a model: switch costs of a 7B model.
        (None, None) => JobType::new(7, 8),
    };
    let mut nodes = e.nodes.clone();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() {
        bail!("member {}: `nodes` must list at least one rollout node", i + 1);
    }
    let width = nodes.len() as u32;
    let mut job = JobSpec {
        rollout_nodes: width,
        staleness: e.staleness,
        ..JobSpec::new(JobId(i as u32), format!("m{i}"), ty, REFERENCE_BATCH)
    };
    if e.staleness > weave_core::MAX_STALENESS {
        bail!(
            "member {}: `staleness` {} is above the largest allowed, {}",
            i + 1,
            e.staleness,
            weave_core::MAX_STALENESS
        );
    }
    let times = match (e.rollout_s, e.train_s) {
        (Some(r), Some(t)) => {
            if !(r.is_finite() && r > 0.0 && t.is_finite() && t > 0.0) {
                bail!("member {}: phase durations must be positive seconds", i + 1);
            }
            PhaseTimes { rollout: Micros::from_secs_f64(r), train: Micros::from_secs_f64(t) }
        }
        (None, None) => profile.estimate(Deployment::Disagg, &job).times,
        _ => bail!("member {}: give both rollout_s and train_s, or neither", i + 1),
    };
    job.phase_times = Some(times);
    Ok((job, times, nodes))
}

/// `m` with the entry's measured switch costs and sync in place of the model's.
fn with_measured_costs(i: usize, e: &MemberEntry, mut m: TimingMember) -> Result<TimingMember> {
    let secs = |field: &str, v: Option<f64>| -> Result<Option<Micros>> {
        match v {
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Micros::from_secs_f64(s))),
            Some(s) => bail!("member {}: `{field}` must be non-negative seconds, got {s}", i + 1),
            None => Ok(None),
        }
    };
    m.costs = m.costs.with_measured(secs("switch_warm_s", e.switch_warm_s)?, secs("switch_cold_s", e.switch_cold_s)?);
    m.sync = secs("sync_s", e.sync_s)?.unwrap_or(m.sync);
    Ok(m)
}

fn analyze(
    entries: &[MemberEntry],
    cluster: &ClusterConfig,
    resident: bool,
) -> Result<(GroupReport, Vec<TimingMember>)> {
    let profile = ProfileModel::builtin();
    let limits = GroupLimits { rollout_dram: cluster.rollout.host_dram(), train_dram: cluster.training.host_dram() };
    let mut dispatcher = Dispatcher::new(limits);
    let mut members = Vec::new();
    let mut rows = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let (job, times, nodes) = job_of(i, e, &profile)?;
        // The residency check is the dispatcher's own: a join it refuses is refused here.
        dispatcher
            .handle(Micros::ZERO, Input::Join(member_spec(&job, nodes.clone(), cluster, resident, None)))
            .with_context(|| format!("member {} cannot join", i + 1))?;
        members.push(with_measured_costs(i, e, timing_member(&job, times, nodes.clone(), cluster, resident))?);
        rows.push(MemberRow {
            job: job.id,
            job_type: job.job_type.to_string(),
            nodes,
            rollout_s: times.rollout.as_secs_f64(),
            train_s: times.train.as_secs_f64(),
        });
    }
    let report = GroupReport {
        timing: timing::evaluate(&members),
        members: rows,
        memory: dispatcher.memory().usage(),
        resident,
    };
    Ok((report, members))
}
