"""Where the reference job's trainer keeps its state between phases and across restarts: the
checkpoint, the copies staged in host memory (one per version parity), the copies written
under a preemption notice, and the file a restart resumes from (see ``grpo_job``'s text)."""

import argparse
import json
import os
import shutil
import threading
import time
from typing import Any, Dict, List, Optional

from .job_process import log_record


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


def staged_bytes(d: str) -> int:
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
        log_record(self.log, {"job": self.a.job, "role": "trainer", "event": "notice", "node": notice["node"],
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
        log_record(self.log, {"job": self.a.job, "role": "trainer", "event": "checkpoint", "iteration": acked,
                        "on_notice": True, "seconds": time.perf_counter() - t0})


def start_from(d: str, ckpt: str) -> Optional[str]:
    """What the trainer loads: after a restart, the file the launcher found holding the
    iteration Weave counts (``resume.json``); at first start the checkpoint, if any."""
    resume = os.path.join(d, "resume.json")
    if os.path.exists(resume):
        with open(resume) as f:
            return json.load(f)["path"]
    return ckpt if os.path.exists(ckpt) else None


def save_acked(state, ckpt: str, log: str, job: str, run: Dict[str, Any]) -> None:
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
        log_record(log, {"job": job, "role": "trainer", "event": "checkpoint", "iteration": run["acked"], "slack": True,
                   "on_interrupt": True})


def write_noticed(a, run: Dict[str, Any], copy, version: int, log: Optional[str] = None) -> float:
    """Writes state ``version`` to its file under a notice (``noticed_path``); returns the
    seconds it took, and logs it if given ``log`` (a write after the phase)."""
    from .resident import save_checkpoint

    t0 = time.perf_counter()
    save_checkpoint(noticed_path(a.dir, version), copy)
    run["durable"] = version
    seconds = time.perf_counter() - t0
    if log:
        log_record(log, {"job": a.job, "role": "trainer", "event": "checkpoint", "iteration": version, "on_notice": True,
                   "seconds": seconds})
    return seconds


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
