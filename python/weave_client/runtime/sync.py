"""Weights from trainers to rollout workers along a plan, versioned and checked, over
``torch.distributed`` (gloo on CPU; NCCL where CUDA is present). This is the one weight-sync
implementation in Python: the reference GRPO job runs it (one trainer and one rollout worker: a
one-transfer plan) and so does ``weave sync bench --gloo-python`` (``plan_sync``, on the plans
``weave-sync`` makes for many GPUs).

A plan is ``weave-sync``'s: which byte ranges go from which training rank to which rollout rank
in stage 1 (across the slow link), and which a rollout rank forwards to which others in stage 2
(the fast side). For one version, every sender of a range sends a header (version, offset,
length, piece size) and the SHA-256 of each piece, then the pieces, all non-blocking; a rollout
rank forwards each piece it holds to the ranks stage 2 names as soon as the piece has landed
(the stages are pipelined, as in ``weave-sync``'s engine), with the header and digests ahead of
it. Every rank checks each piece it receives; then all ranks agree (an all-reduce of the
minimum) whether every piece everywhere checked out, and if not the whole version is sent again
(at most ``MAX_ATTEMPTS`` times). A rollout worker therefore never samples from a half-received
or damaged model: its model changes only in :meth:`ResidentState.load_parameters`, after the
check, between its phases.

Trajectories go the other way (:func:`send_batch` / :func:`recv_batch`), tagged with the
version of the weights that produced them.
"""

import dataclasses
import hashlib
import time
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist

MAX_ATTEMPTS = 3
DIGEST = 32


class SyncError(Exception):
    """A version could not be delivered intact."""


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Bytes ``[offset, offset + length)`` from rank ``src`` to rank ``dst`` in ``stage``."""

    stage: int
    src: int
    dst: int
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class Plan:
    model_bytes: int
    transfers: List[Transfer]

    @staticmethod
    def from_weave(plan: Dict[str, Any]) -> "Plan":
        """``weave-sync``'s plan (``weave sync plan --emit``, or a manifest's ``plan``): training
        GPU ``i`` is rank ``i``, rollout GPU ``j`` rank ``train_gpus + j``."""
        n = plan["train_gpus"]

        def rank(end: Dict[str, Any]) -> int:
            return end["gpu"] + (n if end["side"] == "rollout" else 0)

        transfers = [Transfer(t["stage"], rank(t["from"]), rank(t["to"]), t["offset"], t["len"])
                     for t in plan["transfers"]]
        return Plan(plan["model_bytes"], transfers)

    @staticmethod
    def single(model_bytes: int, src: int = 0, dst: int = 1) -> "Plan":
        """One trainer, one rollout worker: the whole model in one transfer."""
        return Plan(model_bytes, [Transfer(1, src, dst, 0, model_bytes)])


@dataclasses.dataclass
class SyncStats:
    version: int
    bytes: int
    seconds: float
    attempts: int
    # Receivers: seconds until every piece of this rank's stage-1 ranges had checked out.
    stage1_seconds: float = 0.0


@dataclasses.dataclass
class Received:
    version: int
    flat: torch.Tensor
    stats: SyncStats
    refused: int  # attempts refused for a digest mismatch before this one was accepted


def digest(t: torch.Tensor) -> torch.Tensor:
    """SHA-256 of a tensor's bytes, as 32 ``uint8``."""
    raw = hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).digest()
    return torch.tensor(list(raw), dtype=torch.uint8)


def pieces(offset: int, length: int, piece: int):
    at = offset
    while at < offset + length:
        yield at, min(piece, offset + length - at)
        at += piece


class _Attempt:
    """One attempt at one version, from rank ``me``'s side. On each transfer's pair the messages
    are a header, then per piece its digest and its bytes (posted in that order on both sides,
    which is how point-to-point messages match): a sender hashes piece ``k + 1`` while piece
    ``k`` is on the wire, a forwarder passes each piece on as soon as it has checked it."""

    def __init__(self, plan: Plan, me: int, buf: torch.Tensor, piece: int) -> None:
        self.plan, self.me, self.buf, self.piece = plan, me, buf, piece
        self.sends: List[Any] = []
        self.ok = True
        self.out1 = [t for t in plan.transfers if t.stage == 1 and t.src == me]
        self.in1 = [t for t in plan.transfers if t.stage == 1 and t.dst == me]
        self.out2 = [t for t in plan.transfers if t.stage == 2 and t.src == me]
        self.in2 = [t for t in plan.transfers if t.stage == 2 and t.dst == me]

    def send(self, t: Transfer, header: torch.Tensor, corrupt: bool) -> None:
        self.sends.append(dist.isend(header, t.dst))
        for i, (o, n) in enumerate(pieces(t.offset, t.length, self.piece)):
            data = self.buf[o:o + n]
            want = digest(data)
            if corrupt and i == 0:
                # Fault injection: one flipped byte on the wire, never in the sender's copy.
                data = data.clone()
                data[0] ^= 0xFF
            self.sends += [dist.isend(want, t.dst), dist.isend(data, t.dst)]

    def post_receive(self, t: Transfer):
        """Posts every receive of transfer ``t``: (header work, header, [(digest work, digest,
        bytes work, offset, length)])."""
        header = torch.zeros(4, dtype=torch.int64)
        work = dist.irecv(header, t.src)
        parts = []
        for o, n in pieces(t.offset, t.length, self.piece):
            want = torch.zeros(DIGEST, dtype=torch.uint8)
            parts.append((dist.irecv(want, t.src), want, dist.irecv(self.buf[o:o + n], t.src), o, n))
        return work, header, parts

    def land(self, part) -> torch.Tensor:
        """Waits for one piece and checks it; returns its expected digest."""
        dw, want, bw, o, n = part
        dw.wait()
        bw.wait()
        if not torch.equal(digest(self.buf[o:o + n]), want):
            self.ok = False
        return want


