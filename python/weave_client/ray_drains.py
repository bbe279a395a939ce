"""Forwards Ray's node drains to Weave as preemption notices.

A spot node the provider takes back is drained in Ray (``ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N``, or the autoscaler's own drain):
the node stays ALIVE until its work ends or the deadline passes. Ray reports drains and their
deadlines only through its GCS (``get_draining_nodes``), not through the dashboard's HTTP node
list that ``weave serve --backend ray`` reads, so this helper runs beside the Ray head (where
``ray`` is installed), maps each draining Ray node to its Weave name by the ``weave.io/node``
label, and posts ``POST /v1/nodes/{node}/notice`` with the seconds left. The server closes the
node to new placements and tells its jobs (grants and heartbeats carry the notice); the node
leaves Weave's service when Ray reports it gone.

    python -m weave_client.ray_drains --server URL --token T --ray-address HEAD:6379 \\
        --dashboard http://HEAD:8265 [--once] [--poll-s 2]

A drain without a deadline is forwarded with ``--default-s`` (120: a cloud's usual notice).
"""

import argparse
import json
import sys
import time
import urllib.request
from typing import Callable, Dict, Optional, Set

from . import WeaveClient, WeaveError

NODE_LABEL = "weave.io/node"


def weave_names(dashboard: str) -> Dict[str, str]:
    """Ray node id -> Weave node name, for the live nodes carrying the Weave label."""
    url = dashboard.rstrip("/") + "/api/v0/nodes?detail=1&limit=10000"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    nodes = body["data"]["result"]["result"]
    return {n["node_id"]: n["labels"][NODE_LABEL] for n in nodes
            if n.get("state") == "ALIVE" and NODE_LABEL in (n.get("labels") or {})}


def ray_draining(address: str) -> Callable[[], Dict[str, int]]:
    """A function giving Ray's draining nodes (node id -> deadline in ms, 0: none)."""
    import ray  # only where Ray is installed

    if not ray.is_initialized():
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    return ray._private.state.state.get_draining_nodes


class Forwarder:
    """Posts one notice per draining Weave node (again only if its drain ends and recurs)."""

    def __init__(self, client: WeaveClient, draining: Callable[[], Dict[str, int]],
                 names: Callable[[], Dict[str, str]], default_s: int = 120,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.client, self.draining, self.names = client, draining, names
        self.default_s, self.now_ms = default_s, now_ms
        self.sent: Set[str] = set()

    def once(self) -> Dict[str, int]:
        """One round; returns the notices posted (Weave node -> seconds)."""
        drains = self.draining()
        names = self.names() if drains else {}
        posted: Dict[str, int] = {}
        now = self.now_ms()
        for ray_id, deadline_ms in sorted(drains.items()):
            node = names.get(ray_id)
            if node is None or ray_id in self.sent:
                continue
            seconds = max(1, -(-(deadline_ms - now) // 1000)) if deadline_ms > 0 else self.default_s
            try:
                self.client.node_notice(node, seconds, reason=f"Ray drain of {ray_id[:12]}")
                posted[node] = seconds
            except WeaveError as e:
                # Already under a notice (posted before a restart of this helper) or already
                # down: nothing to add. Anything else is reported and tried again next round.
                if e.status != 400:
                    print(f"ray_drains: notice for {node}: {e}", file=sys.stderr, flush=True)
                    continue
            self.sent.add(ray_id)
        self.sent &= set(drains)
        return posted


def main(argv: Optional[list] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--ray-address", required=True, help="the Ray head's GCS address (HOST:6379)")
    ap.add_argument("--dashboard", required=True, help="the Ray dashboard's URL (http://HOST:8265)")
    ap.add_argument("--poll-s", type=float, default=2.0)
    ap.add_argument("--default-s", type=int, default=120, help="notice for a drain without a deadline")
    ap.add_argument("--once", action="store_true", help="one round, then exit")
    args = ap.parse_args(argv)
    fwd = Forwarder(WeaveClient(args.server, args.token), ray_draining(args.ray_address),
                    lambda: weave_names(args.dashboard), args.default_s)
    while True:
        for node, seconds in fwd.once().items():
            print(f"ray_drains: {node} drained in Ray: notice of {seconds} s", flush=True)
        if args.once:
            return
        time.sleep(args.poll_s)


if __name__ == "__main__":
    main()
