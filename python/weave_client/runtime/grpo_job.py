"""The reference RL job: GRPO on the digit-sorting task, as two processes under Weave's gate.

A trainer (rank 0) and a rollout worker (rank 1) run as separate processes, each pinned to
its own CPU set (its "node"), joined by ``torch.distributed`` (gloo). Iteration ``k``:

1. the rollout worker waits for the gate's rollout ``k``, activates its copy of the weights
   (warm from host memory), samples with weights version ``k``, offloads, and sends the
   trajectories (tagged with version ``k``) to the trainer;
2. the trainer waits for the gate's training ``k``, activates weights and optimizer state,
   refuses trajectories of any other version, takes the GRPO step and offloads; once the
   phase is reported finished it sends weights ``k + 1`` (digest-checked, re-sent if
   refused): the sync step between training and the next rollout;
3. in its own idle window, outside any granted phase, the trainer writes a checkpoint every
   ``--checkpoint-every`` iterations (the copy was taken inside the phase; the disk write is
   slack work), and the rollout worker publishes the received weights into its host copy.

Inside every training phase, before the phase is reported, the trainer also stages the new
state in host memory outside its own process (``/dev/shm``, one copy per version parity, so
the copies of iterations ``k`` and ``k + 1`` are both there while ``k + 1`` is being
reported): a trainer killed at any moment, between a finish Weave acknowledged and the next
checkpoint too, resumes from exactly the iteration Weave counts. The staged copies are host
memory and counted in the bytes the trainer reports. (A lost training node loses them with
the host; that case needs a checkpoint of the acknowledged iteration, which the trainer writes
when it was told of the loss in advance: see the notice below.)

A preemption notice on the job's training node (in a heartbeat's answer) means the host, and
the staged copies in its memory, will go: from then on the trainer writes each training's
state to disk inside the phase, before reporting it finished (the phase runs longer by the
write; durability comes first now), one file per version parity beside the checkpoint
(``noticed_path``) as the staged copies are in memory, so a host lost mid-write leaves the
previous one whole; and at once the iteration already acknowledged (its staged copy) if no
training phase is running. So no iteration Weave counts exists only in memory that is about
to be lost. The job has one rollout process, so a notice on its rollout
node leaves nothing to move: its rollout in flight is lost with the node, and the iteration
runs again after the re-admission.

When the job loses its admission (its node is lost, it is preempted or moved: the gate
raises ``Requeued``) or one of its processes dies, the surviving process saves what it holds of
the last acknowledged iteration and exits; the launcher waits until Weave runs the job again
and starts both processes afresh, which resume cold from the checkpoint of exactly the
iteration Weave counts as completed (it refuses to go on from any other).

With ``--trainers N --sync-plan FILE`` the job runs N trainer ranks and N rollout workers
(``job_process``): data-parallel training (each trainer on its own worker's batch, gradients
averaged), each worker sampling ``1/N`` of the prompts, rank 0 and rank N alone talking to the
gate; the weights move along the plan in FILE (``weave sync plan --emit topology-aware
--model-bytes B --train-gpus N --rollout-gpus N --gpus-per-node N``), every rank checking what
it receives. The fault scenarios run the one-trainer form.

With ``--task tool --env IP:PORT[,...]`` the job is agentic (``tool_task``): its policy must
look values up in sandboxes (one process per trajectory on the environment nodes,
``sandbox_host``), each rollout's sandboxes are started once the previous rollout's
trajectories are sent (during the training), a trajectory whose environment node is lost runs
again on another, and each rollout's finish reports its environments (``meta.agentic``). It
submits itself with an ``agentic`` declaration (``supervisor.agentic_declaration``).

Each phase reports to Weave its measured duration and, as metadata, the switch it made
(``warm``/``cold`` and seconds), the bytes held in host memory, the sync, the versions used
and the mean reward. Every process also appends the same records to ``--log`` (JSON lines).

Run one job::

    python -m weave_client.runtime.grpo_job --server URL --token T --job sort-a --iterations 400 \\
        --rollout-cpus 0 --train-cpus 1 --port 29511 --dir /tmp/sort-a --submit
"""

