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

Each phase reports to Weave its measured duration and, as metadata, the switch it made
(``warm``/``cold`` and seconds), the bytes held in host memory, the sync, the versions used
and the mean reward. Every process also appends the same records to ``--log`` (JSON lines).

Run one job::

    python -m weave_client.runtime.grpo_job --server URL --token T --job sort-a --iterations 400 \\
        --rollout-cpus 0 --train-cpus 1 --port 29511 --dir /tmp/sort-a --submit
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

TRAINER, ROLLOUT = 0, 1
# A process that stopped because the job lost its admission or its peer: run it again.
EXIT_RESTART = 75


class VersionError(Exception):
    """A protocol violation (weights or trajectories of the wrong version): never retried."""


def _args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", default=os.environ.get("WEAVE_TOKEN"))
    ap.add_argument("--job", required=True)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--digits", type=int, default=4)
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
    ap.add_argument("--role", choices=["trainer", "rollout"], help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def cpus(spec: str) -> List[int]:
    out: List[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def checkpoint_path(d: str) -> str:
    return os.path.join(d, "trainer.pt")


def staging_dir(d: str) -> str:
    """Where the trainer stages each acknowledged state in host memory, outside its process
    (tmpfs where there is one, so the bytes are memory, not disk)."""
    import hashlib

    tag = hashlib.sha256(os.path.abspath(d).encode()).hexdigest()[:12]
    base = "/dev/shm" if os.path.isdir("/dev/shm") else d
    return os.path.join(base, f"weave-staging-{tag}")


def staged_path(d: str, version: int) -> str:
    return os.path.join(staging_dir(d), f"trainer-{version % 2}.pt")


def noticed_path(d: str, version: int) -> str:
    """Where the trainer keeps each state durably while its training node is under a notice:
    beside the checkpoint, one copy per version parity (as the staged copies in memory), so a
    host lost in the middle of writing ``k + 1`` leaves ``k`` whole."""
    return os.path.join(d, f"trainer-noticed-{version % 2}.pt")


def resume_file(d: str, iteration: int) -> Optional[str]:
    """The checkpoint, staged copy or copy written under a notice that holds exactly
    ``iteration`` (digest checked), if any."""
    from .resident import CheckpointError, load_checkpoint

    for path in (checkpoint_path(d), staged_path(d, iteration), noticed_path(d, iteration)):
        try:
            if os.path.exists(path) and load_checkpoint(path)["version"] == iteration:
                return path
        except CheckpointError:
            continue
    return None


def _staged_bytes(d: str) -> int:
    s = staging_dir(d)
    return sum(os.path.getsize(os.path.join(s, f)) for f in os.listdir(s)) if os.path.isdir(s) else 0


class NoticeGuard:
    """The trainer's reaction to a preemption notice on its training node (see the module's
    text). ``lock`` is held across each training phase, so the checkpoint written at the
    notice is never written inside one."""

    def __init__(self, a: argparse.Namespace, nodes: List[str], run: Dict[str, Any], log: str) -> None:
        self.a, self.nodes, self.run, self.log = a, set(nodes), run, log
        self.lock = threading.Lock()
        self.noticed: Optional[Dict[str, Any]] = None

    def heard(self, notice: Dict[str, Any]) -> None:
        if notice.get("node") not in self.nodes or self.noticed is not None:
            return
        self.noticed = notice
        _log(self.log, {"job": self.a.job, "role": "trainer", "event": "notice", "node": notice["node"],
                        "iteration": self.run["acked"]})
        if self.lock.acquire(blocking=False):
            try:
                self.protect_acknowledged()
            finally:
                self.lock.release()

    def protect_acknowledged(self) -> None:
        """Copies the acknowledged iteration's staged copy (with its digest) to disk beside the
        checkpoint, unless a file there holds it already."""
        acked = self.run["acked"]
        if acked == 0 or self.run["durable"] >= acked:
            return
        src = resume_file(self.a.dir, acked)
        if src is not None and src != staged_path(self.a.dir, acked):
            self.run["durable"] = acked
        if src != staged_path(self.a.dir, acked):
            return
        t0 = time.perf_counter()
        dest = noticed_path(self.a.dir, acked)
        shutil.copyfile(src, f"{dest}.tmp")
        shutil.copyfile(f"{src}.sha256", f"{dest}.tmp.sha256")
        os.replace(f"{dest}.tmp.sha256", f"{dest}.sha256")
        os.replace(f"{dest}.tmp", dest)
        self.run["durable"] = acked
        _log(self.log, {"job": self.a.job, "role": "trainer", "event": "checkpoint", "iteration": acked,
                        "on_notice": True, "seconds": time.perf_counter() - t0})


def _log(path: str, record: Dict[str, Any]) -> None:
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


def _setup(a: argparse.Namespace, rank: int, cpu_spec: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(len(pin_to(cpus(cpu_spec))))
    from . import minicluster

    master = a.master or (minicluster.link_ip_of_trainer() if a.minicluster else "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{a.port}", rank=rank, world_size=2)


def _configs(a: argparse.Namespace):
    from .policy import GrpoConfig, PolicyConfig

    return PolicyConfig(digits=a.digits, seed=a.seed), GrpoConfig(
        prompts=a.prompts, group=a.group, lr=a.lr, epochs=a.epochs
    )


def run_trainer(a: argparse.Namespace) -> None:
    import torch

    from weave_client import Requeued, WeaveClient

    from .policy import build_policy, make_optimizer
    from .resident import ResidentState
    from .sync import send_weights

    _setup(a, TRAINER, a.train_cpus)
    pcfg, gcfg = _configs(a)

    def build():
        p = build_policy(pcfg)
        return {"policy": p}, {"adam": make_optimizer(p, gcfg)}

    state = ResidentState(f"{a.job}/trainer", build)
    ckpt = checkpoint_path(a.dir)
    cold = state.activate(_start_from(a.dir, ckpt))
    start = state.version
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    _log(log, {"job": a.job, "role": "trainer", "event": "start", "iteration": start, "switch": cold.kind,
               "switch_s": cold.seconds, "bytes": cold.bytes})
    client = WeaveClient(a.server, a.token)
    # pending: (iteration, state) copied in the phase; durable: the newest iteration a file on
    # disk (the checkpoint, a copy written under a notice) holds, as far as this process knows.
    start_file = _start_from(a.dir, ckpt)
    run = {"acked": start, "pending": None, "durable": start if start_file in (ckpt, noticed_path(a.dir, start)) else -1}
    guard = NoticeGuard(a, client.job(a.job)["job"]["training_nodes"], run, log)
    try:
        with client.keepalive(a.job, interval_s=1.0, on_notice=guard.heard):
            first = send_weights(state.parameters_flat(), start, ROLLOUT)
            state.offload()
            _train_loop(a, client, state, ckpt, log, start, run, guard)
    except (Requeued, RuntimeError, OSError) as e:
        # Gloo reports a lost peer as RuntimeError; a lost admission is Requeued.
        _save_acked(state, ckpt, log, a.job, run)
        _log(log, {"job": a.job, "role": "trainer", "event": "interrupted", "iteration": run["acked"],
                   "reason": str(e)[:300]})
        sys.exit(EXIT_RESTART)
    _log(log, {"job": a.job, "role": "trainer", "event": "done", "first_sync_s": first.seconds})
    _teardown()


def _start_from(d: str, ckpt: str) -> Optional[str]:
    """What the trainer loads: after a restart, the file the launcher found holding the
    iteration Weave counts (``resume.json``); at first start the checkpoint, if any."""
    resume = os.path.join(d, "resume.json")
    if os.path.exists(resume):
        with open(resume) as f:
            return json.load(f)["path"]
    return ckpt if os.path.exists(ckpt) else None


def _save_acked(state, ckpt: str, log: str, job: str, run: Dict[str, Any]) -> None:
    """Saves the state of the last acknowledged iteration if the checkpoint lags it: the copy
    taken in its phase, or the resident state when that is exactly the acknowledged version."""
    from .resident import save_checkpoint

    payload = None
    if run["pending"] is not None and run["pending"][0] == run["acked"]:
        payload = run["pending"][1]
    elif state.version == run["acked"] and not state.active:
        state.activate()
        payload = state.snapshot()
        state.offload()
    if payload is not None:
        save_checkpoint(ckpt, payload)
        run["durable"] = run["acked"]
        _log(log, {"job": job, "role": "trainer", "event": "checkpoint", "iteration": run["acked"], "slack": True,
                   "on_interrupt": True})


def _train_loop(a, client, state, ckpt: str, log: str, start: int, run: Dict[str, Any], guard: NoticeGuard) -> None:
    from .resident import save_checkpoint
    from .sync import recv_batch, send_weights

    for k in range(start, a.iterations):
        version, batch = recv_batch(ROLLOUT)
        if version != k:
            raise VersionError(f"{a.job}: trajectories of weights {version} for training {k}")
        held = False
        try:
            with client.phase(a.job, "train", k) as meta:
                guard.lock.acquire()
                held = True
                _train_phase(a, state, batch, k, run, guard, meta)
        finally:
            if held:
                guard.lock.release()
        flat, copy = run.pop("flat"), run.pop("copy")
        run["acked"] = k + 1
        if guard.noticed is not None and run["durable"] < k + 1:
            # The notice came during this phase, after its copy would have been written.
            with guard.lock:
                _write_noticed(a, run, copy, k + 1, log)
        # The sync follows the training phase (the dispatcher's sync step): the rollout
        # worker asks for its next rollout only once the new version has arrived intact.
        synced: Dict[str, Any] = {}
        if k + 1 < a.iterations:
            sync = send_weights(flat, k + 1, ROLLOUT, corrupt_first=a.corrupt_sync_once and k == start)
            synced = {"sync_s": sync.seconds, "sync_bytes": sync.bytes, "sync_attempts": sync.attempts}
        _log(log, {"job": a.job, "role": "trainer", "phase": "train", "iteration": k, **meta, **synced})
        if a.die_after_finish == k and not os.path.exists(os.path.join(a.dir, "died-after-finish")):
            # Fault injection: the trainer dies between an acknowledged finish and its slack
            # checkpoint (once: the restarted trainer goes on).
            open(os.path.join(a.dir, "died-after-finish"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if run["pending"] is not None:
            # Slack: the job's own idle window (its rollout runs), never inside a phase.
            t0 = time.perf_counter()
            save_checkpoint(ckpt, run["pending"][1])
            run["durable"] = max(run["durable"], run["pending"][0])
            _log(log, {"job": a.job, "role": "trainer", "event": "checkpoint", "iteration": run["pending"][0],
                       "seconds": time.perf_counter() - t0, "slack": True})
            run["pending"] = None


def _write_noticed(a, run: Dict[str, Any], copy, version: int, log: Optional[str] = None) -> float:
    """Writes state ``version`` to its file under a notice (``noticed_path``); returns the
    seconds it took, and logs it if given ``log`` (a write after the phase)."""
    from .resident import save_checkpoint

    t0 = time.perf_counter()
    save_checkpoint(noticed_path(a.dir, version), copy)
    run["durable"] = version
    seconds = time.perf_counter() - t0
    if log:
        _log(log, {"job": a.job, "role": "trainer", "event": "checkpoint", "iteration": version, "on_notice": True,
                   "seconds": seconds})
    return seconds


def _train_phase(a, state, batch, k: int, run: Dict[str, Any], guard: NoticeGuard, meta) -> None:
    """Training ``k`` inside its granted phase: the step and the staged copy, and under a notice
    on the training node the checkpoint too, before the phase is reported finished. Leaves the
    new weights and the state's copy in ``run`` (``flat``, ``copy``)."""
    from .policy import train_step
    from .resident import save_checkpoint

    _, gcfg = _configs(a)
    t0 = time.perf_counter()
    sw = state.activate()
    loss = train_step(state.modules["policy"], state.optimizers["adam"], batch, gcfg)
    state.version = k + 1
    run["flat"], run["copy"] = state.parameters_flat(), state.snapshot()
    t_stage = time.perf_counter()
    os.makedirs(staging_dir(a.dir), exist_ok=True)
    save_checkpoint(staged_path(a.dir, k + 1), run["copy"])
    staged_s = time.perf_counter() - t_stage
    noticed: Dict[str, Any] = {}
    if guard.noticed is not None:
        noticed = {"checkpoint_on_notice_s": _write_noticed(a, run, run["copy"], k + 1)}
    if (k + 1) % a.checkpoint_every == 0 or k + 1 == a.iterations:
        run["pending"] = (k + 1, run["copy"])
    off = state.offload()
    meta.update({
        "trajectory_version": k, "new_weights_version": k + 1, "loss": round(loss, 6),
        "switch": sw.kind, "switch_s": sw.seconds, "offload_s": off.seconds, "staged_s": staged_s,
        "host_bytes": state.host_bytes() + _staged_bytes(a.dir), "compute_s": time.perf_counter() - t0,
        **noticed,
    })


def run_rollout(a: argparse.Namespace) -> None:
    import torch

    from weave_client import Requeued

    from .policy import build_policy
    from .resident import ResidentState

    _setup(a, ROLLOUT, a.rollout_cpus)
    pcfg, _ = _configs(a)
    state = ResidentState(f"{a.job}/rollout", lambda: ({"policy": build_policy(pcfg)}, {}))
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    try:
        _rollout_loop(a, state, log)
    except (Requeued, RuntimeError, OSError) as e:
        # Nothing to save: the trainer holds the job's state; a new worker gets it by sync.
        _log(log, {"job": a.job, "role": "rollout", "event": "interrupted", "reason": str(e)[:300]})
        sys.exit(EXIT_RESTART)
    _teardown()


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

    _, gcfg = _configs(a)
    cold = state.activate()
    got = recv_weights(TRAINER)
    state.load_parameters(got.flat, got.version)
    state.offload()
    _log(log, {"job": a.job, "role": "rollout", "event": "start", "iteration": got.version, "switch": cold.kind,
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
        _log(log, {"job": a.job, "role": "rollout", "phase": "rollout", "iteration": k, **meta})
        send_batch(batch, k, TRAINER)
        if k + 1 < a.iterations:
            received = recv_weights(TRAINER, on_header=lambda v: _die_mid_sync(a, v))
            # Published between phases, after the digest check: never a half-updated model.
            state.load_parameters(received.flat, received.version)


def _teardown() -> None:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _supervise(procs: Dict[str, subprocess.Popen]) -> Dict[str, int]:
    """Waits for both processes. Once one has failed, the rollout worker is stopped first (a
    lost peer is how the trainer learns to save and stop), then the trainer gets a minute."""
    while all(p.poll() is None for p in procs.values()):
        time.sleep(0.2)
    if any(p.returncode not in (None, 0) for p in procs.values()):
        if procs["rollout"].poll() is None:
            procs["rollout"].kill()
        try:
            procs["trainer"].wait(timeout=60)
        except subprocess.TimeoutExpired:
            procs["trainer"].kill()
    return {role: p.wait() for role, p in procs.items()}


def _resume_point(a: argparse.Namespace, client) -> int:
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


def resume_at(job: str, d: str, resume: int) -> None:
    """Tells the next trainer to start from exactly iteration ``resume`` (``resume.json``),
    after checking that the checkpoint or a staged copy holds it; refuses (naming both) when
    neither does."""
    from .resident import CheckpointError, load_checkpoint

    ckpt = checkpoint_path(d)
    path = None  # nothing completed: the trainer starts afresh
    if resume > 0:
        path = resume_file(d, resume)
        if path is None:
            try:
                have = f"iteration {load_checkpoint(ckpt)['version']}" if os.path.exists(ckpt) else "iteration 0"
            except CheckpointError as e:
                have = f"unreadable: {e}"
            raise SystemExit(f"{job}: neither its checkpoint {ckpt} ({have}) nor its staged copies in "
                             f"{staging_dir(d)} hold iteration {resume}, which Weave counts completed: resuming "
                             "would repeat or skip acknowledged work")
    with open(os.path.join(d, "resume.json"), "w") as f:
        json.dump({"iteration": resume, "path": path}, f)


def _start_role(a: argparse.Namespace, cmd: List[str], role: str) -> subprocess.Popen:
    """One of the job's processes: on the mini cluster, on its node, with gloo on the link."""
    if not a.minicluster:
        return subprocess.Popen([*cmd, "--role", role])
    from . import minicluster

    node = "train" if role == "trainer" else "rollout"
    env = dict(os.environ, GLOO_SOCKET_IFNAME=minicluster.LINK_NIC[node], TORCH_CPP_LOG_LEVEL="ERROR")
    return subprocess.Popen([*minicluster.MiniCluster.prefix(node), *cmd, "--role", role], env=env)


def launch(a: argparse.Namespace, argv: List[str], start_role=None, relaunched_by_weave: bool = False) -> int:
    """Starts the trainer and the rollout worker and keeps them running: after a lost admission
    or a dead process both start again from the checkpoint Weave's count names. Returns the
    first non-zero exit code of a run that cannot go on. ``start_role(a, cmd, role)`` starts
    one process (default: a local one; the Ray driver starts Ray actors) and returns a handle
    with ``Popen``'s ``pid``, ``poll``, ``kill``, ``wait`` and ``returncode``. With
    ``relaunched_by_weave`` (the Ray driver) a failed run ends the launcher instead: Weave
    launches the job's next admission itself."""
    start_role = start_role or _start_role
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
        client.submit(spec)
    log = a.log or os.path.join(a.dir, "phases.jsonl")
    port, restarts = a.port, 0
    while True:
        uid = client.job(a.job)["job"]["uid"]
        cmd = [sys.executable, "-m", "weave_client.runtime.grpo_job", *argv, "--port", str(port)]
        procs = {role: start_role(a, cmd, role) for role in ("trainer", "rollout")}
        with open(os.path.join(a.dir, "pids.json"), "w") as f:
            json.dump({role: p.pid for role, p in procs.items()}, f)
        codes = _supervise(procs)
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
        resume = _resume_point(a, client)
        _log(log, {"job": a.job, "event": "restart", "iteration": resume, "restart": restarts,
                   "exit_codes": codes})
        # A new process group: the old one's port may still be held by the dead processes' sockets.
        port = _free_port()


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = _args(argv)
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