def _header(version: int, t: Transfer, piece: int) -> torch.Tensor:
    return torch.tensor([version, t.offset, t.length, piece], dtype=torch.int64)


def _run_attempt(plan: Plan, me: int, buf: torch.Tensor, version: Optional[int], piece: int, corrupt: bool,
                 on_header: Optional[Callable[[int], None]], t0: float):
    """One attempt: this rank's sends, receives and forwards. Returns (version, all checked,
    seconds to stage 1 checked)."""
    a = _Attempt(plan, me, buf, piece)
    incoming1 = [a.post_receive(t) for t in a.in1]
    incoming2 = [a.post_receive(t) for t in a.in2]
    for k, t in enumerate(a.out1):
        a.send(t, _header(version, t, piece), corrupt and k == 0)
    for (work, header, parts), t in zip(incoming1, a.in1):
        work.wait()
        got = int(header[0])
        if on_header is not None:
            on_header(got)
        if version is None:
            version = got
        if got != version or [int(x) for x in header[1:]] != [t.offset, t.length, piece]:
            raise SyncError(f"rank {me}: header {header.tolist()} for a transfer of version {version} {t}")
        forwards = [f for f in a.out2 if f.offset == t.offset and f.length == t.length]
        a.sends += [dist.isend(header, f.dst) for f in forwards]
        for part in parts:
            want = a.land(part)
            _, _, _, o, n = part
            for f in forwards:
                a.sends += [dist.isend(want, f.dst), dist.isend(buf[o:o + n], f.dst)]
    stage1 = time.perf_counter() - t0
    for work, header, parts in incoming2:
        work.wait()
        if version is None:
            version = int(header[0])
        for part in parts:
            a.land(part)
    for w in a.sends:
        w.wait()
    return version, a.ok, stage1


def run(plan: Plan, me: int, buf: torch.Tensor, version: Optional[int] = None, piece: Optional[int] = None,
        corrupt_first: bool = False, on_header: Optional[Callable[[int], None]] = None) -> SyncStats:
    """Runs ``plan`` for one version on rank ``me``; every rank of the plan's world calls it.
    ``buf`` is the model's bytes (``uint8``): the senders' source, the receivers' destination.
    Senders give ``version``; receivers learn it from the first header. ``piece`` bytes go per
    message (default: whole ranges). ``corrupt_first`` flips one byte of this rank's first
    range on the first attempt (fault injection); ``on_header(version)`` runs once a version's
    first header has arrived, before its bytes (fault injection: a receiver that dies mid-sync)."""
    piece = piece or max(plan.model_bytes, 1)
    t0 = time.perf_counter()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        got, ok, stage1 = _run_attempt(plan, me, buf, version, piece, corrupt_first and attempt == 1,
                                       on_header if attempt == 1 else None, t0)
        agreed = torch.tensor([1 if ok else 0], dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        if agreed.item() == 1:
            moved = sum(t.length for t in plan.transfers if t.dst == me or t.src == me)
            return SyncStats(got if got is not None else -1, moved, time.perf_counter() - t0, attempt, stage1)
        version = got
    raise SyncError(f"rank {me}: weights version {version} did not check out in {MAX_ATTEMPTS} attempts")


def send_weights(flat: torch.Tensor, version: int, plan: Plan, me: int = 0, corrupt_first: bool = False) -> SyncStats:
    """Sends ``flat`` (a trainer's parameters) as weights ``version`` along ``plan``."""
    buf = flat.detach().contiguous().view(torch.uint8)
    return run(plan, me, buf, version, corrupt_first=corrupt_first)


def recv_weights(plan: Plan, me: int, on_header: Optional[Callable[[int], None]] = None) -> Received:
    """Receives one version along ``plan`` on rollout rank ``me``: every byte, checked."""
    buf = torch.empty(plan.model_bytes, dtype=torch.uint8)
    stats = run(plan, me, buf, on_header=on_header)
    return Received(stats.version, buf.view(torch.float32), stats, stats.attempts - 1)


def send_batch(batch: Dict[str, torch.Tensor], version: int, dst: int) -> None:
    seq = batch["seq"]
    dist.send(torch.tensor([version, seq.shape[0], seq.shape[1]], dtype=torch.int64), dst)
    dist.send(seq.contiguous(), dst)
    dist.send(batch["reward"].contiguous(), dst)
    dist.send(batch["old_logprob"].contiguous(), dst)


def recv_batch(src: int) -> "tuple[int, Dict[str, torch.Tensor]]":
    header = torch.zeros(3, dtype=torch.int64)
    dist.recv(header, src)
    version, b, length = (int(x) for x in header)
    seq = torch.empty((b, length), dtype=torch.int64)
    dist.recv(seq, src)
    reward = torch.empty(b, dtype=torch.float32)
    dist.recv(reward, src)
    old = torch.empty(b, dtype=torch.float32)
    dist.recv(old, src)
    return version, {"seq": seq, "reward": reward, "old_logprob": old}
