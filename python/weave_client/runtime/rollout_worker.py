"""The reference job's rollout worker (rank 1): receives each weights version (digest-checked),
samples the rollout of exactly that version inside its granted phase, and sends the
trajectories to the trainer (see ``grpo_job``'s text)."""

import argparse
import os
import signal
import sys
import time

from .job_process import (EXIT_RESTART, ROLLOUT, TRAINER, VersionError, configs, join_process_group,
                          leave_process_group, log_record, weights_plan)


def run_rollout(a: argparse.Namespace) -> None:
    from weave_client import Requeued

    from .policy import build_policy
    from .resident import ResidentState

    join_process_group(a, ROLLOUT, a.rollout_cpus)
    pcfg, _ = configs(a)
    state = ResidentState(f"{a.job}/rollout", lambda: ({"policy": build_policy(pcfg)}, {}))
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    try:
        _rollout_loop(a, state, log)
    except (Requeued, RuntimeError, OSError) as e:
        # Nothing to save: the trainer holds the job's state; a new worker gets it by sync.
        log_record(log, {"job": a.job, "role": "rollout", "event": "interrupted", "reason": str(e)[:300]})
        sys.exit(EXIT_RESTART)
    leave_process_group()


def _die_mid_sync(a: argparse.Namespace, version: int) -> None:
    """Fault injection (``--die-mid-sync``): once per job directory, so the restarted worker goes on."""
    marker = os.path.join(a.dir, "died-mid-sync")
    if a.die_mid_sync == version and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def _rollout_loop(a, state, log: str) -> None:
    import torch

    from weave_client import WeaveClient

    from .policy import rollout
    from .sync import recv_weights, send_batch

    _, gcfg = configs(a)
    cold = state.activate()
    flat = state.parameters_flat()
    plan = weights_plan(flat.numel() * flat.element_size())
    got = recv_weights(plan, ROLLOUT)
    state.load_parameters(got.flat, got.version)
    state.offload()
    log_record(log, {"job": a.job, "role": "rollout", "event": "start", "iteration": got.version, "switch": cold.kind,
               "switch_s": cold.seconds, "bytes": cold.bytes})
    client = WeaveClient(a.server, a.token)
    received = got
    for k in range(got.version, a.iterations):
        with client.phase(a.job, "rollout", k) as meta:
            t0 = time.perf_counter()
            sw = state.activate()
            if state.version != k:
                raise VersionError(f"{a.job}: rollout {k} would sample from weights {state.version}")
            # One named stream per iteration: a resumed job draws the same prompts again.
            rng = torch.Generator().manual_seed(a.seed * 1_000_003 + k)
            batch = rollout(state.modules["policy"], rng, gcfg)
            off = state.offload()
            meta.update({
                "weights_version": k, "mean_reward": round(float(batch["reward"].mean()), 6),
                "switch": sw.kind, "switch_s": sw.seconds, "offload_s": off.seconds,
                "host_bytes": state.host_bytes(), "compute_s": time.perf_counter() - t0,
                "received_sync_s": received.stats.seconds, "refused_syncs": received.refused,
            })
        log_record(log, {"job": a.job, "role": "rollout", "phase": "rollout", "iteration": k, **meta})
        send_batch(batch, k, TRAINER)
        if k + 1 < a.iterations:
            received = recv_weights(plan, ROLLOUT, on_header=lambda v: _die_mid_sync(a, v))
            # Published between phases, after the digest check: never a half-updated model.
            state.load_parameters(received.flat, received.version)
