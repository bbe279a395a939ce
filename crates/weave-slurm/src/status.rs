//! Slurm's node and job states as its commands print them, parsed. Pure: the lines come from
//! `sinfo` and `squeue` run with the formats below ([`SINFO_FORMAT`], [`SQUEUE_FORMAT`]).

/// `sinfo -h -N -o` format: node name, state (long form), reason.
pub const SINFO_FORMAT: &str = "%N|%T|%E";
/// `squeue -h -o` format: job id, name, state (long form), reason, nodes.
pub const SQUEUE_FORMAT: &str = "%i|%j|%T|%r|%N";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line} of `{command}`'s output ({text:?}): {why}")]
pub struct StatusError {
    pub command: &'static str,
    pub line: usize,
    pub text: String,
    pub why: &'static str,
}

/// A node's state, as far as Weave cares: in service, out of service by an operator (or by
/// Weave), or gone. The flags Slurm appends (`*`: not responding, `~`: powered off, `#`:
/// powering up, `!`/`%`: powering down, `$`: maintenance, `@`: reboot) are read: a node down
/// and not responding is gone; one not responding that Slurm has not set down is only
/// [`NodeState::Unresponsive`], as is one in state `unknown` (after a controller restart every
/// node is, until its slurmd registers again; Slurm sets a node that stays silent down after
/// `SlurmdTimeout`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Idle, allocated, mixed, completing: it runs (or can run) jobs.
    Up,
    /// Drained or draining: an operator (or Weave) is taking it out; its jobs still run while
    /// it drains (Weave reads this as a preemption notice).
    Draining,
    /// Drained (no job left) or set down by an operator.
    Down,
    /// Down and not responding, or failed: its processes are gone.
    Lost,
    /// Not responding, but not (yet) set down by Slurm: it keeps its jobs.
    Unresponsive,
    /// A state this backend does not know, kept as printed.
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub state: NodeState,
    /// Why an operator or Slurm took it out (empty when in service).
    pub reason: String,
}

/// A job's state, as far as Weave cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    /// Completed, cancelled, failed, timed out, node failure, out of memory...: it is over,
    /// with Slurm's word for how.
    Ended(String),
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmJob {
    pub id: u64,
    pub name: String,
    pub state: JobState,
    /// Slurm's reason (why pending, or how it ended), `None` printed as empty.
    pub reason: String,
    pub nodes: String,
}

impl NodeState {
    pub fn parse(printed: &str) -> NodeState {
        let lower = printed.trim().to_ascii_lowercase();
        let base = lower.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
        if lower.contains('*') {
            return match base {
                "down" | "drained" | "drain" | "fail" | "failing" => NodeState::Lost,
                _ => NodeState::Unresponsive,
            };
        }
        match base {
            "idle" | "allocated" | "alloc" | "mixed" | "mix" | "completing" | "comp" | "planned" => NodeState::Up,
            "draining" | "drng" => NodeState::Draining,
            "drained" | "drain" | "down" => NodeState::Down,
            "fail" | "failing" => NodeState::Lost,
            // Not registered since the controller (re)started: Slurm will say what it is.
            "unknown" | "unk" | "no_respond" => NodeState::Unresponsive,
            _ => NodeState::Other(printed.trim().to_string()),
        }
    }
}

impl JobState {
    pub fn parse(printed: &str) -> JobState {
        match printed.trim() {
            "PENDING" | "REQUEUED" | "CONFIGURING" | "RESIZING" | "SUSPENDED" => JobState::Pending,
            "RUNNING" | "COMPLETING" => JobState::Running,
            s @ ("COMPLETED" | "CANCELLED" | "FAILED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" | "PREEMPTED"
            | "BOOT_FAIL" | "DEADLINE") => JobState::Ended(s.to_string()),
            other => JobState::Other(other.to_string()),
        }
    }
}

fn fields<'a>(command: &'static str, line: usize, text: &'a str, n: usize) -> Result<Vec<&'a str>, StatusError> {
    let parts: Vec<&str> = text.split('|').collect();
    if parts.len() == n {
        Ok(parts)
    } else {
        Err(StatusError { command, line, text: text.to_string(), why: "expected the format's fields, separated by |" })
    }
}

