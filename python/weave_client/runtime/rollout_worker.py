"""The reference job's rollout worker (rank 1): receives each weights version (digest-checked),
samples the rollout of exactly that version inside its granted phase, and sends the
trajectories to the trainer (see ``grpo_job``'s text). With ``--trainers N`` there are N
workers (ranks N .. 2N - 1): worker ``j`` samples its share of the prompts inside the phase the
first worker was granted and sends them to trainer ``j``."""

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, Optional, Tuple

from .job_process import (EXIT_RESTART, VersionError, configs, follow, join_process_group, leave_process_group,
                          launched_on, log_record, rollout_rank, trainer_rank, weights_plan)


def run_rollout(a: argparse.Namespace) -> None:
    from weave_client import Requeued

    from .policy import build_policy
    from .resident import ResidentState

    j = a.rank_index
    join_process_group(a, rollout_rank(a, j), a.rollout_cpus)
    pcfg, _ = configs(a)
    state = ResidentState(f"{a.job}/rollout" + (f"-{j}" if j else ""), lambda: ({"policy": build_policy(pcfg)}, {}))
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    try:
        _rollout_loop(a, state, log)
    except (Requeued, RuntimeError, OSError) as e:
        # Nothing to save: the trainer holds the job's state; a new worker gets it by sync.
        log_record(log, {"job": a.job, "role": "rollout", "worker": j, "event": "interrupted", "reason": str(e)[:300]})
        sys.exit(EXIT_RESTART)
    leave_process_group()


def _die_mid_sync(a: argparse.Namespace, version: int) -> None:
    """Fault injection (``--die-mid-sync``): once per job directory, so the restarted worker goes on."""
    marker = os.path.join(a.dir, "died-mid-sync")
    if a.die_mid_sync == version and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def _rng(a, k: int):
    """One named stream per iteration and worker: a resumed job draws the same prompts again."""
    import torch

    return torch.Generator().manual_seed(a.seed * 1_000_003 + k + 1_000_000_007 * a.rank_index)