import argparse
import os
import sys
from typing import List, Optional

from .rollout_worker import run_rollout
from .supervisor import launch
from .trainer import run_trainer


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", default=os.environ.get("WEAVE_TOKEN"))
    ap.add_argument("--job", required=True)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--task", choices=["sort", "tool"], default="sort",
                    help="sort digits, or the agentic task: look values up with a tool in sandboxes (tool_task)")
    ap.add_argument("--digits", type=int, default=4, help="digits to sort, or keys to look up (--task tool)")
    ap.add_argument("--env", help="--task tool: the environment nodes' sandbox hosts, IP:PORT[,IP:PORT...]")
    ap.add_argument("--env-step-ms", type=float, default=50.0,
                    help="--task tool: the environment step the submission declares (the hosts inject theirs)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=1, help="GRPO passes over each batch (PPO-style clipping)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--rollout-cpus", default="0", help="CPU set of the rollout node, e.g. 0 or 0-1")
    ap.add_argument("--train-cpus", default="1", help="CPU set of the training node")
    ap.add_argument("--port", type=int, required=True, help="TCP port for the job's process group")
    ap.add_argument("--dir", required=True, help="the job's checkpoint and log directory")
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--log", help="JSON lines of every phase (default: DIR/phases.jsonl)")
    ap.add_argument("--submit", action="store_true", help="submit the job to Weave first")
    ap.add_argument("--slo", type=float, default=2.0)
    ap.add_argument("--rollout-s", type=float, help="declared rollout seconds (placement estimate)")
    ap.add_argument("--train-s", type=float, help="declared training seconds (placement estimate)")
    ap.add_argument("--corrupt-sync-once", action="store_true", help="fault injection: damage the first sync")
    ap.add_argument("--die-after-finish", type=int, metavar="K",
                    help="fault injection: the trainer SIGKILLs itself once, after training K is acknowledged and "
                         "before its slack checkpoint")
    ap.add_argument("--die-mid-sync", type=int, metavar="K",
                    help="fault injection: the rollout worker SIGKILLs itself once, mid-way through receiving "
                         "weights version K (its header in, its bytes not)")
    ap.add_argument("--minicluster", action="store_true",
                    help="run the trainer and the rollout worker on the mini cluster's nodes (minicluster.py): "
                         "weights cross its rate-limited link")
    ap.add_argument("--master", help="address the trainer's process group listens on (default: loopback, or the "
                    "mini cluster's link); the Ray driver sets it to the training node's")
    ap.add_argument("--resume-from", type=int, help="start from exactly this iteration, as Weave counts it "
                    "(a relaunch after a lost admission; refused if no checkpoint holds it)")
    ap.add_argument("--max-restarts", type=int, default=5, help="process restarts after a lost admission or peer")
    ap.add_argument("--resume-timeout-s", type=float, default=900.0, help="how long to wait to be admitted again")
    ap.add_argument("--trainers", type=int, default=1,
                    help="trainer ranks, and as many rollout workers (data-parallel; needs --sync-plan above 1)")
    ap.add_argument("--sync-plan", metavar="FILE",
                    help="the weights' plan (`weave sync plan --emit KIND --model-bytes B --train-gpus N "
                         "--rollout-gpus N --gpus-per-node N`); default: the one transfer of a 1 -> 1 job")
    ap.add_argument("--role", choices=["trainer", "rollout"], help=argparse.SUPPRESS)
    ap.add_argument("--rank-index", type=int, default=0, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if a.trainers < 1 or a.prompts % a.trainers:
        raise SystemExit(f"--trainers {a.trainers}: at least 1, and dividing --prompts ({a.prompts})")
    if (a.task == "tool") != bool(a.env):
        raise SystemExit("--env: the sandbox hosts, needed by --task tool and by nothing else")
    if a.role == "trainer":
        run_trainer(a)
        return 0
    if a.role == "rollout":
        run_rollout(a)
        return 0
    argv = [x for x in argv if x != "--submit"]
    return launch(a, argv)


if __name__ == "__main__":
    sys.exit(main())
