use super::*;
use crate::SwitchCosts;
use weave_core::Bytes;

#[test]
fn measured_switches_replace_the_models_only_where_given() {
    let model =
        SwitchCosts { rollout_warm: Micros(1), rollout_cold: Micros(2), train_warm: Micros(3), train_cold: Micros(4) };
    assert_eq!(model.with_measured(None, None), model);
    let warm = model.with_measured(Some(Micros(9)), None);
    assert_eq!(
        (warm.rollout_warm, warm.train_warm, warm.rollout_cold, warm.train_cold),
        (Micros(9), Micros(9), Micros(2), Micros(4))
    );
    let cold = model.with_measured(None, Some(Micros(7)));
    assert_eq!(
        (cold.rollout_warm, cold.train_warm, cold.rollout_cold, cold.train_cold),
        (Micros(1), Micros(3), Micros(7), Micros(7))
    );
}

fn member(job: u32, nodes: &[u32]) -> MemberSpec {
    MemberSpec {
        job: JobId(job),
        rollout_nodes: nodes.to_vec(),
        costs: SwitchCosts::default(),
        sync: Micros(1),
        resident: true,
        staleness: 0,
        rollout_state: Bytes(1),
        train_state: Bytes(1),
        iterations: Some(3),
        start_iteration: 0,
    }
}

/// Node numbers only grow in elastic pools: a dispatcher holds state for the nodes its
/// members use now, not for every number below them.
#[test]
fn rollout_state_follows_the_nodes_in_use() {
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    d.handle(Micros(0), Input::Join(member(0, &[1_000_000]))).unwrap();
    d.handle(Micros(0), Input::Join(member(1, &[1_000_000, 2_000_000]))).unwrap();
    assert_eq!(d.rollout.keys().copied().collect::<Vec<_>>(), [1_000_000, 2_000_000]);
    d.handle(Micros(1), Input::Leave { job: JobId(1) }).unwrap();
    assert_eq!(d.rollout.keys().copied().collect::<Vec<_>>(), [1_000_000]);
    assert_eq!(d.memory().usage().len(), 2, "r1000000 and the training nodes");
    d.handle(Micros(2), Input::Leave { job: JobId(0) }).unwrap();
    assert!(d.rollout.is_empty());
    assert_eq!(d.memory().usage().len(), 1, "only the training nodes");
}

/// Feeds `input` and finishes every switch it begins at once; the phases started.
fn started(d: &mut Dispatcher, at: u64, input: Input) -> Vec<(JobId, Phase, u64)> {
    let mut pending = d.handle(Micros(at), input).unwrap();
    let mut out = Vec::new();
    while let Some(a) = pending.pop() {
        match a {
            Action::BeginSwitch { job, phase, iteration, .. } => {
                pending.extend(d.handle(Micros(at), Input::SwitchFinished { job, phase, iteration }).unwrap())
            }
            Action::StartRollout { job, iteration, .. } => out.push((job, Phase::Rollout, iteration)),
            Action::StartTraining { job, iteration } => out.push((job, Phase::Train, iteration)),
            _ => {}
        }
    }
    out
}

/// A member that joins a running group and is still in its first rollout, on a node of its
/// own, does not hold the training pool: the incumbent trains meanwhile (before, it waited on
/// the idle pool for the newcomer's whole first rollout and training), and the newcomer is
/// due right after. Joined at formation, members wait for their turn as before.
#[test]
fn a_late_newcomer_in_its_first_rollout_holds_no_one_up() {
    let (incumbent, newcomer) = (JobId(0), JobId(1));
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let mut spec = member(0, &[0]);
    spec.iterations = Some(10);
    assert_eq!(started(&mut d, 0, Input::Join(spec)), [(incumbent, Phase::Rollout, 0)]);
    let roll_done = Input::PhaseFinished { job: incumbent, phase: Phase::Rollout, iteration: 0 };
    assert_eq!(started(&mut d, 1, roll_done), [(incumbent, Phase::Train, 0)]);
    started(&mut d, 2, Input::PhaseFinished { job: incumbent, phase: Phase::Train, iteration: 0 });
    assert_eq!(
        started(&mut d, 3, Input::SyncFinished { job: incumbent, iteration: 0 }),
        [(incumbent, Phase::Rollout, 1)]
    );
    let mut spec = member(1, &[1]);
    spec.iterations = Some(10);
    assert_eq!(started(&mut d, 4, Input::Join(spec)), [(newcomer, Phase::Rollout, 0)]);
    // The incumbent's rollout ends long before the newcomer's first one: it trains at once.
    let roll_done = Input::PhaseFinished { job: incumbent, phase: Phase::Rollout, iteration: 1 };
    assert_eq!(started(&mut d, 5, roll_done), [(incumbent, Phase::Train, 1)]);
    // The newcomer's rollout ends while the pool is busy; it trains next, before the
    // incumbent's next training.
    assert!(started(&mut d, 6, Input::PhaseFinished { job: newcomer, phase: Phase::Rollout, iteration: 0 }).is_empty());
    let next = started(&mut d, 7, Input::PhaseFinished { job: incumbent, phase: Phase::Train, iteration: 1 });
    assert_eq!(next, [(newcomer, Phase::Train, 0)]);
}

