"""The reference GRPO job on Slurm: the batch script ``weave serve --backend slurm`` launches.

Submit the job with a ``launch`` section whose entrypoint runs this module with the job's own
settings (the server, the job's name and token, its nodes and its resume point come from the
``WEAVE_*`` environment Weave gives the batch job)::

    {"id": "sort-a", "type": "3B_4k", "iterations": 60,
     "launch": {"entrypoint": "python -m weave_client.runtime.slurm_grpo --dir /ck/sort-a --prompts 16"}}

Weave pins the batch job to the job's nodes (``--nodelist``: its rollout and training nodes);
this driver runs on the first of them and starts the job's two processes as job steps with
``srun``, each on its node: the trainer on the training node, the rollout worker on the
rollout node (on the training node when Weave co-locates the job). The trainer's process group
listens on the training node's address (Slurm's ``NodeAddr``). When a step dies or the job
loses its admission, the driver stops both, asks Weave for a restart if the admission still
stands, and exits: Weave launches the next admission as a new batch job, whose driver resumes
from exactly ``WEAVE_RESUME_FROM``.
"""

import argparse
import re
import subprocess
import sys
from typing import List, Optional

from .. import WeaveClient
from . import grpo_job, supervisor


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (its ``NodeAddr``)."""
    out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"\bNodeAddr=(\S+)", out)
    if not found:
        raise SystemExit(f"slurm_grpo: `scontrol show node {node}` names no NodeAddr: {out.strip()!r}")
    return found.group(1)


def step_command(node: str, cmd: List[str], role: str) -> List[str]:
    """``srun`` for one of the job's processes: one task on ``node``, beside the other step
    (``--overlap``), the step ended if its process fails."""
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap", "--kill-on-bad-exit=1",
            f"--job-name={role}", *cmd, "--role", role]


def main(argv: Optional[List[str]] = None) -> int:
    from ..ray_support import WeaveJobEnv

    env = WeaveJobEnv.from_env()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Heartbeats from the driver's start: starting the steps (Python, torch, the process group)
    # can outlast the server's heartbeat timeout before the trainer's own keepalive begins.
    with WeaveClient(env.server, env.token).keepalive(env.job):
        train_node = env.training_nodes[0]
        rollout_node = train_node if env.colocated else env.rollout_nodes[0]
        nodes = {"trainer": train_node, "rollout": rollout_node}

        def start_role(a: argparse.Namespace, cmd: List[str], role: str) -> subprocess.Popen:
            return subprocess.Popen(step_command(nodes[role], cmd, role))

        argv = [*supervisor.launched_job_args(env, node_address(train_node)), *argv]
        print(f"slurm_grpo: {env.job} (uid {env.uid}) on {nodes}, resuming from {env.resume_from}", flush=True)
        return supervisor.launch(grpo_job.parse_args(argv), argv, start_role=start_role, relaunched_by_weave=True)


if __name__ == "__main__":
    sys.exit(main())
