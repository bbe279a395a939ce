"""The reference job with several trainer ranks and rollout workers (``--trainers N``): its
weights move along ``weave-sync``'s topology-aware plan (each trainer's shard crosses the link
once, the workers exchange shards on their node), measured against the plan's prediction and
the link's line rate, and against a flat broadcast (the whole model to every worker across the
link, as a framework that sends one copy per rollout process does).

On the mini cluster both trainers sit on the training node and both workers on the rollout
node, behind the one shaped link: the topology-aware plan moves the model across it once, the
flat broadcast N times. (Parallel streams, the plan's other gain, need one link per node pair,
which a mini cluster of two nodes does not have.)"""

import os
import re
import statistics
import subprocess
from typing import Any, Dict, List

from .harness import TOKEN, check_versions, phases, reference_cmd, run_jobs


def model_bytes(a) -> int:
    from .policy import PolicyConfig, build_policy

    p = build_policy(PolicyConfig(digits=4, seed=1))
    return sum(x.numel() for x in p.parameters()) * 4


def stream_efficiency(a) -> float:
    """The shaped link's payload share of line rate, probed once per run (see ``linkprobe``);
    on loopback the default (Fig. 12's)."""
    if getattr(a, "stream_efficiency", None) is None:
        from . import linkprobe

        a.stream_efficiency = linkprobe.stream_efficiency(a.shaped_link) if a.shaped_link else 0.85
    return a.stream_efficiency


def link_cluster(a) -> str:
    """A cluster file whose network is the mini cluster's: the shaped link per stream and in
    aggregate at its probed efficiency, the rollout node's own traffic on loopback (taken as
    10 Gbit/s)."""
    config = subprocess.run([a.weave, "config", "show"], check=True, capture_output=True, text=True).stdout
    gbps = (a.shaped_link or 10_000.0) / 1000.0
    for key, value in (("intra_cluster_gbps", 10.0), ("inter_cluster_gbps_per_stream", gbps),
                       ("inter_cluster_aggregate_gbps", gbps), ("stream_efficiency", stream_efficiency(a))):
        config = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", config)
    path = os.path.join(a.work, "link-cluster.toml")
    with open(path, "w") as f:
        f.write(config)
    return path


def plan_file(a, kind: str, per_node: int, name: str) -> Dict[str, Any]:
    """``weave sync plan --emit``'s plan for N -> N ranks, written to ``name``; its JSON."""
    import json

    n = a.trainers
    cmd = [a.weave, "sync", "plan", "--emit", kind, "--model-bytes", str(model_bytes(a)), "--train-gpus", str(n),
           "--rollout-gpus", str(n), "--gpus-per-node", str(per_node), "--cluster", link_cluster(a)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    path = os.path.join(a.work, name)
    with open(path, "w") as f:
        f.write(out)
    return {"path": path, **json.loads(out)}


def job(a, url: str, name: str, iterations: int, plan: str, port: int) -> List[str]:
    return [*reference_cmd(a, url, name, iterations, port), "--submit", "--trainers", str(a.trainers),
            "--sync-plan", plan]


def syncs(a, name: str) -> List[float]:
    """Rank 0's sync seconds per iteration (from its send to every rank agreeing the version
    checked out)."""
    return [r["sync_s"] for r in phases(a.work, name) if r.get("phase") == "train" and "sync_s" in r]


def sync_comparison(a, url: str, iterations: int = 20) -> Dict[str, Any]:
    """Two short runs: along the topology-aware plan, and along the flat broadcast; each
    iteration trained once, on its own version, by every rank."""
    from weave_client import WeaveClient

    out: Dict[str, Any] = {"trainers": a.trainers, "model_bytes": model_bytes(a), "link_mbit": a.shaped_link,
                           "stream_efficiency": stream_efficiency(a)}
    for port, (kind, per_node) in zip((29700, 29720), (("topology-aware", a.trainers), ("flat", 1))):
        plan = plan_file(a, kind, per_node, f"plan-{kind}.json")
        name = f"ranks-{kind}"
        run_jobs([job(a, url, name, iterations, plan["path"], port)])
        check_versions(WeaveClient(url, TOKEN).events(), name, iterations)
        slow = sum(t["len"] for t in plan["plan"]["transfers"] if t["tier"] == "slow")
        measured = statistics.median(syncs(a, name)[2:])
        line_s = slow * 8 / (a.shaped_link * 1e6) if a.shaped_link else None
        out[kind] = {"slow_link_bytes": slow, "measured_s": measured, "predicted_s": plan["predicted_s"],
                     "transfer_predicted_s": plan["transfer_predicted_s"], "line_rate_s": line_s}
    return out


def rows(o: Dict[str, Any]) -> List["tuple[str, str]"]:
    """The comparison as the experiment's report prints it."""
    n, out = o["trainers"], []
    for kind in ("topology-aware", "flat"):
        r = o[kind]
        line = (f"; {r['line_rate_s']:.4f} s at line rate ({r['line_rate_s'] / r['measured_s']:.0%} of it)"
                if r["line_rate_s"] else "")
        out.append((f"sync, {n} trainers -> {n} workers, {kind} ({r['slow_link_bytes'] / 1e6:.3f} MB across)",
                    f"{r['measured_s']:.4f} s median; plan's transfer part {r['transfer_predicted_s']:.4f} s "
                    f"({r['measured_s'] / r['transfer_predicted_s'] - 1:+.0%}), with its start-up "
                    f"{r['predicted_s']:.4f} s{line}"))
    out.append(("  the link's payload share of line rate, probed (one stream)", f"{o['stream_efficiency']:.1%}"))
    ratio = o["flat"]["measured_s"] / o["topology-aware"]["measured_s"]
    out.append(("  flat broadcast / topology-aware plan", f"{ratio:.2f}x"))
    return out
