"""A LoRA pack's driver under Weave's gate (the ``lora`` extra: transformers + peft).

``weave serve`` puts LoRA jobs of one base into a pack: one rollout engine and one trainer that
its members share, each member in an adapter slot of its own. This is the pack's driver, the
shared engine's runtime: it asks the gate for the pack's phases; each grant lists the members
(``adapters``: job and slot). A rollout samples every listed member's prompts in one
mixed-adapter batch and reports which members it sampled; a training trains each listed
member's adapter in turn, with the member's own optimizer state. The server counts each
member's iterations from the pack's trainings and ends a member once its iterations are done;
the driver stops when the pack has ended (no member left).

The task is ``lora_task``'s: the member in slot ``j`` learns to shift each digit by ``j + 1``
(a slot a new member takes starts from a fresh adapter). Engine and trainer are one process
here, sharing one copy of the base and the adapters, so nothing moves between them; the two
processes of ``lora_jobs`` are what its throughput figures measure. The pack's grants allow a
rollout beside the previous training (staleness 1); this driver runs them one after the other.

    python -m weave_client.runtime.lora_pack --server URL --token ADMIN --member JOB

prints one JSON object: the pack, its iterations, and each member's reward curve (mean per 10
iterations) with the first iteration its 10-iteration mean reached 0.9.
"""

import argparse
import json
import time
from typing import Any, Dict, List, Tuple

from .. import WeaveClient
from .lora_task import (Setup, adapter_params, adapter_vector, load_adapter, pretrain_base, sample, train_step,
                        with_adapters)


class Slots:
    """Every slot's adapter on one base, each member's optimizer and iteration count."""

    def __init__(self, s: Setup, slots: int, base) -> None:
        import torch

        self.s = s
        self.model = with_adapters(base, s, range(slots))
        self.fresh = {j: adapter_vector(self.model, j).clone() for j in range(slots)}
        self.members: Dict[int, str] = {}
        self.opts: Dict[int, Any] = {}
        self.iteration: Dict[int, int] = {}
        self.rewards: Dict[str, List[float]] = {}
        self._torch = torch

    def follow(self, adapters: List[Dict[str, Any]]) -> List[Tuple[int, str]]:
        """The grant's members by slot; a slot with a new member starts a fresh adapter."""
        listed = sorted((int(a["slot"]), str(a["job"])) for a in adapters)
        for slot, job in listed:
            if slot not in self.fresh:
                raise ValueError(f"slot {slot} is beyond this driver's {len(self.fresh)} adapters (--slots)")
            if self.members.get(slot) != job:
                load_adapter(self.model, slot, self.fresh[slot])
                self.members[slot] = job
                self.opts[slot] = self._torch.optim.Adam(adapter_params(self.model, slot), lr=self.s.lr)
                self.iteration[slot] = 0
                self.rewards.setdefault(job, [])
        return listed

    def rollout(self, listed: List[Tuple[int, str]]) -> Dict[int, Any]:
        self.model.eval()
        return dict(sample(self.model, self.s, [(slot, self.iteration[slot]) for slot, _ in listed]))

    def train(self, slot: int, seq) -> None:
        self.model.train()
        self.rewards[self.members[slot]].append(train_step(self.model, self.opts[slot], self.s, slot, seq))
        self.iteration[slot] += 1


def drive(client: WeaveClient, pack: str, s: Setup, base, slots: int) -> Dict[str, Any]:
    """Runs ``pack`` until it ends; returns each member's reward curve."""
    state = Slots(s, slots, base)
    k = 0
    with client.keepalive(pack, interval_s=1.0):
        while client.job(pack)["job"]["state"] == "running":
            granted = client.start(pack, "rollout", k)
            listed = state.follow(granted.get("adapters", []))
            t0 = time.monotonic()
            samples = state.rollout(listed)
            client.finish(pack, "rollout", k, time.monotonic() - t0, {"adapters": [job for _, job in listed]})
            granted = client.start(pack, "train", k)
            t0 = time.monotonic()
            # Only members still in the pack: one that ended meanwhile is not trained.
            for slot, _ in state.follow(granted.get("adapters", [])):
                state.train(slot, samples[slot])
            client.finish(pack, "train", k, time.monotonic() - t0)
            k += 1
    from .lora_jobs import learning

    return {"pack": pack, "iterations": k, "members": {job: learning(r) for job, r in state.rewards.items()}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True)
    p.add_argument("--token", required=True, help="an admin token (packs run as the server's own tenant)")
    p.add_argument("--member", required=True, help="a member's key: its pack is the one driven")
    p.add_argument("--slots", type=int, default=8, help="adapters held (slots 0..N-1)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    client = WeaveClient(args.server, token=args.token)
    pack = client.job(args.member)["job"]["adapter"]["pack"]
    s = Setup(jobs=args.slots)
    base = pretrain_base(s)
    print(json.dumps(drive(client, pack, s, base, args.slots)))


if __name__ == "__main__":
    main()