/// Nodes from `sinfo -h -N -o '%N|%T|%E'` (a node in several partitions is listed once).
pub fn parse_sinfo(out: &str) -> Result<Vec<SlurmNode>, StatusError> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for (i, text) in out.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f = fields("sinfo", i + 1, text, 3)?;
        let reason = if f[2].trim() == "none" { String::new() } else { f[2].trim().to_string() };
        let node = SlurmNode { name: f[0].trim().to_string(), state: NodeState::parse(f[1]), reason };
        if node.name.is_empty() {
            return Err(StatusError { command: "sinfo", line: i + 1, text: text.to_string(), why: "no node name" });
        }
        if !nodes.iter().any(|n| n.name == node.name) {
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// Jobs from `squeue -h -o '%i|%j|%T|%r|%N'`.
pub fn parse_squeue(out: &str) -> Result<Vec<SlurmJob>, StatusError> {
    let mut jobs = Vec::new();
    for (i, text) in out.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f = fields("squeue", i + 1, text, 5)?;
        let Ok(id) = f[0].trim().parse() else {
            return Err(StatusError { command: "squeue", line: i + 1, text: text.to_string(), why: "not a job id" });
        };
        let reason = if f[3].trim() == "None" { String::new() } else { f[3].trim().to_string() };
        jobs.push(SlurmJob {
            id,
            name: f[1].trim().to_string(),
            state: JobState::parse(f[2]),
            reason,
            nodes: f[4].trim().to_string(),
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Slurm 22.05 printed them on `scripts/slurm-local.sh`'s cluster.
    #[test]
    fn nodes_in_service_drained_and_lost_are_told_apart() {
        let out =
            "r0|idle|none\nr1|down|weave-selftest\nt0|mixed|none\nr2|idle*|none\nr3|draining|notice\nr0|idle|none\n";
        let nodes = parse_sinfo(out).unwrap();
        let states: Vec<(&str, &NodeState)> = nodes.iter().map(|n| (n.name.as_str(), &n.state)).collect();
        assert_eq!(
            states,
            [
                ("r0", &NodeState::Up),
                ("r1", &NodeState::Down),
                ("t0", &NodeState::Up),
                ("r2", &NodeState::Unresponsive),
                ("r3", &NodeState::Draining)
            ]
        );
        assert_eq!(nodes[1].reason, "weave-selftest");
        assert_eq!(nodes[0].reason, "");
        assert_eq!(NodeState::parse("down*"), NodeState::Lost);
        assert_eq!(NodeState::parse("mixed*"), NodeState::Unresponsive);
        assert_eq!(NodeState::parse("unknown"), NodeState::Unresponsive, "as every node just after a restart");
        assert_eq!(NodeState::parse("future"), NodeState::Other("future".into()));
    }

    #[test]
    fn jobs_pending_running_and_ended_are_read_with_their_reasons() {
        let out = "12|weave-i-a-0|RUNNING|None|r0,t0\n13|weave-i-b-1|PENDING|Resources|\n14|x|NODE_FAIL|NodeDown|r1\n";
        let jobs = parse_squeue(out).unwrap();
        assert_eq!(jobs[0].id, 12);
        assert_eq!(
            (jobs[0].state.clone(), jobs[0].reason.as_str(), jobs[0].nodes.as_str()),
            (JobState::Running, "", "r0,t0")
        );
        assert_eq!((jobs[1].state.clone(), jobs[1].reason.as_str()), (JobState::Pending, "Resources"));
        assert_eq!(jobs[2].state, JobState::Ended("NODE_FAIL".into()));
    }

    #[test]
    fn a_line_that_is_not_the_format_is_an_error_naming_the_command_and_line() {
        let e = parse_squeue("12|a|RUNNING|None|r0\nnot a job\n").unwrap_err();
        assert_eq!((e.command, e.line), ("squeue", 2));
        assert!(e.to_string().contains("line 2 of `squeue`"), "{e}");
        let e = parse_squeue("x|a|RUNNING|None|r0\n").unwrap_err();
        assert_eq!(e.why, "not a job id");
        let e = parse_sinfo("|idle|none\n").unwrap_err();
        assert_eq!(e.why, "no node name");
    }
}
