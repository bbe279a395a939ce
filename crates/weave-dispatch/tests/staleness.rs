//! Bounded staleness: under any completion order a member with staleness k never starts
//! rollout n before training n - k - 1 is synced, never trains n before rollout n finished,
//! runs one rollout and one training at a time, and finishes every iteration.

use proptest::prelude::*;
use std::collections::BTreeMap;
use weave_core::{Bytes, JobId, Micros};
use weave_dispatch::{Action, Dispatcher, GroupLimits, Input, MemberSpec, Phase, SwitchCosts, MAX_STALENESS};

#[derive(Clone, Debug)]
struct Member {
    nodes: Vec<u32>,
    staleness: u32,
}

fn members() -> impl Strategy<Value = Vec<Member>> {
    (2usize..=4, 1u32..=3).prop_flat_map(|(m, n)| {
        let member = (proptest::collection::btree_set(0..n, 1..=n as usize), 0u32..=2)
            .prop_map(|(nodes, staleness)| Member { nodes: nodes.into_iter().collect(), staleness });
        proptest::collection::vec(member, m)
    })
}

/// What the driver has seen of one member.
#[derive(Default)]
struct Seen {
    synced: u64,
    rolled: u64,
    /// Rollout / training started (switching or running) and not finished, by iteration.
    rolling: Option<u64>,
    training: Option<u64>,
    syncing: Option<u64>,
    completed: Option<u64>,
}

enum Pending {
    Switch(JobId, Phase, u64),
    Phase(JobId, Phase, u64),
    Sync(JobId, u64),
}

struct Observer {
    members: Vec<Member>,
    seen: BTreeMap<JobId, Seen>,
    pool: Option<JobId>,
    nodes: BTreeMap<u32, JobId>,
}

impl Observer {
    /// Checks an action against the staleness bound and exclusivity; returns what it awaits.
    fn apply(&mut self, a: &Action) -> Option<Pending> {
        match a {
            Action::BeginSwitch { job, phase, iteration, .. } => {
                self.start(*job, *phase, *iteration);
                Some(Pending::Switch(*job, *phase, *iteration))
            }
            Action::StartRollout { job, iteration, weights, .. } => {
                // The version the rollout is told to use is the newest synced one, and it
                // lags the iteration by at most the staleness (0 on-policy).
                let k = u64::from(self.members[job.0 as usize].staleness);
                assert_eq!(*weights, self.seen[job].synced, "weights version of rollout {iteration}");
                assert!(iteration - weights <= k, "rollout {iteration} on weights {weights}, staleness {k}");
                if self.seen[job].rolling != Some(*iteration) {
                    self.start(*job, Phase::Rollout, *iteration);
                }
                Some(Pending::Phase(*job, Phase::Rollout, *iteration))
            }
            Action::StartTraining { job, iteration } => {
                if self.seen[job].training != Some(*iteration) {
                    self.start(*job, Phase::Train, *iteration);
                }
                Some(Pending::Phase(*job, Phase::Train, *iteration))
            }
            Action::BeginSync { job, iteration, .. } => {
                let s = self.seen.get_mut(job).unwrap();
                assert_eq!(s.training, None, "sync while training");
                s.syncing = Some(*iteration);
                Some(Pending::Sync(*job, *iteration))
            }
            Action::Completed { job, iterations } => {
                self.seen.get_mut(job).unwrap().completed = Some(*iterations);
                None
            }
        }
    }

    fn start(&mut self, job: JobId, phase: Phase, n: u64) {
        let k = u64::from(self.members[job.0 as usize].staleness);
        let s = self.seen.get_mut(&job).unwrap();
        match phase {
            Phase::Rollout => {
                assert_eq!(s.rolling, None, "{job}: two rollouts at once");
                assert_eq!(n, s.rolled, "{job}: rollouts out of order");
                assert!(n <= s.synced + k, "{job}: rollout {n} with only {} versions synced (k = {k})", s.synced);
                s.rolling = Some(n);
                for &node in &self.members[job.0 as usize].nodes {
                    assert!(self.nodes.insert(node, job).is_none(), "node {node} held twice");
                }
            }
            Phase::Train => {
                assert!(s.training.is_none() && s.syncing.is_none(), "{job}: training lane busy");
                assert_eq!(n, s.synced, "{job}: trainings out of order");
                assert!(s.rolled > n, "{job}: training {n} before its rollout finished");
                s.training = Some(n);
                assert!(self.pool.replace(job).is_none(), "training pool held twice");
            }
        }
    }

    fn finished(&mut self, job: JobId, phase: Phase) {
        let s = self.seen.get_mut(&job).unwrap();
        match phase {
            Phase::Rollout => {
                s.rolling = None;
                s.rolled += 1;
                self.nodes.retain(|_, j| *j != job);
            }
            Phase::Train => {
                s.training = None;
                self.pool = None;
            }
        }
    }
}

