"""The agentic side of the real-jobs experiment (``experiment --task tool``): sandbox hosts on
the environment nodes, what an agentic job of the pair declares, and an environment node lost
mid-run.

The environment nodes are network namespaces of the mini cluster (``minicluster.env_ns``), or
loopback ports without one. With two cores the machine has no CPU to give them alone: their
sandboxes run on the rollout node's CPU set, so a sandbox's work competes with generation (the
steps themselves are mostly injected sleeps: see ``sandbox_host``).
"""

import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from . import minicluster
from .harness import check_versions, job_args, job_cmd, phases, say, start_jobs, wait_jobs, wait_until
from .job_process import cpus

PORT = 7100


class EnvHosts:
    """One ``sandbox_host`` per environment node; :meth:`lose` kills a node's host and every
    sandbox it forked (the node's processes), as a lost machine takes them."""

    def __init__(self, n: int, on_minicluster: bool, cpu_spec: str) -> None:
        self.n, self.on_minicluster, self.cpu_spec = n, on_minicluster, cpu_spec
        self.procs: List[Optional[subprocess.Popen]] = []
        self.addrs: List[str] = []

    def __enter__(self) -> "EnvHosts":
        for i in range(self.n):
            ip = minicluster.env_ip(i) if self.on_minicluster else "127.0.0.1"
            addr = f"{ip}:{PORT + i}"
            prefix = minicluster.MiniCluster.prefix(f"env{i}") if self.on_minicluster else []
            want = set(cpus(self.cpu_spec))
            p = subprocess.Popen([*prefix, sys.executable, "-m", "weave_client.runtime.sandbox_host", "--addr", addr],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True,
                                 preexec_fn=lambda: os.sched_setaffinity(0, want))
            line = p.stdout.readline().strip()
            if not line.startswith("listening"):
                raise RuntimeError(f"sandbox host on environment node {i} did not start: {line!r}")
            self.procs.append(p)
            self.addrs.append(addr)
        return self

    def lose(self, i: int) -> None:
        p = self.procs[i]
        if p is not None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
            self.procs[i] = None

    def __exit__(self, *exc) -> None:
        for i in range(self.n):
            self.lose(i)


def declaration(a, kind: str) -> Dict[str, Any]:
    """What job ``kind`` of the agentic pair declares when it submits itself (the co-executed
    submission carries the same)."""
    from .grpo_job import parse_args
    from .supervisor import agentic_declaration

    ja = parse_args(["--server", "x", "--job", "x", "--port", "1", "--dir", "x", "--prompts", str(a.prompts),
                     *job_args(a, kind)])
    return agentic_declaration(ja)


def environment_stats(logs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A job's rollouts' environment reports: trajectories each, re-run and lost sandboxes."""
    env = [r["env_stats"] for r in logs if r.get("phase") == "rollout"]
    return {"trajectories": sorted({e["trajectories"] for e in env}), "rerun": sum(e["rerun"] for e in env),
            "rollouts_with_rerun": sum(e["rerun"] > 0 for e in env),
            "env_step_s": sum(e["env_s"] for e in env) / max(sum(e["turns"] for e in env), 1)}


def env_node_lost(a, serve, ops, hosts: EnvHosts) -> Dict[str, Any]:
    """One agentic job; environment node 0 is lost (its host and sandboxes SIGKILLed) during a
    rollout halfway: the trajectories it held run again on the other node, each rollout still
    holds every trajectory exactly once, and every iteration is trained once."""
    name = "env-lost"
    job = start_jobs([job_cmd(a, serve.url, name, "A", 29660, ["--submit"])])
    log = os.path.join(a.work, name, "phases.jsonl")

    def trained() -> int:
        if not os.path.exists(log):
            return 0
        return sum(r.get("phase") == "train" for r in phases(a.work, name))

    wait_until(lambda: trained() >= a.iterations // 2, 900)
    time.sleep(0.05)  # into the next rollout, which follows the sync at once
    hosts.lose(0)
    lost_after = trained()
    say(f"environment node 0 lost after training {lost_after} of {name}")
    wait_jobs(job)
    check_versions(ops.events(), name, a.iterations)
    logs = phases(a.work, name)
    stats = environment_stats(logs)
    batch = a.prompts * 8
    assert stats["trajectories"] == [batch], f"{name}: rollouts held {stats['trajectories']} trajectories, not {batch}"
    rewards = [r["mean_reward"] for r in logs if r.get("phase") == "rollout"]
    return {"lost_after_training": lost_after, **stats, "batch": batch,
            "reward_first": rewards[0], "reward_last": rewards[-1]}


def rows(o: Dict[str, Any]) -> List["tuple[str, str]"]:
    """The experiment's report rows for the agentic pair and a lost environment node."""
    out = []
    for k, e in o["rounds"][0]["environment"].items():
        m = (e or {}).get("measured")
        if not m:
            out.append((f"agentic job {k}: environment", "not reported"))
            continue
        out.append((f"agentic job {k}: turns / env step s / start-up s per trajectory, measured (declared)",
                    f"{m['turns_per_trajectory']:.2f} ({e['declared_turns_per_trajectory']:.2f}) / "
                    f"{m['env_step_s']:.4f} ({e['declared_env_step_median_s']:.4f}) / "
                    f"{m['startup_s_per_trajectory']:.4f}; {e['sandboxes']} sandboxes"))
    if "env_node_lost" in o:
        el = o["env_node_lost"]
        out.append(("environment node lost mid-rollout: trajectories re-run (rollouts)",
                    f"{el['rerun']} ({el['rollouts_with_rerun']}); every rollout held {el['trajectories']} of "
                    f"{el['batch']}, every iteration trained once; reward {el['reward_first']:.3f} to "
                    f"{el['reward_last']:.3f}"))
    return out
