"""Weights from a trainer to its rollout worker, versioned and checked, over
``torch.distributed`` (gloo on CPU; NCCL where CUDA is present).

One message per version: a header (version, element count), the SHA-256 of the payload and
the payload (the flat parameters). The receiver checks the digest before anything is
published and answers: accepted, or refused (the sender sends the version again). A rollout
worker therefore never samples from a half-received or damaged model: its model changes only
in :meth:`ResidentState.load_parameters`, after the check, between its phases.

Trajectories go the other way (:func:`send_batch` / :func:`recv_batch`), tagged with the
version of the weights that produced them.
"""

import dataclasses
import hashlib
import time
from typing import Callable, Dict, Optional

import torch
import torch.distributed as dist

MAX_ATTEMPTS = 3


class SyncError(Exception):
    """A version could not be delivered intact."""


@dataclasses.dataclass
class SyncStats:
    version: int
    bytes: int
    seconds: float
    attempts: int


def digest(t: torch.Tensor) -> torch.Tensor:
    raw = hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).digest()
    return torch.tensor(list(raw), dtype=torch.uint8)


def send_weights(flat: torch.Tensor, version: int, dst: int, corrupt_first: bool = False) -> SyncStats:
    """Sends ``flat`` as weights ``version`` to rank ``dst`` until it is accepted.
    ``corrupt_first`` flips one byte of the first attempt (fault injection for tests)."""
    t0 = time.perf_counter()
    flat = flat.detach().contiguous()
    want = digest(flat)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        dist.send(torch.tensor([version, flat.numel()], dtype=torch.int64), dst)
        dist.send(want, dst)
        payload = flat
        if corrupt_first and attempt == 1:
            payload = flat.clone()
            payload.view(torch.uint8)[0] ^= 0xFF
        dist.send(payload, dst)
        answer = torch.zeros(1, dtype=torch.int64)
        dist.recv(answer, dst)
        if answer.item() == 1:
            return SyncStats(version, flat.numel() * flat.element_size(), time.perf_counter() - t0, attempt)
    raise SyncError(f"weights version {version}: refused {MAX_ATTEMPTS} times by rank {dst}")


@dataclasses.dataclass
class Received:
    version: int
    flat: torch.Tensor
    stats: SyncStats
    refused: int  # attempts refused for a digest mismatch before this one was accepted


def recv_weights(src: int, on_header: Optional[Callable[[int], None]] = None) -> Received:
    """Receives one version from rank ``src``; refuses damaged copies until one checks out.
    ``on_header(version)`` runs once a version's header has arrived, before its bytes (fault
    injection: a receiver that dies mid-sync)."""
    t0 = time.perf_counter()
    refused = 0
    while True:
        header = torch.zeros(2, dtype=torch.int64)
        dist.recv(header, src)
        version, n = int(header[0]), int(header[1])
        if on_header is not None:
            on_header(version)
        want = torch.zeros(32, dtype=torch.uint8)
        dist.recv(want, src)
        staged = torch.empty(n, dtype=torch.float32)
        dist.recv(staged, src)
        ok = torch.equal(digest(staged), want)
        dist.send(torch.tensor([1 if ok else 0], dtype=torch.int64), src)
        if ok:
            stats = SyncStats(version, n * 4, time.perf_counter() - t0, refused + 1)
            return Received(version, staged, stats, refused)
        refused += 1
        if refused >= MAX_ATTEMPTS:
            raise SyncError(f"weights version {version} from rank {src}: digest mismatch {refused} times")


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
