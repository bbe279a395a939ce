"""A weight-sync plan of ``weave-sync``'s executed with ``torch.distributed`` (gloo) by the runtime's
own sync (``sync.run``, the path the GRPO job uses), so it and Weave's transfer engine can be
measured side by side on the same links (``weave sync bench --gloo-python PY``).

Every GPU of the plan is a rank (training GPU ``i`` is rank ``i``, rollout GPU ``j`` rank
``n + j``). The plan's ranges go as pieces (the manifest's piece size); a rollout GPU that holds
a range from stage 1 checks each piece's SHA-256 as it lands and forwards it at once to the peers
stage 2 names, so the stages are pipelined as in the engine. After the run every piece a rank
holds is checked against the manifest too. Each rollout rank prints one JSON line: its seconds,
and the seconds until its stage-1 pieces were checked.

    python -m weave_client.runtime.plan_sync --manifest M --model FILE --side rollout --gpu 2 \\
        --master 10.213.0.10:29500
"""

import argparse
import hashlib
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from .sync import Plan, pieces, run


def check_against_manifest(plan: Plan, me: int, buf, piece: int, checksums) -> None:
    for t in plan.transfers:
        if t.dst != me:
            continue
        for o, ln in pieces(t.offset, t.length, piece):
            got = hashlib.sha256(buf[o:o + ln].numpy().tobytes()).hexdigest()
            if got != checksums[f"{o}:{ln}"]:
                raise SystemExit(f"piece [{o}, +{ln}) failed its checksum")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True, help="weave-sync manifest (plan, piece size, checksums)")
    ap.add_argument("--model", required=True, help="the model file (senders read it; receivers only its size)")
    ap.add_argument("--side", choices=["train", "rollout"], required=True)
    ap.add_argument("--gpu", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0's store")
    args = ap.parse_args(argv)
    with open(args.manifest) as f:
        m = json.load(f)
    plan, piece = Plan.from_weave(m["plan"]), m["piece"]
    n, world = m["plan"]["train_gpus"], m["plan"]["train_gpus"] + m["plan"]["rollout_gpus"]
    rank = args.gpu + (n if args.side == "rollout" else 0)
    if args.side == "train":
        with open(args.model, "rb") as f:
            buf = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    else:
        buf = torch.empty(plan.model_bytes, dtype=torch.uint8)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    # Every pair's connection is up before the clock starts (gloo connects the full mesh).
    dist.barrier()
    t0 = time.perf_counter()
    stats = run(plan, rank, buf, version=m.get("version", 1) if args.side == "train" else None, piece=piece)
    seconds = time.perf_counter() - t0
    if args.side == "rollout":
        check_against_manifest(plan, rank, buf, piece, m["checksums"])
        stage1_bytes = sum(t.length for t in plan.transfers if t.stage == 1 and t.dst == rank)
        print(json.dumps({"me": args.gpu, "seconds": seconds, "stats": {
            "stage1_bytes": stage1_bytes, "stage1_seconds": stats.stage1_seconds}}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
