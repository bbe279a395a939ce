//! Job numbers and the names they stand for. Every admission gets the next number (the
//! placer, dispatchers and events know a job by it); only the numbers that still name
//! something are held, so a server that has admitted millions of jobs holds the names of the
//! few it still runs, queues or retains, not one per admission ever made.

use imbl::OrdMap;
use weave_core::JobId;

#[derive(Clone, Default)]
pub(super) struct JobNames {
    live: OrdMap<u32, String>,
    next: u32,
}

impl JobNames {
    /// What [`JobNames::push`] will give the next admission.
    pub(super) fn next_id(&self) -> JobId {
        JobId(self.next)
    }

    pub(super) fn push(&mut self, name: String) -> JobId {
        let id = JobId(self.next);
        self.live.insert(id.0, name);
        self.next += 1;
        id
    }

    /// The name `id` stands for, unless the admission was let go.
    pub(super) fn get(&self, id: JobId) -> Option<&String> {
        self.live.get(&id.0)
    }

    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// The admission numbered `id` no longer names anything placed.
    pub(super) fn forget(&mut self, id: JobId) {
        self.live.remove(&id.0);
    }

    /// Held names, by number, and the next number (a snapshot's form).
    pub(super) fn parts(&self) -> (Vec<(u32, &String)>, u32) {
        (self.live.iter().map(|(id, name)| (*id, name)).collect(), self.next)
    }

    pub(super) fn from_parts(live: Vec<(u32, String)>, next: u32) -> JobNames {
        JobNames { live: live.into_iter().collect(), next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_counting_after_names_are_let_go() {
        let mut names = JobNames::default();
        let a = names.push("a".into());
        let b = names.push("b".into());
        names.forget(a);
        assert_eq!(names.get(a), None);
        assert_eq!(names.get(b).map(String::as_str), Some("b"));
        assert_eq!(names.next_id(), JobId(2), "a number is never given twice");
        assert_eq!(names.push("c".into()), JobId(2));
    }
}
