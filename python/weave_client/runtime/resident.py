"""A job's state on one node, kept warm in host memory between its phases.

While the job holds a phase its tensors are active on the device; when it yields they are
offloaded into one host buffer (pinned, with non-blocking copies, where CUDA is present; on
CPU the working copies are released, so the bytes held are the host buffer's and nothing
else). Activating again is a warm switch: one copy back. A state that is not resident (first
start, after a move or a restart) is loaded cold from its checkpoint: read from disk, checked
against its digest and rebuilt. Both are timed and returned as :class:`Switch`.

Checkpoints are written with ``torch.save`` beside a SHA-256 of the file, atomically (a
temporary file renamed into place), so a damaged or half-written checkpoint is refused with a
clear error instead of being loaded.
"""

import copy
import dataclasses
import hashlib
import os
import time
from typing import Callable, Dict, List, Optional

import torch


class CheckpointError(Exception):
    """A checkpoint is missing, damaged or of another state; the message names the file."""


@dataclasses.dataclass
class Switch:
    kind: str  # "warm", "cold", "offload", or "none" (nothing to do)
    seconds: float
    bytes: int


def _tensors(modules: Dict[str, torch.nn.Module], optimizers: Dict[str, torch.optim.Optimizer]) -> List[torch.Tensor]:
    """Every tensor of the state, in a fixed order: parameters, buffers, optimizer state."""
    out: List[torch.Tensor] = []
    for name in sorted(modules):
        out.extend(p.data for p in modules[name].parameters())
        out.extend(b for b in modules[name].buffers())
    for name in sorted(optimizers):
        opt = optimizers[name]
        for group in opt.param_groups:
            for p in group["params"]:
                for key in sorted(opt.state.get(p, {})):
                    v = opt.state[p][key]
                    if torch.is_tensor(v) and v.numel() > 0:
                        out.append(v)
    return out


