"""What the reference job's processes share: their ranks and exit code, the protocol error,
their CPUs and process group, the job's configuration and its log of JSON lines."""

import argparse
import json
import os
from typing import Any, Dict, List

TRAINER, ROLLOUT = 0, 1
# A process that stopped because the job lost its admission or its peer: run it again.
EXIT_RESTART = 75


class VersionError(Exception):
    """A protocol violation (weights or trajectories of the wrong version): never retried."""


def cpus(spec: str) -> List[int]:
    out: List[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def log_record(path: str, record: Dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def pin_to(want: List[int]) -> List[int]:
    """Runs this process on the CPUs ``want`` if it may use them all; else it stays on the ones
    it has (a node with a CPU set of its own, such as a Ray node of ``ray-local.sh``'s miniature
    cluster, already pinned it: a job co-located on the training node must not escape to the
    rollout node's CPU). Returns the CPUs it runs on."""
    if not hasattr(os, "sched_setaffinity"):
        return want
    have = os.sched_getaffinity(0)
    if not set(want) <= have:
        return sorted(have)
    os.sched_setaffinity(0, want)
    return want


def join_process_group(a: argparse.Namespace, rank: int, cpu_spec: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(len(pin_to(cpus(cpu_spec))))
    from . import minicluster

    master = a.master or (minicluster.link_ip_of_trainer() if a.minicluster else "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{a.port}", rank=rank, world_size=2)


def weights_plan(model_bytes: int):
    """How the job's weights move: one transfer from the trainer to the rollout worker (the
    plan ``weave-sync`` makes for one training and one rollout GPU)."""
    from .sync import Plan

    return Plan.single(model_bytes, TRAINER, ROLLOUT)


def configs(a: argparse.Namespace):
    from .policy import GrpoConfig, PolicyConfig

    return PolicyConfig(digits=a.digits, seed=a.seed), GrpoConfig(
        prompts=a.prompts, group=a.group, lr=a.lr, epochs=a.epochs
    )


def leave_process_group() -> None:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
