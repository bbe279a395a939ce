//! The authors' event formats: one event per line, arrivals (`1`) and departures (`-1`).
//!
//! Events must be in non-decreasing time order: the authors' replay processes them in file
//! order, so a line that goes back in time means the file is damaged, and we reject it
//! (naming both lines) rather than guess.

use crate::{datetime, err, Trace, TraceError};
use std::collections::BTreeMap;
use weave_core::{JobId, JobSpec, JobType, Lifetime, Micros, PhaseTimes, Slo};
use weave_model::{Deployment, ProfileModel, REFERENCE_BATCH};

struct Open {
    line: usize,
    arrival_s: i64,
    job_type: JobType,
    slo: Option<Slo>,
    phase_times: Option<PhaseTimes>,
}

/// Shared state of one pass over an event file.
struct Events<'a> {
    source: &'a str,
    epoch: Option<i64>,
    last: Option<(usize, i64)>,
    open: BTreeMap<String, Open>,
    done: Vec<(usize, JobSpec)>,
    /// Ids that already left, with their departure line.
    left: BTreeMap<String, usize>,
}

impl<'a> Events<'a> {
    fn new(source: &'a str) -> Self {
        Events { source, epoch: None, last: None, open: BTreeMap::new(), done: Vec::new(), left: BTreeMap::new() }
    }

    fn time(&mut self, line: usize, field: &str) -> Result<i64, TraceError> {
        let t = datetime::parse(field).ok_or_else(|| {
            err(self.source, line, Some("time"), format!("expected YYYY-MM-DD HH:MM:SS, got `{field}`"))
        })?;
        if let Some((prev_line, prev)) = self.last {
            if t < prev {
                let msg = format!(
                    "time goes backwards: {} is before {} on line {prev_line}",
                    datetime::format(t),
                    datetime::format(prev)
                );
                return Err(err(self.source, line, Some("time"), msg));
            }
        }
        self.last = Some((line, t));
        self.epoch.get_or_insert(t);
        Ok(t)
    }

    fn arrive(&mut self, line: usize, id: &str, open: Open) -> Result<(), TraceError> {
        if let Some(prev) = self.open.get(id) {
            return Err(err(
                self.source,
                line,
                Some("id"),
                format!("duplicate arrival of `{id}` (already arrived on line {})", prev.line),
            ));
        }
        if let Some(prev_line) = self.left.get(id) {
            return Err(err(
                self.source,
                line,
                Some("id"),
                format!("duplicate job id `{id}` (it left on line {prev_line})"),
            ));
        }
        self.open.insert(id.to_string(), open);
        Ok(())
    }

    fn depart(&mut self, line: usize, id: &str, t: i64, job_type: Option<JobType>) -> Result<(), TraceError> {
        let open = self
            .open
            .remove(id)
            .ok_or_else(|| err(self.source, line, Some("event"), format!("`{id}` departs but never arrived")))?;
        if let Some(ty) = job_type.filter(|t| *t != open.job_type) {
            return Err(err(
                self.source,
                line,
                Some("type"),
                format!("`{id}` left as {ty} but arrived as {} on line {}", open.job_type, open.line),
            ));
        }
        if t <= open.arrival_s {
            return Err(err(
                self.source,
                line,
                Some("time"),
                format!("`{id}` departs at the instant it arrived (line {})", open.line),
            ));
        }
        let epoch = self.epoch.unwrap_or(0);
        let spec = JobSpec {
            arrival: Micros::from_secs((open.arrival_s - epoch) as u64),
            slo: open.slo,
            lifetime: Lifetime::SoloUntil(Micros::from_secs((t - epoch) as u64)),
            phase_times: open.phase_times,
            ..JobSpec::new(JobId(0), id.to_string(), open.job_type, REFERENCE_BATCH)
        };
        self.left.insert(id.to_string(), line);
        self.done.push((open.line, spec));
        Ok(())
    }

    fn finish(self) -> Result<Trace, TraceError> {
        if let Some((id, open)) = self.open.iter().next() {
            return Err(err(self.source, open.line, Some("event"), format!("`{id}` arrives but never departs")));
        }
        // Order by arrival line so jobs arriving at the same second keep file order.
        let mut done = self.done;
        done.sort_by_key(|(line, _)| *line);
        let jobs = done.into_iter().map(|(_, j)| j).collect();
        Ok(Trace::from_jobs(self.source, jobs, self.epoch))
    }
}