class ResidentState:
    """Modules and optimizers of one job on one node.

    ``build`` makes a fresh state (modules and optimizers, as at process start); it is what a
    cold load rebuilds before reading the checkpoint.
    """

    def __init__(
        self,
        name: str,
        build: Callable[[], "tuple[Dict[str, torch.nn.Module], Dict[str, torch.optim.Optimizer]]"],
        device: str = "cpu",
    ) -> None:
        self.name = name
        self.build = build
        self.device = torch.device(device)
        self.modules: Dict[str, torch.nn.Module] = {}
        self.optimizers: Dict[str, torch.optim.Optimizer] = {}
        self.host: Optional[torch.Tensor] = None  # the offloaded bytes, one flat buffer
        self.active = False
        self.version = 0
        self._storage_bytes: List[int] = []

    # -- what is held -------------------------------------------------------------------

    @property
    def resident(self) -> bool:
        return self.active or self.host is not None

    def host_bytes(self) -> int:
        """Bytes this state holds in host memory while offloaded (0 while active)."""
        return 0 if self.host is None else self.host.numel() * self.host.element_size()

    def state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in _tensors(self.modules, self.optimizers))

    # -- switches -----------------------------------------------------------------------

    def offload(self) -> Switch:
        """Copies the state into the host buffer and releases the working copies."""
        if not self.active:
            return Switch("none", 0.0, self.host_bytes())
        t0 = time.perf_counter()
        tensors = _tensors(self.modules, self.optimizers)
        total = sum(t.numel() for t in tensors)
        cuda = self.device.type == "cuda"
        if self.host is None or self.host.numel() != total:
            # Pinned host memory only where a driver exists: pin_memory raises without one.
            self.host = torch.empty(total, dtype=torch.float32, pin_memory=cuda)
        offset = 0
        for t in tensors:
            n = t.numel()
            self.host[offset : offset + n].view_as(t).copy_(t, non_blocking=cuda)
            offset += n
        if cuda:
            torch.cuda.synchronize(self.device)
        # Release the working copies: each storage shrinks to nothing until activation.
        self._storage_bytes = [t.untyped_storage().nbytes() for t in tensors]
        for t in tensors:
            t.untyped_storage().resize_(0)
        self.active = False
        return Switch("offload", time.perf_counter() - t0, self.host_bytes())

    def activate(self, checkpoint: Optional[str] = None) -> Switch:
        """Makes the state active: warm from the host buffer if resident, else cold from
        ``checkpoint`` (or freshly built when there is none: a job's very first start)."""
        if self.active:
            return Switch("none", 0.0, 0)
        t0 = time.perf_counter()
        if self.host is not None:
            self._restore_from_host()
            kind = "warm"
        else:
            self._build_cold(checkpoint)
            kind = "cold"
        self.active = True
        return Switch(kind, time.perf_counter() - t0, self.state_bytes())

    def _restore_from_host(self) -> None:
        assert self.host is not None
        cuda = self.device.type == "cuda"
        offset = 0
        tensors = _tensors(self.modules, self.optimizers)
        for t, nbytes in zip(tensors, self._storage_bytes):
            if t.untyped_storage().nbytes() < nbytes:
                t.untyped_storage().resize_(nbytes)
        for t in tensors:
            n = t.numel()
            t.copy_(self.host[offset : offset + n].view_as(t), non_blocking=cuda)
            offset += n
        if cuda:
            torch.cuda.synchronize(self.device)
        # The buffer stays allocated: the next offload reuses it (residency is kept).

    def _build_cold(self, checkpoint: Optional[str]) -> None:
        self.modules, self.optimizers = self.build()
        for m in self.modules.values():
            m.to(self.device)
        if checkpoint is not None:
            saved = load_checkpoint(checkpoint)
            if saved.get("name") != self.name:
                raise CheckpointError(f"{checkpoint}: a checkpoint of `{saved.get('name')}`, not `{self.name}`")
            for k, m in self.modules.items():
                m.load_state_dict(saved["modules"][k])
            for k, o in self.optimizers.items():
                o.load_state_dict(saved["optimizers"][k])
                # Loaded tensors may sit in storage that cannot be released and regrown
                # (what offload does): give each its own.
                for st in o.state.values():
                    for key, v in st.items():
                        if torch.is_tensor(v):
                            st[key] = v.clone()
            self.version = int(saved["version"])

    def load_parameters(self, flat: torch.Tensor, version: int) -> None:
        """Publishes new weights (already checked): into the working copy if active, else into
        the host buffer the next activation restores from. The version changes last."""
        params = [p for name in sorted(self.modules) for p in self.modules[name].parameters()]
        n = sum(p.numel() for p in params)
        if flat.numel() != n:
            raise ValueError(f"{self.name}: {flat.numel()} weights received, the model has {n}")
        if self.active:
            # Copied in place: each parameter keeps its own storage (offload releases it).
            offset = 0
            with torch.no_grad():
                for p in params:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
        elif self.host is not None:
            # Parameters come first in the host buffer (see ``_tensors``).
            self.host[:n].copy_(flat)
        else:
            raise RuntimeError(f"{self.name}: weights for a state that is not resident")
        self.version = version

    def parameters_flat(self) -> torch.Tensor:
        """The active parameters as one flat CPU tensor (what a sync sends)."""
        params = [p for name in sorted(self.modules) for p in self.modules[name].parameters()]
        return torch.nn.utils.parameters_to_vector(params).detach().cpu().clone()

    def drop(self) -> None:
        """Forgets the state (the job moved away or its node was lost): the next activation
        is cold."""
        self.modules, self.optimizers, self.host, self.active = {}, {}, None, False

    # -- checkpoints --------------------------------------------------------------------

    def save(self, path: str, extra: Optional[dict] = None) -> float:
        """Writes the active state to ``path`` atomically; returns the seconds it took."""
        if not self.active:
            raise RuntimeError(f"{self.name}: save needs the state active")
        t0 = time.perf_counter()
        save_checkpoint(path, self.snapshot(extra))
        return time.perf_counter() - t0

    def snapshot(self, extra: Optional[dict] = None) -> dict:
        """The active state as a checkpoint payload, copied into host memory: cheap enough to
        take inside a phase, written to disk later (:func:`save_checkpoint`) in the slack."""
        if not self.active:
            raise RuntimeError(f"{self.name}: a snapshot needs the state active")
        return {
            "name": self.name,
            "version": self.version,
            "modules": {k: {n: t.detach().clone() for n, t in m.state_dict().items()} for k, m in self.modules.items()},
            "optimizers": {k: copy.deepcopy(o.state_dict()) for k, o in self.optimizers.items()},
            "extra": extra or {},
        }


def save_checkpoint(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp"
    torch.save(payload, tmp)
    digest = _sha256(tmp)
    with open(f"{tmp}.sha256", "w") as f:
        f.write(digest + "\n")
    os.replace(f"{tmp}.sha256", f"{path}.sha256")
    os.replace(tmp, path)


def load_checkpoint(path: str) -> dict:
    """Reads a checkpoint after checking its digest; ``CheckpointError`` names what is wrong."""
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        with open(f"{path}.sha256") as f:
            want = f.read().strip()
    except OSError as e:
        raise CheckpointError(f"{path}.sha256: cannot read the checkpoint's digest ({e.strerror})") from None
    got = _sha256(path)
    if got != want:
        raise CheckpointError(f"{path}: damaged (SHA-256 {got[:12]}…, its digest file says {want[:12]}…)")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a damaged file
        raise CheckpointError(f"{path}: unreadable ({e})") from None


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def measure_switches(name: str, build, checkpoint: str, repeats: int = 5) -> dict:
    """Warm and cold switch of the same state, measured in this process: cold is a fresh
    build loaded from ``checkpoint`` (digest checked), warm is the copy back from host memory
    after an offload. Medians over ``repeats`` of each, in seconds."""
    import statistics

    cold, warm = [], []
    for _ in range(repeats):
        s = ResidentState(name, build)
        cold.append(s.activate(checkpoint).seconds)
        s.offload()
        warm.append(s.activate().seconds)
    return {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm), "bytes": s.state_bytes()}
