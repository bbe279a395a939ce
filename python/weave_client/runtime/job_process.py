"""What the reference job's processes share: their ranks and exit code, the protocol error,
their CPUs and process group, the job's configuration and its log of JSON lines.

With ``--trainers N`` the job runs N trainer ranks (0 .. N - 1, data-parallel: each trains on
the batch of its own rollout worker, gradients averaged) and N rollout workers (ranks N ..
2N - 1, each sampling its share of the prompts). Rank 0 and rank N (the leaders) talk to
Weave's gate; the others follow them."""

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


def launched_on() -> Dict[str, str]:
    """The Slurm node this process runs on, for its start record (a Slurm job step knows it by
    ``SLURMD_NODENAME``; elsewhere nothing)."""
    node = os.environ.get("SLURMD_NODENAME")
    return {"node": node} if node else {}


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


def trainer_rank(a: argparse.Namespace, i: int) -> int:
    return i


def rollout_rank(a: argparse.Namespace, j: int) -> int:
    return a.trainers + j


# The trainers' and the rollout workers' own groups (collectives within a side), once joined.
GROUPS: Dict[str, Any] = {}


def join_process_group(a: argparse.Namespace, rank: int, cpu_spec: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(len(pin_to(cpus(cpu_spec))))
    from . import minicluster

    master = a.master or (minicluster.link_ip_of_trainer() if a.minicluster else "127.0.0.1")
    n = a.trainers
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{a.port}", rank=rank, world_size=2 * n)
    if n > 1:
        # Every rank creates both groups, in the same order (a collective).
        GROUPS["trainers"] = dist.new_group(list(range(n)))
        GROUPS["rollouts"] = dist.new_group(list(range(n, 2 * n)))


def weights_plan(a: argparse.Namespace, model_bytes: int):
    """How the job's weights move: ``--sync-plan``'s (``weave sync plan --emit``), or with one
    trainer and one rollout worker the one transfer ``weave-sync`` plans for that shape."""
    from .sync import Plan

    if a.sync_plan is None:
        if a.trainers != 1:
            raise SystemExit(f"--trainers {a.trainers} needs --sync-plan (weave sync plan --emit ...)")
        return Plan.single(model_bytes, TRAINER, ROLLOUT)
    with open(a.sync_plan) as f:
        weave = json.load(f)["plan"]
    plan = Plan.from_weave(weave)
    shape = (weave["train_gpus"], weave["rollout_gpus"], plan.model_bytes)
    if shape != (a.trainers, a.trainers, model_bytes):
        raise SystemExit(f"--sync-plan {a.sync_plan}: a plan for {shape[0]} -> {shape[1]} GPUs and {shape[2]} bytes; "
                         f"this job has {a.trainers} -> {a.trainers} ranks and {model_bytes} bytes")
    return plan


def follow(go: int, side: str, leader: int) -> int:
    """The leader of ``side`` tells its followers which iteration's phase runs now (they
    receive it; the leader sends ``go``)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([go], dtype=torch.int64)
    dist.broadcast(t, src=leader, group=GROUPS[side])
    return int(t.item())


def sync_step_starts(a: argparse.Namespace) -> None:
    """The trainers start a version's sync together, once rank 0 has reported the training
    finished (the dispatcher's sync step follows the phase): a follower that sent its part
    early would hide part of the sync from rank 0's measurement."""
    import torch.distributed as dist

    if a.trainers > 1:
        dist.barrier(group=GROUPS["trainers"])


def average_gradients(module) -> None:
    """Data parallelism across the trainers: each gradient becomes the mean over them."""
    import torch.distributed as dist

    group = GROUPS["trainers"]
    n = dist.get_world_size(group)
    for p in module.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= n


def configs(a: argparse.Namespace):
    from .policy import GrpoConfig, PolicyConfig

    return PolicyConfig(digits=a.digits, seed=a.seed, task=a.task), GrpoConfig(
        prompts=a.prompts, group=a.group, lr=a.lr, epochs=a.epochs
    )


def trainer_build(a: argparse.Namespace):
    """What builds a trainer's state (the policy and its optimizer), for ``ResidentState``."""
    from .policy import build_policy, make_optimizer

    pcfg, gcfg = configs(a)

    def build():
        p = build_policy(pcfg)
        return {"policy": p}, {"adam": make_optimizer(p, gcfg)}

    return build


def leave_process_group() -> None:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
