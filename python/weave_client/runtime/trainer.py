"""The reference job's trainer (rank 0): waits for each training phase, takes the GRPO step
on trajectories of exactly its version, stages and checkpoints the state, and sends the new
weights to the rollout worker (see ``grpo_job``'s text). With ``--trainers N`` ranks 1 .. N - 1
follow it: each trains on its own rollout worker's batch inside the phase rank 0 was granted
(gradients averaged over the trainers), and sends its part of the weights along the plan; rank 0
alone talks to Weave and writes the state (every trainer holds the same weights)."""

import argparse
import os
import signal
import sys
import time
from typing import Any, Dict

from .checkpointing import (NoticeGuard, checkpoint_path, noticed_path, save_acked, staged_bytes, staged_path,
                            staging_dir, start_from, write_noticed)
from .job_process import (EXIT_RESTART, TRAINER, VersionError, average_gradients, configs, follow,
                          join_process_group, launched_on, leave_process_group, log_record, rollout_rank,
                          sync_step_starts,
                          trainer_build, trainer_rank, weights_plan)


def run_trainer(a: argparse.Namespace) -> None:
    from weave_client import Requeued, WeaveClient

    from .resident import ResidentState
    from .sync import send_weights

    if a.rank_index > 0:
        return _follow_trainer(a)
    join_process_group(a, TRAINER, a.train_cpus)
    state = ResidentState(f"{a.job}/trainer", trainer_build(a))
    ckpt = checkpoint_path(a.dir)
    cold = state.activate(start_from(a.dir, ckpt))
    start = state.version
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    log_record(log, {"job": a.job, "role": "trainer", "event": "start", "iteration": start, "switch": cold.kind,
               "switch_s": cold.seconds, "bytes": cold.bytes, **launched_on()})
    client = WeaveClient(a.server, a.token)
    # pending: (iteration, state) copied in the phase; durable: the newest iteration a file on
    # disk (the checkpoint, a copy written under a notice) holds, as far as this process knows.
    start_file = start_from(a.dir, ckpt)
    run = {"acked": start, "pending": None, "durable": start if start_file in (ckpt, noticed_path(a.dir, start)) else -1}
    guard = NoticeGuard(a, client.job(a.job)["job"]["training_nodes"], run, log)
    try:
        with client.keepalive(a.job, interval_s=1.0, on_notice=guard.heard):
            flat = state.parameters_flat()
            plan = weights_plan(a, flat.numel() * flat.element_size())
            first = send_weights(flat, start, plan, TRAINER)
            state.offload()
            _train_loop(a, client, state, ckpt, log, start, run, guard, plan)
    except (Requeued, RuntimeError, OSError) as e:
        # Gloo reports a lost peer as RuntimeError; a lost admission is Requeued.
        save_acked(state, ckpt, log, a.job, run)
        log_record(log, {"job": a.job, "role": "trainer", "event": "interrupted", "iteration": run["acked"],
                   "reason": str(e)[:300]})
        sys.exit(EXIT_RESTART)
    log_record(log, {"job": a.job, "role": "trainer", "event": "done", "first_sync_s": first.seconds})
    leave_process_group()


