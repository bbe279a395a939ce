//! The queue pass over a scripted driver: who may start, who may preempt, and for what.

mod common;
use common::{config, job, one_tenant_policy};
use weave_core::{JobId, Micros, Priority};
use weave_place::queue::{start_one, Blocked, QueueDriver};
use weave_place::share::{Claim, ShareMode, SharePolicy, Usage, Waiting};
use weave_place::{PlacePolicy, Placer};

/// A queue whose jobs start only if listed in `fits`; preemption succeeds for jobs listed in
/// `preemptible` (then they fit). The pools are full of a job that never ends, so backfill
/// lets nothing through.
struct Script {
    placer: Placer,
    policy: SharePolicy,
    waiting: Vec<Waiting>,
    fits: Vec<usize>,
    preemptible: Vec<usize>,
    started: Vec<usize>,
    preempted_for: Vec<(usize, Claim)>,
    blocked: Vec<(usize, Blocked)>,
}

impl Script {
    fn new(mode: ShareMode, priorities: &[Priority]) -> Self {
        let policy = one_tenant_policy(mode, 10.0);
        let waiting = priorities
            .iter()
            .enumerate()
            .map(|(k, &priority)| Waiting {
                tenant: 0,
                priority,
                arrival: k as u64,
                demand: [1.0, 1.0],
                env_cores: 0.0,
                resumes: false,
            })
            .collect();
        let mut cfg = config(PlacePolicy::Weave);
        cfg.capacity = Some((1, 1));
        let mut placer = Placer::new(cfg);
        placer.admit(job(0, 100, 100, 1.0)).expect("an empty pool");
        Script {
            placer,
            policy,
            waiting,
            fits: Vec::new(),
            preemptible: Vec::new(),
            started: Vec::new(),
            preempted_for: Vec::new(),
            blocked: Vec::new(),
        }
    }

    fn index(&self, w: Waiting) -> usize {
        w.arrival as usize
    }
}

impl QueueDriver for Script {
    fn policy(&self) -> &SharePolicy {
        &self.policy
    }
    fn usage(&self) -> Usage {
        Usage::unshared(vec![[0.0; 2]])
    }
    fn waiting(&self) -> Vec<Waiting> {
        self.waiting.clone()
    }
    fn order(&self, waiting: &[Waiting], usage: &Usage) -> Vec<usize> {
        // Arrival order, whatever the priorities: the queue's order is the policy's business,
        // tested in `share`; here a high job sits behind a normal head.
        let _ = usage;
        (0..waiting.len()).collect()
    }
    fn try_start(&mut self, k: usize) -> bool {
        let ok = self.fits.contains(&k);
        if ok {
            self.started.push(k);
        }
        ok
    }
    fn preempt_for(&mut self, w: Waiting, _usage: &Usage, claim: Claim) -> bool {
        let k = self.index(w);
        self.preempted_for.push((k, claim));
        if self.preemptible.contains(&k) {
            self.fits.push(k);
            return true;
        }
        false
    }
    fn placer(&self) -> &Placer {
        &self.placer
    }
    fn now(&self) -> Micros {
        Micros::ZERO
    }
    fn running_end(&self, _job: JobId) -> Option<Micros> {
        None
    }
    fn duration(&self, _k: usize) -> Option<Micros> {
        None
    }
    fn blocked(&mut self, k: usize, why: Blocked) {
        self.blocked.push((k, why));
    }
}

#[test]
fn only_a_job_that_outranks_the_blocked_head_preempts_behind_it() {
    use Priority::*;
    for mode in [ShareMode::Preemption, ShareMode::Backfill] {
        let mut q = Script::new(mode, &[Normal, Normal, High, Low]);
        q.preemptible = vec![2];
        assert!(start_one(&mut q), "{mode:?}");
        // The head tried with the free nodes too; the normal job behind it never tried; the
        // high one claimed only what its victims free, and started.
        assert_eq!(q.preempted_for, [(0, Claim::Head), (2, Claim::BehindHead)], "{mode:?}");
        assert_eq!(q.started, [2]);
        let behind = if mode == ShareMode::Backfill { Blocked::WouldDelayHead } else { Blocked::BehindHead };
        assert_eq!(q.blocked, [(0, Blocked::NoRoom), (1, behind)]);
    }
}

#[test]
fn without_preemption_the_head_holds_up_everyone() {
    use Priority::*;
    let mut q = Script::new(ShareMode::Quotas, &[Normal, High]);
    q.preemptible = vec![1];
    assert!(!start_one(&mut q));
    assert!(q.preempted_for.is_empty() && q.started.is_empty());
    assert_eq!(q.blocked, [(0, Blocked::NoRoom), (1, Blocked::BehindHead)]);
    // A job that fits starts ahead of nothing: the first that fits in order.
    let mut q = Script::new(ShareMode::Quotas, &[Normal, High]);
    q.fits = vec![0, 1];
    assert!(start_one(&mut q));
    assert_eq!(q.started, [0]);
}