fn spec(j: usize, m: &Member, iterations: u64) -> MemberSpec {
    MemberSpec {
        job: JobId(j as u32),
        rollout_nodes: m.nodes.clone(),
        costs: SwitchCosts {
            rollout_warm: Micros(1),
            rollout_cold: Micros(5),
            train_warm: Micros(2),
            train_cold: Micros(9),
        },
        sync: Micros(1),
        resident: true,
        rollout_state: Bytes(1),
        train_state: Bytes(1),
        iterations: Some(iterations),
        start_iteration: 0,
        staleness: m.staleness,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_staleness_bound_holds_under_any_completion_order(
        members in members(),
        iterations in 1u64..=6,
        picks in proptest::collection::vec(any::<u32>(), 200),
    ) {
        let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
        let seen = (0..members.len()).map(|j| (JobId(j as u32), Seen::default())).collect();
        let mut obs = Observer { members: members.clone(), seen, pool: None, nodes: BTreeMap::new() };
        let mut pending = Vec::new();
        for (j, m) in members.iter().enumerate() {
            for a in d.handle(Micros(0), Input::Join(spec(j, m, iterations))).unwrap() {
                pending.extend(obs.apply(&a));
            }
        }
        let mut step = 0usize;
        while !pending.is_empty() {
            prop_assert!(step < 10_000, "no progress");
            let p = pending.swap_remove(picks[step % picks.len()] as usize % pending.len());
            step += 1;
            let input = match p {
                Pending::Switch(job, phase, iteration) => Input::SwitchFinished { job, phase, iteration },
                Pending::Phase(job, phase, iteration) => {
                    obs.finished(job, phase);
                    Input::PhaseFinished { job, phase, iteration }
                }
                Pending::Sync(job, iteration) => {
                    let s = obs.seen.get_mut(&job).unwrap();
                    s.syncing = None;
                    s.synced += 1;
                    Input::SyncFinished { job, iteration }
                }
            };
            for a in d.handle(Micros(step as u64), input).unwrap() {
                pending.extend(obs.apply(&a));
            }
        }
        for (job, s) in &obs.seen {
            prop_assert_eq!(s.completed, Some(iterations), "{} did not finish", job);
        }
        prop_assert!(d.is_empty());
    }
}

/// Handles `input`, finishing any switch it begins at once; the phases and syncs started,
/// sorted.
fn step(d: &mut Dispatcher, t: u64, input: Input) -> Vec<String> {
    let mut inputs = vec![input];
    let mut started = Vec::new();
    while let Some(input) = inputs.pop() {
        for a in d.handle(Micros(t), input).unwrap() {
            match a {
                Action::BeginSwitch { job, phase, iteration, .. } => {
                    inputs.push(Input::SwitchFinished { job, phase, iteration })
                }
                Action::StartRollout { iteration, .. } => started.push(format!("R{iteration}")),
                Action::StartTraining { iteration, .. } => started.push(format!("T{iteration}")),
                Action::BeginSync { iteration, .. } => started.push(format!("S{iteration}")),
                Action::Completed { .. } => {}
            }
        }
    }
    started.sort();
    started
}

/// A rollout more than k versions ahead is never granted: with k = 1 the second rollout may
/// start while the first training runs, the third only after the first sync.
#[test]
fn one_step_off_policy_overlaps_rollout_with_training() {
    let m = Member { nodes: vec![0], staleness: 1 };
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let spec = spec(0, &m, 5);
    let job = spec.job;
    assert_eq!(step(&mut d, 0, Input::Join(spec)), ["R0"]);
    let done = |phase, iteration| Input::PhaseFinished { job, phase, iteration };
    assert_eq!(step(&mut d, 1, done(Phase::Rollout, 0)), ["R1", "T0"]);
    assert_eq!(step(&mut d, 2, done(Phase::Rollout, 1)), Vec::<String>::new());
    assert_eq!(step(&mut d, 3, done(Phase::Train, 0)), ["S0"]);
    // Version 1 synced: rollout 2 may start (2 <= 1 + 1), and training 1 (rollout 1 is done).
    assert_eq!(step(&mut d, 4, Input::SyncFinished { job, iteration: 0 }), ["R2", "T1"]);
    // A report of a rollout the dispatcher did not start is refused.
    assert!(d.handle(Micros(5), done(Phase::Rollout, 3)).is_err());
}

#[test]
fn a_staleness_above_the_limit_is_refused() {
    let m = Member { nodes: vec![0], staleness: MAX_STALENESS + 1 };
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let err = d.handle(Micros(0), Input::Join(spec(0, &m, 3))).unwrap_err().to_string();
    assert!(err.contains("staleness"), "{err}");
    assert!(d.is_empty());
}
