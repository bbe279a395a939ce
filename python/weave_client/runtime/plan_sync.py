"""A weight-sync plan executed with ``torch.distributed`` (gloo) instead of Weave's transfer
engine, so the two can be measured side by side on the same links (``weave sync bench
--gloo-python PY``).

Every GPU of the plan is a rank (training GPU ``i`` is rank ``i``, rollout GPU ``j`` rank
``n + j``). The plan's ranges go as pieces (the manifest's piece size) with non-blocking
point-to-point sends; a rollout GPU that holds a range from stage 1 checks each piece's
SHA-256 as it lands and forwards it at once to the peers stage 2 names, so the stages are
pipelined as in the engine. Every piece is checked against the manifest before the run counts;
a damaged piece fails the run (this path has no re-fetch). Each rollout rank prints one JSON
line: its seconds, and the seconds until its stage-1 pieces were checked.

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


def pieces(offset, length, piece):
    at = offset
    while at < offset + length:
        yield at, min(piece, offset + length - at)
        at += piece


def rank_of(endpoint, n):
    return endpoint["gpu"] + (n if endpoint["side"] == "rollout" else 0)


def check(buf, offset, length, checksums):
    got = hashlib.sha256(buf[offset:offset + length].numpy().tobytes()).hexdigest()
    if got != checksums[f"{offset}:{length}"]:
        raise SystemExit(f"piece [{offset}, +{length}) failed its checksum")


def run_train(plan, me, buf, piece):
    n = plan["train_gpus"]
    works = []
    for t in plan["transfers"]:
        if t["from"] == {"side": "train", "gpu": me}:
            for o, ln in pieces(t["offset"], t["len"], piece):
                works.append(dist.isend(buf[o:o + ln], rank_of(t["to"], n)))
    for w in works:
        w.wait()


def run_rollout(plan, me, buf, piece, checksums, t0):
    n = plan["train_gpus"]
    mine = {"side": "rollout", "gpu": me}
    first = [t for t in plan["transfers"] if t["stage"] == 1 and t["to"] == mine]
    forward = [t for t in plan["transfers"] if t["stage"] == 2 and t["from"] == mine]
    second = [t for t in plan["transfers"] if t["stage"] == 2 and t["to"] == mine]
    incoming = [(dist.irecv(buf[o:o + ln], rank_of(t["from"], n)), o, ln)
                for t in first for o, ln in pieces(t["offset"], t["len"], piece)]
    later = [(dist.irecv(buf[o:o + ln], rank_of(t["from"], n)), o, ln)
             for t in second for o, ln in pieces(t["offset"], t["len"], piece)]
    sends = []
    for work, o, ln in incoming:
        work.wait()
        check(buf, o, ln, checksums)
        for t in forward:
            if t["offset"] <= o < t["offset"] + t["len"]:
                sends.append(dist.isend(buf[o:o + ln], rank_of(t["to"], n)))
    stage1 = time.perf_counter() - t0
    for work, o, ln in later:
        work.wait()
        check(buf, o, ln, checksums)
    for w in sends:
        w.wait()
    return stage1


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
    plan, piece = m["plan"], m["piece"]
    n, world = plan["train_gpus"], plan["train_gpus"] + plan["rollout_gpus"]
    rank = args.gpu + (n if args.side == "rollout" else 0)
    if args.side == "train":
        with open(args.model, "rb") as f:
            buf = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    else:
        buf = torch.empty(plan["model_bytes"], dtype=torch.uint8)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    # Every pair's connection is up before the clock starts (gloo connects the full mesh).
    dist.barrier()
    t0 = time.perf_counter()
    if args.side == "train":
        run_train(plan, args.gpu, buf, piece)
    else:
        stage1 = run_rollout(plan, args.gpu, buf, piece, m["checksums"], t0)
        seconds = time.perf_counter() - t0
        print(json.dumps({"me": args.gpu, "seconds": seconds, "stats": {
            "stage1_bytes": sum(t["len"] for t in plan["transfers"]
                                if t["stage"] == 1 and t["to"] == {"side": "rollout", "gpu": args.gpu}),
            "stage1_seconds": stage1}}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
