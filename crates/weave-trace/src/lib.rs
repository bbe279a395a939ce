//! Job traces: one internal representation ([`Trace`]) and readers for every supported
//! format, plus a seeded generator of synthetic workloads.
//!
//! Readers parse text they are given (the caller does the file I/O), report errors as
//! `source:line: field: message`, and never panic on any input.

pub mod agentic_classes;
mod authors;
mod datetime;
mod draws;
pub mod fields;
pub mod generate;
mod jsonl;
mod lora_mix;
mod summary;

pub use agentic_classes::AgenticClass;
pub use fields::{JobFields, NoUnknownFields};
pub use generate::{Arrivals, GenConfig, GenMode, ProfileClass, SizeClass, TenantMix};
pub use jsonl::{write_jsonl, JsonlJob};
pub use summary::{Summary, TypeCount};

use std::fmt;
use thiserror::Error;
use weave_core::{JobSpec, JobType};

/// A workload: jobs sorted by arrival time (ties keep file order), with dense ids `0..n` in
/// that order.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Where the trace came from (file name or generator description), for messages.
    pub source: String,
    pub jobs: Vec<JobSpec>,
    /// Wall-clock time (seconds since 1970, UTC) of time zero, when the format carries dates.
    pub epoch_start_s: Option<i64>,
}

/// A reader error naming the file, the line (1-based; 0 = the whole file) and the field.
#[derive(Clone, Debug, Error, PartialEq)]
pub struct TraceError {
    /// The file (or other input) the error is in.
    pub file: String,
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// The trace formats Weave reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Weave's own: JSON Lines, one job per line (see the README).
    Jsonl,
    /// The authors' production trace (`wild.trace`): `job<ID>, <date time>, <1|-1>, <type>`.
    Wild,
    /// The authors' Philly-derived traces: `<id>, <date time>, <1|-1>` and, in "parsed"
    /// variants, `<T_roll s>, <T_train s>, <SLO>` on arrival lines.
    Philly,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonl" | "weave" => Ok(Format::Jsonl),
            "wild" | "rollmux" => Ok(Format::Wild),
            "philly" => Ok(Format::Philly),
            other => Err(format!("unknown trace format `{other}` (expected jsonl, wild or philly)")),
        }
    }
}

/// Options that formats without full job descriptions need.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Job type given to Philly-derived jobs, which carry no model or length.
    pub philly_default_type: JobType,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { philly_default_type: JobType::new(7, 8) }
    }
}

/// Guesses the format from the first non-blank line.
pub fn detect_format(text: &str) -> Format {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'));
    match first {
        Some(l) if l.starts_with('{') => Format::Jsonl,
        Some(l) if l.split(',').count() == 4 => Format::Wild,
        Some(_) => Format::Philly,
        None => Format::Jsonl,
    }
}

/// Parses `text` in `format`; `source` names it in errors.
pub fn parse(text: &str, format: Format, source: &str, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let trace = match format {
        Format::Jsonl => jsonl::parse(text, source)?,
        Format::Wild => authors::parse_wild(text, source)?,
        Format::Philly => authors::parse_philly(text, source, opts)?,
    };
    if trace.jobs.is_empty() {
        return Err(TraceError {
            file: source.into(),
            line: 0,
            field: None,
            message: "the trace holds no jobs".into(),
        });
    }
    Ok(trace)
}

impl Trace {
    /// Builds a trace from jobs in any order: sorts by arrival (stable) and renumbers ids.
    pub fn from_jobs(source: impl Into<String>, mut jobs: Vec<JobSpec>, epoch_start_s: Option<i64>) -> Trace {
        jobs.sort_by_key(|j| j.arrival);
        for (i, j) in jobs.iter_mut().enumerate() {
            j.id = weave_core::JobId(i as u32);
        }
        Trace { source: source.into(), jobs, epoch_start_s }
    }
}

pub(crate) fn err(source: &str, line: usize, field: Option<&str>, message: impl Into<String>) -> TraceError {
    TraceError { file: source.into(), line, field: field.map(str::to_string), message: message.into() }
}
