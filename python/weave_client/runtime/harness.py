"""What the real-jobs experiment and its fault scenarios share: ``weave serve`` on fixed pools
of one node each, the GRPO jobs' command lines, and the checks every run makes of the event log
(every iteration trained once, each rollout on its own weights, each training on its own
trajectories)."""

import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

TOKEN = "experiment-admin-token"


def say(msg: str) -> None:
    print(msg, flush=True)


class Serve:
    """``weave serve`` on fixed pools of one rollout and one training node, and ``env_nodes``
    environment nodes (each the machine's two cores, shared with the other nodes)."""

    def __init__(self, weave: str, work: str, ip: str, env_nodes: int = 0) -> None:
        self.weave, self.work, self.ip = weave, work, ip
        config = subprocess.run([weave, "config", "show"], check=True, capture_output=True, text=True).stdout
        self.cluster = os.path.join(work, "cluster.toml")
        with open(self.cluster, "w") as f:
            f.write(re.sub(r"(?m)^nodes = \d+$", "nodes = 1", config))
            if env_nodes:
                f.write(f"\n[env]\nnodes = {env_nodes}\ncores_per_node = 2\nmem_gib_per_node = 4.0\n"
                        "price_per_vcpu_hour = 0.05\n")
        digest = subprocess.run([weave, "token", "hash", TOKEN], check=True, capture_output=True, text=True).stdout
        self.tenants = os.path.join(work, "tenants.toml")
        with open(self.tenants, "w") as f:
            f.write(f'[[tenant]]\nname = "ops"\ntoken_sha256 = "{digest.strip()}"\nadmin = true\n')
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""

    def start(self) -> str:
        """Starts the server; again on the same address and store after :meth:`kill`."""
        addr = self.url[len("http://"):] if self.url else f"{self.ip}:0"
        # The paper's placement: the experiment measures a disaggregated pair against its
        # members' solo runs (full Weave could run a lone job co-located and move it later).
        cmd = [self.weave, "serve", "--addr", addr, "--fixed-capacity", "--disagg-only", "--cluster", self.cluster,
               "--tenants", self.tenants, "--data", os.path.join(self.work, "data"), "--heartbeat-timeout-s", "120"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"weave serve did not start: {line!r}")
        self.url = "http://" + line.split()[1]
        return self.url

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush beyond what was acknowledged."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


JOBS = {
    # Long generation (8 digits), one update pass: rollout-heavy.
    "A": ["--digits", "8", "--epochs", "1"],
    # Short generation (4 digits), five clipped update passes: training-heavy.
    "B": ["--digits", "4", "--epochs", "5"],
}


# The agentic pair (--task tool): A waits long on its environment (50 ms steps), one update
# pass; B's steps are short and it takes sixteen update passes: training-heavy.
TOOL_JOBS = {
    "A": ["--task", "tool", "--digits", "3", "--epochs", "1", "--lr", "1e-3", "--env-step-ms", "50"],
    "B": ["--task", "tool", "--digits", "2", "--epochs", "16", "--lr", "1e-3", "--env-step-ms", "10"],
}


def job_args(a, kind: str) -> List[str]:
    """What makes job ``kind`` of the experiment's pair (``--task`` chooses which pair)."""
    if getattr(a, "task", "sort") == "tool":
        return [*TOOL_JOBS[kind], "--env", ",".join(a.env_addrs)]
    return JOBS[kind]


def reference_cmd(a, url: str, name: str, iterations: int, port: int) -> List[str]:
    """The reference job's command line on the experiment's nodes (every run of it starts here)."""
    return [sys.executable, "-W", "ignore", "-m", "weave_client.runtime.grpo_job", "--server", url,
            "--token", TOKEN, "--job", name, "--iterations", str(iterations), "--rollout-cpus", a.rollout_cpus,
            "--train-cpus", a.train_cpus, "--port", str(port), "--dir", os.path.join(a.work, name),
            *(["--minicluster"] if a.shaped_link is not None else [])]


def job_cmd(a, url: str, name: str, kind: str, port: int, extra: List[str]) -> List[str]:
    return [*reference_cmd(a, url, name, a.iterations, port), "--prompts", str(a.prompts), *job_args(a, kind),
            *extra]


def start_jobs(cmds: List[List[str]]) -> List["tuple[List[str], subprocess.Popen]"]:
    return [(c, subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)) for c in cmds]


def wait_jobs(jobs: List["tuple[List[str], subprocess.Popen]"]) -> None:
    for c, p in jobs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"job failed ({' '.join(c[4:12])}):\n{out[-4000:]}")


def run_jobs(cmds: List[List[str]]) -> None:
    wait_jobs(start_jobs(cmds))


def wait_until(ready, timeout_s: float) -> None:
    """Polls ``ready`` every 0.2 s; the deadline only bounds a hang."""
    deadline = time.time() + timeout_s
    while not ready():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s")
        time.sleep(0.2)


def phases(work: str, name: str) -> List[Dict[str, Any]]:
    with open(os.path.join(work, name, "phases.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_versions(events: List[Dict[str, Any]], name: str, n: int) -> None:
    """Every iteration trained once, each rollout on its own weights, each training on its
    own trajectories."""
    fin = [e for e in events if e["job"] == name and e["kind"] == "finish"]
    trained = sorted(e["iteration"] for e in fin if e["phase"] == "train")
    assert trained == list(range(n)), f"{name}: trained iterations {trained}"
    for e in fin:
        k, meta = e["iteration"], e.get("meta") or {}
        if e["phase"] == "rollout":
            assert meta.get("weights_version") == k, f"{name}: rollout {k} used {meta}"
        else:
            assert meta.get("trajectory_version") == k and meta.get("new_weights_version") == k + 1, \
                f"{name}: training {k} consumed {meta}"
