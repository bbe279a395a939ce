//! What Weave's command-line tools (the `weave` binary and `weave bench`) read and print:
//! traces and cluster configs, with the file in every error; policy lists; tables and JSON;
//! output to a file or standard output. A tool crate: its errors are `anyhow`'s, as the
//! binary's are.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use weave_core::ClusterConfig;
use weave_model::ProfileModel;
use weave_trace::{generate, Format, GenConfig, ReadOptions, Trace};

/// Trace selection shared by every command that reads one.
#[derive(clap::Args, Clone, Debug)]
pub struct TraceArgs {
    /// Trace file (Weave JSON Lines, the authors' wild.trace format, or Philly-derived).
    /// Without it, the built-in default workload is used.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "jsonl|wild|philly")]
    pub format: Option<Format>,
    /// Job type assumed for Philly-derived traces, which carry none.
    #[arg(long, value_name = "TYPE", default_value = "7B_8k")]
    pub philly_type: weave_core::JobType,
}

impl TraceArgs {
    pub fn load(&self, profile: &ProfileModel) -> Result<Trace> {
        match &self.trace {
            Some(path) => read_trace(path, self.format, &ReadOptions { philly_default_type: self.philly_type }),
            None => Ok(generate::generate(&GenConfig::default_workload(), profile)),
        }
    }
}

/// Prototype mode and the waterfall reproduce the research code, which runs on-policy jobs
/// only: a trace with bounded-staleness jobs is refused there rather than replayed as if
/// they were synchronous (the faithful replay runs them).
pub fn on_policy_only(trace: &Trace, what: &str) -> Result<()> {
    if let Some(j) = trace.jobs.iter().find(|j| j.staleness > 0) {
        anyhow::bail!(
            "{}: job `{}` has `staleness` {}: {what} reproduces the research prototype, which runs \
             on-policy jobs only (the faithful replay, `--model faithful`, runs it)",
            trace.source,
            j.name,
            j.staleness
        );
    }
    Ok(())
}

/// Refuses a trace with an agentic job the cluster's environment pool cannot host, naming the
/// job and the field.
pub fn check_environment(trace: &Trace, cluster: &ClusterConfig) -> Result<()> {
    for j in &trace.jobs {
        if let Some(a) = &j.agentic {
            if let Err((field, reason)) = a.check_fits(cluster.env.as_ref()) {
                let hint =
                    if cluster.env.is_none() { " (give `--env-nodes N`, or `[env]` in the cluster file)" } else { "" };
                anyhow::bail!("{}: job `{}`: `{field}`: {reason}{hint}", trace.source, j.name);
            }
        }
    }
    Ok(())
}

pub fn read_trace(path: &Path, format: Option<Format>, opts: &ReadOptions) -> Result<Trace> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read trace {}", path.display()))?;
    let text = utf8(&bytes).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))?;
    let format = format.unwrap_or_else(|| weave_trace::detect_format(text));
    let trace = weave_trace::parse(text, format, &path.display().to_string(), opts)?;
    within_replay_bound(&trace, path)?;
    Ok(trace)
}

/// The text, or where it stops being UTF-8: `LINE: byte N of the line (offset M): ...`.
fn utf8(bytes: &[u8]) -> std::result::Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line_start = bytes[..at].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
        format!("{line}: not UTF-8 at byte {} of the line (offset {at} of the file)", at - line_start + 1)
    })
}

/// Iterations a replayed job may run: a bound against traces that would replay for hours with
/// no end in sight (the wild trace's longest job runs ~11,000).
pub const MAX_REPLAY_ITERATIONS: u64 = 10_000_000;

fn within_replay_bound(trace: &Trace, path: &Path) -> Result<()> {
    for j in &trace.jobs {
        if let weave_core::Lifetime::Iterations(n) = j.lifetime {
            if n > MAX_REPLAY_ITERATIONS {
                anyhow::bail!(
                    "{}: job `{}`: `iterations` {n} is more than a replay runs ({MAX_REPLAY_ITERATIONS} per job)",
                    path.display(),
                    j.name
                );
            }
        }
    }
    Ok(())
}

/// The cluster from `--cluster FILE`, or the built-in testbed.
pub fn load_cluster(path: Option<&Path>) -> Result<ClusterConfig> {
    match path {
        None => Ok(ClusterConfig::default()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("cannot read cluster config {}", p.display()))?;
            let mut cfg =
                ClusterConfig::from_toml(&text).with_context(|| format!("invalid cluster config {}", p.display()))?;
            read_preemption_trace(&mut cfg, p)?;
            Ok(cfg)
        }
    }
}

/// Reads the preemption trace a spot tier names, relative to the cluster file's directory.
fn read_preemption_trace(cfg: &mut ClusterConfig, config: &Path) -> Result<()> {
    let nodes = cfg.rollout.nodes;
    let Some(spot) = cfg.rollout_spot.as_mut() else { return Ok(()) };
    let Some(name) = spot.preemption_trace.as_deref() else { return Ok(()) };
    let path = config.parent().unwrap_or(Path::new(".")).join(name);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read the preemption trace {} (`rollout_spot.preemption_trace` in {})",
            path.display(),
            config.display()
        )
    })?;
    spot.trace = weave_core::parse_preemption_trace(&text, nodes)
        .with_context(|| format!("invalid preemption trace {}", path.display()))?;
    Ok(())
}

/// Writes `text` to `path`, or to stdout when `path` is `None` or `-`.
pub fn write_output(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) if p != Path::new("-") => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))
        }
        _ => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            // A closed pipe (`weave ... | head`) is not an error worth reporting.
            match out.write_all(text.as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("cannot write to stdout"),
            }
        }
    }
}

pub fn json<T: serde::Serialize>(value: &T) -> Result<String> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    Ok(s)
}
