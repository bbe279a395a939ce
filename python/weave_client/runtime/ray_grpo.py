"""The reference GRPO job on Ray: the driver ``weave serve --backend ray`` launches.

Submit the job with a ``launch`` section whose entrypoint runs this module with the job's own
settings (the server, the job's name and token, its nodes and its resume point come from the
``WEAVE_*`` environment Weave gives the driver)::

    {"id": "sort-a", "type": "3B_4k", "iterations": 60,
     "launch": {"entrypoint": "python -m weave_client.runtime.ray_grpo --dir /ck/sort-a --prompts 16"}}

The driver pins one placement group to the job's rollout nodes and one to its training nodes
(``ray_support.pinned_placement_groups``; a co-located job gets one group on its training
nodes for both) and runs the job's two processes as Ray actors in them: ``Trainer`` on the
training node and ``RolloutWorker`` on the rollout node. Each actor runs exactly what
``grpo_job`` runs in a local process (``--role trainer`` / ``--role rollout``), its process
group listening on the training node's address. When an actor dies or the job loses its
admission, the driver stops both, asks Weave for a restart if the admission still stands (so the
lost phase runs again) and exits: Weave launches the next admission, whose driver resumes from
exactly ``WEAVE_RESUME_FROM`` (refused if no checkpoint or staged copy holds it).
"""

import argparse
import os
import subprocess
import sys
from typing import Any, List, Optional

from .. import WeaveClient
from . import grpo_job, supervisor

# Fractions of the job's bundles (the group's jobs share a node's GPUs; the gate decides).
GPUS, CPUS = 0.5, 0.5


class _Role:
    """One of the job's processes, as a Ray actor (Ray names it by its class)."""

    def pid(self) -> int:
        return os.getpid()

    def run(self, argv: List[str]) -> int:
        try:
            grpo_job.main(argv)
            return 0
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else 1


class Trainer(_Role):
    pass


class RolloutWorker(_Role):
    pass


class RayProcess:
    """A ``Popen``-like handle on an actor's ``run`` (what ``supervisor.launch`` supervises)."""

    def __init__(self, actor: Any, argv: List[str]) -> None:
        import ray

        self.actor = actor
        self.pid = ray.get(actor.pid.remote())
        self.ref = actor.run.remote(argv)
        self.returncode: Optional[int] = None

    def _result(self) -> int:
        import ray

        try:
            return int(ray.get(self.ref))
        except ray.exceptions.RayError:
            # The actor died (killed, or its node lost): as a SIGKILLed process would.
            return -9

    def poll(self) -> Optional[int]:
        import ray

        if self.returncode is None and ray.wait([self.ref], timeout=0)[0]:
            self.returncode = self._result()
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        import ray

        if self.returncode is None:
            if not ray.wait([self.ref], timeout=timeout)[0]:
                raise subprocess.TimeoutExpired("ray actor", timeout or 0.0)
            self.returncode = self._result()
        return self.returncode

    def kill(self) -> None:
        import ray

        ray.kill(self.actor)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def main(argv: Optional[List[str]] = None) -> int:
    from ..ray_support import WeaveJobEnv

    env = WeaveJobEnv.from_env()
    # Heartbeats from the driver's start: placing the job on Ray and starting its actors (Ray,
    # torch, the process group) can outlast the server's heartbeat timeout before the trainer's
    # own keepalive begins.
    with WeaveClient(env.server, env.token).keepalive(env.job):
        return _run(env, list(sys.argv[1:] if argv is None else argv))


def _run(env: Any, argv: List[str]) -> int:
    import ray

    from ..ray_support import actor_options, pinned_placement_groups

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=True)
    rollout_pg, train_pg = pinned_placement_groups(env, rollout_gpus=GPUS, training_gpus=GPUS, cpus=CPUS)
    # A co-located job's one group holds both processes: each takes half of its bundle.
    share = 0.5 if env.colocated else 1.0
    master = ray.get(ray.remote(_node_ip).options(**actor_options(train_pg, 0, 0.0, 0.01)).remote())
    remote = {"trainer": (ray.remote(Trainer), train_pg), "rollout": (ray.remote(RolloutWorker), rollout_pg)}

    def start_role(a: argparse.Namespace, cmd: List[str], role: str) -> RayProcess:
        cls, pg = remote[role]
        # Half the bundle's CPU share: the driver's own small task (the master's address) fits beside.
        actor = cls.options(**actor_options(pg, 0, GPUS * share, CPUS * share * 0.5)).remote()
        # cmd is the local launcher's [python, -m, module, *args]: the actor runs the args.
        return RayProcess(actor, [*cmd[3:], "--role", role])

    argv = [*supervisor.launched_job_args(env, master), *argv]
    return supervisor.launch(grpo_job.parse_args(argv), argv, start_role=start_role, relaunched_by_weave=True)


if __name__ == "__main__":
    sys.exit(main())