fn fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

fn event(source: &str, line: usize, f: &str) -> Result<bool, TraceError> {
    match f {
        "1" => Ok(true),
        "-1" => Ok(false),
        other => {
            Err(err(source, line, Some("event"), format!("expected 1 (arrival) or -1 (departure), got `{other}`")))
        }
    }
}

fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// `job<ID>, <YYYY-MM-DD HH:MM:SS>, <1|-1>, <model>_<max length>`. Job types must be in the
/// measured profile table: the authors' replay has no other source of durations.
pub(crate) fn parse_wild(text: &str, source: &str) -> Result<Trace, TraceError> {
    let profile = ProfileModel::builtin();
    let mut ev = Events::new(source);
    for (line, l) in lines(text) {
        let f = fields(l);
        if f.len() != 4 {
            return Err(err(
                source,
                line,
                None,
                format!("expected 4 comma-separated fields (id, time, event, type), got {}", f.len()),
            ));
        }
        if f[0].is_empty() {
            return Err(err(source, line, Some("id"), "empty job id"));
        }
        let t = ev.time(line, f[1])?;
        let arrival = event(source, line, f[2])?;
        let ty: JobType =
            f[3].parse().map_err(|e: weave_core::JobSpecError| err(source, line, Some("type"), e.to_string()))?;
        if profile.measured(Deployment::Disagg, ty).is_none() {
            let known: Vec<String> = profile.measured_types(Deployment::Disagg).map(|(t, _)| t.to_string()).collect();
            return Err(err(
                source,
                line,
                Some("type"),
                format!("unknown job type `{ty}` (known: {})", known.join(", ")),
            ));
        }
        if arrival {
            ev.arrive(line, f[0], Open { line, arrival_s: t, job_type: ty, slo: None, phase_times: None })?;
        } else {
            ev.depart(line, f[0], t, Some(ty))?;
        }
    }
    ev.finish()
}

/// `<id>, <YYYY-MM-DD HH:MM:SS>, <1|-1>` with, on arrival lines of "parsed" variants,
/// `<T_roll s>, <T_train s>, <SLO>`. Jobs get `opts.philly_default_type` for their memory and
/// switch model; their durations come from the trace when it gives them.
pub(crate) fn parse_philly(text: &str, source: &str, opts: &crate::ReadOptions) -> Result<Trace, TraceError> {
    let mut ev = Events::new(source);
    for (line, l) in lines(text) {
        let f = fields(l);
        if f.len() != 3 && f.len() != 6 {
            return Err(err(
                source,
                line,
                None,
                format!("expected 3 fields (id, time, event) or 6 (plus T_roll, T_train, SLO), got {}", f.len()),
            ));
        }
        if f[0].is_empty() {
            return Err(err(source, line, Some("id"), "empty job id"));
        }
        let t = ev.time(line, f[1])?;
        let arrival = event(source, line, f[2])?;
        if !arrival {
            if f.len() == 6 {
                return Err(err(source, line, None, "departure lines carry 3 fields"));
            }
            ev.depart(line, f[0], t, None)?;
            continue;
        }
        let (slo, phase_times) = if f.len() == 6 {
            let secs = |i: usize, name: &str| -> Result<Micros, TraceError> {
                let v: f64 = f[i]
                    .parse()
                    .map_err(|_| err(source, line, Some(name), format!("expected seconds, got `{}`", f[i])))?;
                if v.is_finite() && v > 0.0 && v < 1e9 {
                    Ok(Micros::from_secs_f64(v))
                } else {
                    Err(err(source, line, Some(name), format!("expected positive seconds, got `{}`", f[i])))
                }
            };
            let times = PhaseTimes { rollout: secs(3, "T_roll")?, train: secs(4, "T_train")? };
            let slo_v: f64 = f[5]
                .parse()
                .map_err(|_| err(source, line, Some("SLO"), format!("expected a number, got `{}`", f[5])))?;
            let slo = Slo::new(slo_v).map_err(|e| err(source, line, Some("SLO"), e.to_string()))?;
            (Some(slo), Some(times))
        } else {
            (None, None)
        };
        ev.arrive(line, f[0], Open { line, arrival_s: t, job_type: opts.philly_default_type, slo, phase_times })?;
    }
    ev.finish()
}
