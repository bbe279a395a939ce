"""End to end, LoRA jobs of one base in one pack under `weave serve` (the `lora` extra): three
jobs are submitted, the server puts them in one pack (one engine and one trainer, each job in
an adapter slot of its own), and the pack's driver (``weave_client.runtime.lora_pack``, real
transformers + peft) runs it through the gate until no member is left.

The checks: one pack, slots 0-2; every rollout grant names the members in the batch; the short
job completes after exactly its iterations and frees its slot while the others run on; each
long job completes with its own count (a `finish` event per iteration, numbered 0..n-1) and
learns its own task (its 10-iteration mean reward reaches 0.9, where the base earns about 0);
the pack completes when its last member does. Prints the pack's wall time, its iterations and
when each job reached 0.9.

Run by `crates/weave-cli/tests/serve_process.rs` with the lora extra's Python; exit 0 on success.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import Server  # noqa: E402
from weave_client import WeaveClient  # noqa: E402
from weave_client.runtime import lora_pack  # noqa: E402
from weave_client.runtime.lora_task import Setup, pretrain_base  # noqa: E402

LONG, SHORT = 600, 30


def spec(job, iterations):
    return {"id": job, "type": "7B_8k", "batch": 32, "iterations": iterations, "slo": 2.0,
            "lora": {"base": "qwen2.5-7b", "rank": 8}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True)
    ap.add_argument("--admin", required=True)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    server = Server(args.serve_cmd)
    url = server.start()
    try:
        ops = WeaveClient(url, token=args.admin)
        for job, n in (("shift1", LONG), ("shift2", LONG), ("shift3", SHORT)):
            ops.submit(spec(job, n))
        views = {j: ops.job(j)["job"] for j in ("shift1", "shift2", "shift3")}
        packs = {v["adapter"]["pack"] for v in views.values()}
        assert len(packs) == 1, f"one pack for one base: {views}"
        pack = packs.pop()
        assert [views[j]["adapter"]["slot"] for j in ("shift1", "shift2", "shift3")] == [0, 1, 2], views
        s = Setup(jobs=3)
        start = time.monotonic()
        run = lora_pack.drive(ops, pack, s, pretrain_base(s), slots=3)
        wall = time.monotonic() - start
        check(ops, pack, run)
        reached = {j: m["reached_0_9_at"] for j, m in sorted(run["members"].items())}
        print(f"pack {pack}: {run['iterations']} iterations in {wall:.1f} s; 0.9 reached at {reached}")
    finally:
        server.stop()


def check(ops, pack, run):
    log = ops.events()
    for job, n in (("shift1", LONG), ("shift2", LONG), ("shift3", SHORT)):
        view = ops.job(job)["job"]
        assert view["state"] == "completed" and view["completed_iterations"] == n, view
        done = [e["iteration"] for e in log if e["job"] == job and e["kind"] == "finish"]
        assert done == list(range(n)), f"{job}: iterations credited {done[:5]}.. ({len(done)})"
        curve = run["members"][job]["rewards"]
        assert len(curve) == n, f"{job} trained {len(curve)} times, not {n}"
    for job in ("shift1", "shift2"):
        m = run["members"][job]
        assert sum(m["rewards"][:10]) / 10 < 0.3, f"{job} starts far from its task: {m['reward_per_10'][:3]}"
        assert m["reached_0_9_at"] is not None, f"{job} never reached 0.9: {m['reward_per_10']}"
    grants = [e for e in log if e["job"] == pack and e["kind"] == "grant" and e["phase"] == "rollout"]
    sizes = [len((e.get("meta") or {}).get("adapters", [])) for e in grants]
    assert sizes[0] >= 1 and max(sizes) == 3 and sizes[-1] == 2, f"batch sizes granted: {sizes[:3]}..{sizes[-3:]}"
    left = [e for e in log if e["job"] == pack and e["kind"] == "member-left"]
    assert [(e["meta"]["member"], e["meta"]["slot"]) for e in left][0] == ("shift3", 2), left
    assert ops.job(pack)["job"]["state"] == "completed", "the pack ends with its last member"
    assert run["iterations"] == LONG


if __name__ == "__main__":
    main()