/// A member's rollout nodes are idle for it exactly while its next rollout waits for a
/// training of its own: lending across groups relies on this, and on nothing looser.
#[test]
fn rollout_hold_names_the_training_a_rollout_waits_for() {
    let job = JobId(0);
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let mut spec = member(0, &[0]);
    spec.iterations = Some(2);
    started(&mut d, 0, Input::Join(spec));
    assert_eq!(d.rollout_hold(job), None, "rolling out");
    started(&mut d, 1, Input::PhaseFinished { job, phase: Phase::Rollout, iteration: 0 });
    assert_eq!(d.rollout_hold(job), Some(RolloutHold::Training { running: true, iteration: 0 }));
    started(&mut d, 2, Input::PhaseFinished { job, phase: Phase::Train, iteration: 0 });
    assert_eq!(d.rollout_hold(job), None, "only a sync away");
    started(&mut d, 3, Input::SyncFinished { job, iteration: 0 });
    assert_eq!(d.rollout_hold(job), None, "rolling out again");
    started(&mut d, 4, Input::PhaseFinished { job, phase: Phase::Rollout, iteration: 1 });
    assert_eq!(d.rollout_hold(job), Some(RolloutHold::NoneLeft), "its last rollout is done");
    assert_eq!(d.rollout_hold(JobId(9)), None, "not a member");

    // Bounded staleness: the next rollout starts before the training ends, so nothing holds it.
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let mut spec = member(1, &[0]);
    (spec.iterations, spec.staleness) = (Some(5), 1);
    started(&mut d, 0, Input::Join(spec));
    let next = started(&mut d, 1, Input::PhaseFinished { job: JobId(1), phase: Phase::Rollout, iteration: 0 });
    assert!(next.contains(&(JobId(1), Phase::Rollout, 1)), "{next:?}");
    assert_eq!(d.rollout_hold(JobId(1)), None);
    // Its second rollout ends while the first training runs: now it waits for that one.
    started(&mut d, 2, Input::PhaseFinished { job: JobId(1), phase: Phase::Rollout, iteration: 1 });
    assert_eq!(d.rollout_hold(JobId(1)), Some(RolloutHold::Training { running: true, iteration: 0 }));
}

/// A pack that a job joins runs more iterations: allowed while its last rollout has not
/// started, and the member then completes at the new count.
#[test]
fn extended_iterations_run_to_the_new_count_and_only_before_the_last_rollout() {
    let job = JobId(0);
    let mut d = Dispatcher::new(GroupLimits::UNLIMITED);
    let mut spec = member(0, &[0]);
    spec.iterations = Some(2);
    started(&mut d, 0, Input::Join(spec));
    assert!(!d.extend_iterations(job, 1), "never fewer");
    assert!(!d.extend_iterations(JobId(9), 5), "not a member");
    assert!(d.extend_iterations(job, 3), "rollout 0 of 2 runs");
    let mut t = 1;
    for iteration in 0..3 {
        if iteration > 0 {
            started(&mut d, t, Input::SyncFinished { job, iteration: iteration - 1 });
            t += 1;
        }
        started(&mut d, t, Input::PhaseFinished { job, phase: Phase::Rollout, iteration });
        t += 1;
        if iteration == 2 {
            assert!(!d.extend_iterations(job, 4), "its last rollout has run");
        }
        let actions = d.handle(Micros(t), Input::PhaseFinished { job, phase: Phase::Train, iteration }).unwrap();
        t += 1;
        let completed = actions.iter().any(|a| matches!(a, Action::Completed { iterations: 3, .. }));
        assert_eq!(completed, iteration == 2, "iteration {iteration}: {actions:?}");
    }
}
