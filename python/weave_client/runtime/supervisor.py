"""The reference job's launcher: starts its two processes (locally, on the mini cluster's nodes,
or as Ray actors), watches them, and after a lost admission or a dead process starts both again
from the iteration Weave counts."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List

from .checkpointing import resume_at, staging_dir
from .job_process import EXIT_RESTART, log_record


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def supervise(procs: Dict[str, subprocess.Popen]) -> Dict[str, int]:
    """Waits for the job's processes. Once one has failed, the rollout workers are stopped first
    (a lost peer is how the trainers learn to save and stop), then the trainers get a minute."""
    while all(p.poll() is None for p in procs.values()):
        time.sleep(0.2)
    if any(p.returncode not in (None, 0) for p in procs.values()):
        for name, p in procs.items():
            if name.startswith("rollout") and p.poll() is None:
                p.kill()
        deadline = time.monotonic() + 60
        for name, p in procs.items():
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
    return {role: p.wait() for role, p in procs.items()}


def launched_job_args(env: Any, master: str) -> List[str]:
    """The reference job's arguments for a driver Weave launched (Ray's or Slurm's): who it is
    and where the server is, from Weave's environment (``ray_support.WeaveJobEnv``), its process
    group on ``master``, and where it resumes."""
    args = ["--server", env.server, "--token", env.token, "--job", env.job, "--master", master,
            "--port", str(free_port())]
    if env.iterations is not None:
        args += ["--iterations", str(env.iterations)]
    if env.resume_from > 0:
        # Weave relaunched the job after it lost its admission: resume from exactly its count.
        args += ["--resume-from", str(env.resume_from)]
    return args


def roles(a: argparse.Namespace) -> List["tuple[str, str, List[str]]"]:
    """The job's processes: (name, role, extra arguments). Rank 0 of each side is "trainer" and
    "rollout"; with ``--trainers N`` the others are "trainer-1", "rollout-1", ..."""
    out = []
    for role in ("trainer", "rollout"):
        out += [(role if i == 0 else f"{role}-{i}", role, [] if i == 0 else ["--rank-index", str(i)])
                for i in range(a.trainers)]
    return out


def resume_point(a: argparse.Namespace, client) -> int:
    """Waits until Weave runs the job again; returns the iteration it resumes from, after
    checking that the checkpoint holds exactly that iteration."""
    deadline = time.monotonic() + a.resume_timeout_s
    while True:
        view = client.job(a.job)["job"]
        if view["state"] == "running":
            break
        if view["state"] not in ("queued", "preempted") or time.monotonic() > deadline:
            raise SystemExit(f"{a.job}: not running again ({view['state']}) after {a.resume_timeout_s:.0f} s")
        time.sleep(0.5)
    resume = int(view["completed_iterations"])
    resume_at(a.job, a.dir, resume)
    return resume


def start_process(a: argparse.Namespace, cmd: List[str], role: str) -> subprocess.Popen:
    """One of the job's processes: on the mini cluster, on its node, with gloo on the link."""
    if not a.minicluster:
        return subprocess.Popen([*cmd, "--role", role])
    from . import minicluster

    node = "train" if role == "trainer" else "rollout"
    env = dict(os.environ, GLOO_SOCKET_IFNAME=minicluster.LINK_NIC[node], TORCH_CPP_LOG_LEVEL="ERROR")
    return subprocess.Popen([*minicluster.MiniCluster.prefix(node), *cmd, "--role", role], env=env)


def agentic_declaration(a: argparse.Namespace) -> Dict[str, Any]:
    """What an agentic reference job declares: one sandbox per trajectory (``batch``), ``digits``
    tool turns each, the step latency it was told, a cached start; a sandbox is a small
    sleeping process (a hundredth of a core, 20 MB)."""
    return {"batch": a.prompts * a.group, "agentic": {
        "turns": {"short_mean": a.digits, "long_mean": a.digits, "long_share": 0, "max": a.digits},
        "gen_s_per_turn": 0.01, "env": {"dist": "normal", "mean_s": a.env_step_ms / 1000, "sigma_s": a.env_step_ms / 5000},
        "startup": {"cold_s": 0.05, "cached_s": 0.02, "cached_share": 1.0},
        "sandbox": {"cores": 0.01, "mem_gib": 0.02}}}


def launch(a: argparse.Namespace, argv: List[str], start_role=None, relaunched_by_weave: bool = False) -> int:
    """Starts the trainer and the rollout worker and keeps them running: after a lost admission
    or a dead process both start again from the checkpoint Weave's count names. Returns the
    first non-zero exit code of a run that cannot go on. ``start_role(a, cmd, role)`` starts
    one process (default: a local one; the Ray driver starts Ray actors) and returns a handle
    with ``Popen``'s ``pid``, ``poll``, ``kill``, ``wait`` and ``returncode``. With
    ``relaunched_by_weave`` (the Ray driver) a failed run ends the launcher instead: Weave
    launches the job's next admission itself."""
    start_role = start_role or start_process
    from weave_client import WeaveClient

    os.makedirs(a.dir, exist_ok=True)
    for stale in ("resume.json", "died-after-finish"):
        if os.path.exists(os.path.join(a.dir, stale)):
            os.remove(os.path.join(a.dir, stale))
    if a.resume_from is not None:
        # Relaunched by Weave after a lost admission (the Ray backend's WEAVE_RESUME_FROM).
        resume_at(a.job, a.dir, a.resume_from)
    client = WeaveClient(a.server, a.token)
    if a.submit:
        spec: Dict[str, Any] = {"id": a.job, "type": "3B_4k", "iterations": a.iterations, "slo": a.slo}
        if a.rollout_s is not None:
            spec["rollout_s"] = a.rollout_s
        if a.train_s is not None:
            spec["train_s"] = a.train_s
        if a.task == "tool":
            spec.update(agentic_declaration(a))
        client.submit(spec)
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    port, restarts = a.port, 0
    while True:
        uid = client.job(a.job)["job"]["uid"]
        cmd = [sys.executable, "-m", "weave_client.runtime.grpo_job", *argv, "--port", str(port)]
        procs = {name: start_role(a, [*cmd, *extra], role) for name, role, extra in roles(a)}
        with open(os.path.join(a.dir, "pids.json"), "w") as f:
            json.dump({role: p.pid for role, p in procs.items()}, f)
        codes = supervise(procs)
        if all(c == 0 for c in codes.values()):
            shutil.rmtree(staging_dir(a.dir), ignore_errors=True)
            return 0
        if restarts >= a.max_restarts or any(c not in (0, EXIT_RESTART, -9) for c in codes.values()):
            return next(c for c in codes.values() if c != 0)
        restarts += 1
        view = client.job(a.job)["job"]
        if view["state"] == "running" and view["uid"] == uid:
            # Still the same admission: Weave does not know work in flight died with the
            # processes (a finished rollout's trajectories, say), and its gate would hold the
            # job at the phase after it. A new admission runs it from the last completed
            # iteration again.
            client.restart(a.job, f"its processes exited {codes}")
        if relaunched_by_weave:
            return EXIT_RESTART
        resume = resume_point(a, client)
        log_record(log, {"job": a.job, "event": "restart", "iteration": resume, "restart": restarts,
                   "exit_codes": codes})
        # A new process group: the old one's port may still be held by the dead processes' sockets.
        port = free_port()