def _train_loop(a, client, state, ckpt: str, log: str, start: int, run: Dict[str, Any], guard: NoticeGuard,
                plan) -> None:
    from .resident import save_checkpoint
    from .sync import recv_batch, send_weights

    for k in range(start, a.iterations):
        version, batch = recv_batch(rollout_rank(a, 0))
        if version != k:
            raise VersionError(f"{a.job}: trajectories of weights {version} for training {k}")
        held = False
        try:
            with client.phase(a.job, "train", k) as meta:
                guard.lock.acquire()
                held = True
                _train_phase(a, state, batch, k, run, guard, meta)
        finally:
            if held:
                guard.lock.release()
        flat, copy = run.pop("flat"), run.pop("copy")
        run["acked"] = k + 1
        if guard.noticed is not None and run["durable"] < k + 1:
            # The notice came during this phase, after its copy would have been written.
            with guard.lock:
                write_noticed(a, run, copy, k + 1, log)
        # The sync follows the training phase (the dispatcher's sync step): the rollout
        # worker asks for its next rollout only once the new version has arrived intact.
        synced: Dict[str, Any] = {}
        if k + 1 < a.iterations:
            sync_step_starts(a)
            sync = send_weights(flat, k + 1, plan, TRAINER, corrupt_first=a.corrupt_sync_once and k == start)
            synced = {"sync_s": sync.seconds, "sync_bytes": sync.bytes, "sync_attempts": sync.attempts}
        log_record(log, {"job": a.job, "role": "trainer", "phase": "train", "iteration": k, **meta, **synced})
        if a.die_after_finish == k and not os.path.exists(os.path.join(a.dir, "died-after-finish")):
            # Fault injection: the trainer dies between an acknowledged finish and its slack
            # checkpoint (once: the restarted trainer goes on).
            open(os.path.join(a.dir, "died-after-finish"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if run["pending"] is not None:
            # Slack: the job's own idle window (its rollout runs), never inside a phase.
            t0 = time.perf_counter()
            save_checkpoint(ckpt, run["pending"][1])
            run["durable"] = max(run["durable"], run["pending"][0])
            log_record(log, {"job": a.job, "role": "trainer", "event": "checkpoint", "iteration": run["pending"][0],
                       "seconds": time.perf_counter() - t0, "slack": True})
            run["pending"] = None


def _train_phase(a, state, batch, k: int, run: Dict[str, Any], guard: NoticeGuard, meta) -> None:
    """Training ``k`` inside its granted phase: the step and the staged copy, and under a notice
    on the training node the checkpoint too, before the phase is reported finished. Leaves the
    new weights and the state's copy in ``run`` (``flat``, ``copy``)."""
    from .policy import train_step
    from .resident import save_checkpoint

    _, gcfg = configs(a)
    t0 = time.perf_counter()
    sw = state.activate()
    grad_sync = None
    if a.trainers > 1:
        follow(k, "trainers", trainer_rank(a, 0))
        grad_sync = average_gradients
    loss = train_step(state.modules["policy"], state.optimizers["adam"], batch, gcfg, grad_sync)
    state.version = k + 1
    run["flat"], run["copy"] = state.parameters_flat(), state.snapshot()
    t_stage = time.perf_counter()
    os.makedirs(staging_dir(a.dir), exist_ok=True)
    save_checkpoint(staged_path(a.dir, k + 1), run["copy"])
    staged_s = time.perf_counter() - t_stage
    noticed: Dict[str, Any] = {}
    if guard.noticed is not None:
        noticed = {"checkpoint_on_notice_s": write_noticed(a, run, run["copy"], k + 1)}
    if (k + 1) % a.checkpoint_every == 0 or k + 1 == a.iterations:
        run["pending"] = (k + 1, run["copy"])
    off = state.offload()
    meta.update({
        "trajectory_version": k, "new_weights_version": k + 1, "loss": round(loss, 6),
        "switch": sw.kind, "switch_s": sw.seconds, "offload_s": off.seconds, "staged_s": staged_s,
        "host_bytes": state.host_bytes() + staged_bytes(a.dir), "compute_s": time.perf_counter() - t0,
        **noticed,
    })


def _follow_trainer(a: argparse.Namespace) -> None:
    """Trainer rank ``a.rank_index`` > 0: the same steps as rank 0 on its own batch, inside the
    phases rank 0 is granted; its state stays active (it is a copy of rank 0's, which is the
    one Weave's residency and checkpoints account for)."""
    from weave_client import Requeued

    from .policy import train_step
    from .resident import ResidentState
    from .sync import recv_batch, send_weights

    i = a.rank_index
    join_process_group(a, trainer_rank(a, i), a.train_cpus)
    _, gcfg = configs(a)
    state = ResidentState(f"{a.job}/trainer-{i}", trainer_build(a))
    state.activate(start_from(a.dir, checkpoint_path(a.dir)))
    start = state.version
    flat = state.parameters_flat()
    plan = weights_plan(a, flat.numel() * flat.element_size())
    try:
        send_weights(flat, start, plan, trainer_rank(a, i))
        for k in range(start, a.iterations):
            version, batch = recv_batch(rollout_rank(a, i))
            granted = follow(-1, "trainers", trainer_rank(a, 0))
            if version != k or granted != k:
                raise VersionError(f"{a.job}: trainer {i}: trajectories of {version}, training {granted}, expected {k}")
            train_step(state.modules["policy"], state.optimizers["adam"], batch, gcfg, average_gradients)
            state.version = k + 1
            if k + 1 < a.iterations:
                sync_step_starts(a)
                send_weights(state.parameters_flat(), k + 1, plan, trainer_rank(a, i))
    except (Requeued, RuntimeError, OSError):
        sys.exit(EXIT_RESTART)
    leave_process_group()
