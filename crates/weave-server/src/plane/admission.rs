//! A submission admitted: placed, entered in the plane and joined to its group's dispatcher.

use super::job::{measured_variation, Measured};
use super::{ev, Gate, JobEntry, Plane, PlaneError, SubmitSpec};
use std::sync::Arc;
use weave_core::{Micros, PhaseTimes};
use weave_dispatch::{Dispatcher, GroupLimits, Input};
use weave_place::{PlaceError, Target};

impl Plane {
    /// Admits a submission; `carried` is a re-admitted job's measured estimate and the
    /// measurements behind it.
    pub(super) fn submit(
        &mut self,
        time_us: u64,
        tenant: &str,
        submit: &SubmitSpec,
        carried: Option<(PhaseTimes, Measured)>,
        target: Option<Target>,
    ) -> Result<(), PlaneError> {
        // A LoRA job joins (or opens) a pack; the pack itself is admitted below.
        if submit.job.lora.is_some() && !self.is_pack(&submit.id) {
            return self.admit_lora(time_us, tenant, submit);
        }
        let id = self.names.next_id();
        let spec = submit.to_spec(id, Micros(time_us))?;
        let slo = submit.allowed_slowdown();
        let mut place = self.place_job(&spec, slo, submit);
        let start = submit.server.resume_from.unwrap_or(0);
        let remaining = submit.job.iterations.map(|n| n.saturating_sub(start));
        let fresh = carried.is_none();
        let measured = match carried {
            Some((times, measured)) => {
                place.set_measured(times);
                place.variation = measured_variation(&measured, times, remaining, self.slo_z);
                measured
            }
            None => Measured::default(),
        };
        let estimate = place.times;
        // A new job may open a group that a job running alone moves into.
        let pairing = match (target, fresh) {
            (None, true) => self.pairing_on_arrival(time_us, &place),
            _ => None,
        };
        let target = target.or(pairing.as_ref().map(|_| Target::Isolated));
        // The dispatcher's member is the job as admission saw it (measured costs included).
        let seen = place.clone();
        let decision = match target {
            Some(t) => match Arc::make_mut(&mut self.placer).admit_to(place.clone(), t) {
                Ok(d) => Ok(d),
                Err(_) => Arc::make_mut(&mut self.placer).admit(place),
            },
            None => Arc::make_mut(&mut self.placer).admit(place),
        }
        .map_err(|e: PlaceError| PlaneError::Placement(e.to_string()))?;
        let member = seen.member(&decision, true, submit.job.iterations, start);
        let staleness = member.staleness;
        let group = decision.group;
        self.names.push(submit.id.clone());
        self.jobs.insert(
            submit.id.clone(),
            Arc::new(JobEntry {
                decision: Some(decision),
                measured,
                ..JobEntry::running(submit, tenant, (id, spec), time_us, Gate::new(staleness, start), estimate)
            }),
        );
        self.event(ev(time_us, &submit.id, "admitted", None, None, Some(group)));
        let limits = GroupLimits {
            rollout_dram: self.cluster.rollout.host_dram(),
            train_dram: self.cluster.training.host_dram(),
        };
        self.dispatchers.entry(group).or_insert_with(|| {
            let mut d = Dispatcher::new(limits);
            d.set_logging(false);
            Arc::new(d)
        });
        if submit.server.launch.is_some() {
            // A launched job starts its processes after admission (seconds to minutes): its
            // nodes serve the group meanwhile, and it joins the rotation when it first asks.
            self.job_mut(&submit.id).expect("just admitted").pending_join = Some(member);
        } else {
            self.drive(time_us, group, Input::Join(member));
        }
        if let Some((pair, movable)) = pairing {
            self.partner_joins(time_us, group, pair, &movable);
        }
        Ok(())
    }
}