class _Sandboxed:
    """The agentic task's environment (``--task tool``): each rollout's sandboxes start ahead,
    in a thread, once the previous rollout's trajectories are sent (while they train and the
    weights come back), so the rollout's phase waits only for what the training did not cover
    (that wait is inside the phase, where Weave measures it)."""

    def __init__(self, a, gcfg) -> None:
        from .sandbox_host import Environment

        self.a, self.share = a, dataclasses.replace(gcfg, prompts=gcfg.prompts // a.trainers)
        self.env = Environment(a.env.split(","), a.env_step_ms)
        self.ahead: Optional[Tuple[int, Any, threading.Thread, Dict[str, Any]]] = None

    def start_ahead(self, k: int) -> None:
        from .tool_task import Prepared

        rng, out = _rng(self.a, k), {}

        def start() -> None:
            try:
                out["prepared"] = Prepared(rng, self.share, self.a.digits, self.env)
            except Exception as e:  # raised again where the rollout needs them
                out["error"] = e

        t = threading.Thread(target=start, name=f"sandboxes-{k}", daemon=True)
        t.start()
        self.ahead = (k, rng, t, out)

    def rollout(self, policy, k: int):
        from .tool_task import rollout

        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return rollout(policy, _rng(self.a, k), self.share, self.env)
        started, rng, thread, out = ahead
        thread.join()
        if "error" in out:
            raise out["error"]
        if started != k:
            out["prepared"].close()
            return rollout(policy, _rng(self.a, k), self.share, self.env)
        return rollout(policy, rng, self.share, self.env, out["prepared"])


def _check_sandboxes_granted(a, granted: Optional[Dict[str, Any]]) -> None:
    """An agentic rollout holds one sandbox per trajectory: never more than its grant names."""
    need = a.prompts * a.group
    if granted is None or granted.get("sandboxes", 0) < need:
        have = None if granted is None else granted.get("sandboxes")
        raise VersionError(f"{a.job}: the rollout needs {need} sandboxes; its grant names {have} "
                           "(was the job submitted with its agentic declaration and batch?)")


def _sample(a, state, k: int, gcfg, env: Optional[_Sandboxed]) -> "tuple[Dict[str, Any], Dict[str, Any]]":
    """This worker's rollout ``k`` (its share of the prompts, with weights version ``k``; with
    ``env``, the agentic task's trajectories in its sandboxes): the batch, and what the phase
    reports of it."""
    import torch.distributed as dist

    from .job_process import GROUPS
    from .policy import rollout

    t0 = time.perf_counter()
    sw = state.activate()
    if state.version != k:
        raise VersionError(f"{a.job}: rollout {k} would sample from weights {state.version}")
    if env is None:
        share = dataclasses.replace(gcfg, prompts=gcfg.prompts // a.trainers)
        batch = rollout(state.modules["policy"], _rng(a, k), share)
    else:
        batch = env.rollout(state.modules["policy"], k)
    environment = batch.pop("env_stats", None)
    off = state.offload()
    reward = batch["reward"].mean()
    if a.trainers > 1:
        reward = reward.clone()
        dist.all_reduce(reward, group=GROUPS["rollouts"])
        reward /= a.trainers
    return batch, {
        "weights_version": k, "mean_reward": round(float(reward), 6), "switch": sw.kind, "switch_s": sw.seconds,
        "offload_s": off.seconds, "host_bytes": state.host_bytes(), "compute_s": time.perf_counter() - t0,
        **({"env_stats": environment} if environment is not None else {}),
    }


def _rollout_loop(a, state, log: str) -> None:
    from weave_client import WeaveClient

    from .sync import recv_weights, send_batch

    _, gcfg = configs(a)
    j, me, leader = a.rank_index, rollout_rank(a, a.rank_index), rollout_rank(a, 0)
    cold = state.activate()
    flat = state.parameters_flat()
    plan = weights_plan(a, flat.numel() * flat.element_size())
    got = recv_weights(plan, me)
    state.load_parameters(got.flat, got.version)
    state.offload()
    log_record(log, {"job": a.job, "role": "rollout", "worker": j, "event": "start", "iteration": got.version,
                     "switch": cold.kind, "switch_s": cold.seconds, "bytes": cold.bytes, **launched_on()})
    client: Optional[WeaveClient] = WeaveClient(a.server, a.token) if j == 0 else None
    env = _Sandboxed(a, gcfg) if a.task == "tool" else None
    received = got
    if env is not None:
        env.start_ahead(got.version)
    for k in range(got.version, a.iterations):
        if client is not None:
            with client.phase(a.job, "rollout", k) as meta:
                if env is not None:
                    _check_sandboxes_granted(a, meta.environment)
                if a.trainers > 1:
                    follow(k, "rollouts", leader)
                batch, fields = _sample(a, state, k, gcfg, env)
                if "env_stats" in fields:
                    e = fields["env_stats"]
                    meta.report_environment(e["trajectories"], e["turns"], e["env_s"], e["startup_s"])
                meta.update({**fields, "received_sync_s": received.stats.seconds, "refused_syncs": received.refused})
            log_record(log, {"job": a.job, "role": "rollout", "phase": "rollout", "iteration": k, **meta})
        else:
            granted = follow(-1, "rollouts", leader)
            if granted != k:
                raise VersionError(f"{a.job}: worker {j}: rollout {granted} granted, expected {k}")
            batch, _ = _sample(a, state, k, gcfg, env)
        send_batch(batch, k, trainer_rank(a, j))
        if env is not None and k + 1 < a.iterations:
            env.start_ahead(k + 1)
        if k + 1 < a.iterations:
            received = recv_weights(plan, me, on_header=lambda v: _die_mid_sync(a, v))
            # Published between phases, after the digest check: never a half-updated model.
            state.load_parameters(received.flat, received.version)
