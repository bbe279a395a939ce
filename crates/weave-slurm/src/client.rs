//! Slurm's commands, run as processes: `sinfo` and `squeue` read, `sbatch` launches a job
//! pinned to the nodes Weave chose, `scancel` stops one. A command that fails is an error
//! carrying Slurm's own message (what the job's failure then says).

use crate::status::{parse_sinfo, parse_squeue, SlurmJob, SlurmNode, StatusError, SINFO_FORMAT, SQUEUE_FORMAT};
use std::path::Path;
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("`{program}` failed ({status}): {message}")]
    Failed { program: String, status: String, message: String },
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error("`{program}` printed {output:?}, not what was expected")]
    BadOutput { program: String, output: String },
    #[error("Slurm has no {0} node named as Weave names them (r0.. for rollout, t0.. for training)")]
    EmptyPool(weave_core::Pool),
}

/// A job to launch: its name (how Weave recognises it later), the nodes it is pinned to, the
/// environment it gets, the shell command it runs on the first node, and where its output goes.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    pub name: &'a str,
    pub nodes: &'a [String],
    pub env: &'a [(String, String)],
    pub command: &'a str,
    pub output: Option<&'a Path>,
}

/// Runs Slurm's client commands, each behind `prefix` (empty on a Slurm host; on
/// `scripts/slurm-local.sh`'s cluster, its `exec`).
#[derive(Clone, Debug, Default)]
pub struct SlurmClient {
    prefix: Vec<String>,
    partition: Option<String>,
}

/// `sbatch`'s arguments for `launch`: exactly its nodes (`--nodelist` and as many `--nodes`),
/// the submitter's environment plus the launch's (`--export=ALL`; the launch's variables are
/// set on the `sbatch` process, so values may hold commas), `--parsable` for the job id.
pub fn sbatch_args(launch: &Launch, partition: Option<&str>) -> Vec<String> {
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", launch.name),
        format!("--nodelist={}", launch.nodes.join(",")),
        format!("--nodes={}", launch.nodes.len()),
        "--export=ALL".to_string(),
    ];
    if let Some(p) = partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(out) = launch.output {
        args.push(format!("--output={}", out.display()));
    }
    args.push(format!("--wrap={}", launch.command));
    args
}

impl SlurmClient {
    pub fn new(prefix: Vec<String>) -> SlurmClient {
        SlurmClient { prefix, partition: None }
    }

    pub fn with_partition(mut self, partition: impl Into<String>) -> SlurmClient {
        self.partition = Some(partition.into());
        self
    }

    fn run(&self, program: &str, args: &[String], env: &[(String, String)]) -> Result<String, SlurmError> {
        let (head, rest) = match self.prefix.split_first() {
            Some((head, rest)) => (head.as_str(), rest.iter().map(String::as_str).chain([program]).collect()),
            None => (program, Vec::new()),
        };
        let out = Command::new(head)
            .args(rest)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .map_err(|source| SlurmError::Spawn { program: program.to_string(), source })?;
        if !out.status.success() {
            let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(SlurmError::Failed { program: program.to_string(), status: out.status.to_string(), message });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every node Slurm knows, with its state.
    pub fn nodes(&self) -> Result<Vec<SlurmNode>, SlurmError> {
        let out = self.run("sinfo", &["-h".into(), "-N".into(), format!("--format={SINFO_FORMAT}")], &[])?;
        Ok(parse_sinfo(&out)?)
    }

    /// Every job Slurm still lists (pending, running, and those ended within `MinJobAge`).
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let out =
            self.run("squeue", &["-h".into(), "--states=all".into(), format!("--format={SQUEUE_FORMAT}")], &[])?;
        Ok(parse_squeue(&out)?)
    }

    /// Submits `launch`; its Slurm job id.
    pub fn submit(&self, launch: &Launch) -> Result<u64, SlurmError> {
        let out = self.run("sbatch", &sbatch_args(launch, self.partition.as_deref()), launch.env)?;
        let id = out.trim().split(';').next().unwrap_or_default();
        id.parse().map_err(|_| SlurmError::BadOutput { program: "sbatch".into(), output: out.clone() })
    }

    /// Cancels every job named `name` (none is not an error).
    pub fn cancel(&self, name: &str) -> Result<(), SlurmError> {
        self.run("scancel", &[format!("--name={name}")], &[]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_is_pinned_to_exactly_its_nodes() {
        let nodes = ["r0".to_string(), "t0".to_string()];
        let launch = Launch {
            name: "weave-i-a-0",
            nodes: &nodes,
            env: &[],
            command: "python -m job --x 1,2",
            output: Some(Path::new("/tmp/a.out")),
        };
        assert_eq!(
            sbatch_args(&launch, Some("weave")),
            [
                "--parsable",
                "--job-name=weave-i-a-0",
                "--nodelist=r0,t0",
                "--nodes=2",
                "--export=ALL",
                "--partition=weave",
                "--output=/tmp/a.out",
                "--wrap=python -m job --x 1,2"
            ]
        );
    }

    #[test]
    fn a_missing_command_is_an_error_naming_it() {
        let c = SlurmClient::new(vec!["/nonexistent/weave-no-such-prefix".into()]);
        let e = c.nodes().unwrap_err();
        assert!(matches!(&e, SlurmError::Spawn { program, .. } if program == "sinfo"), "{e}");
    }
}
