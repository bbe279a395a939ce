"""End to end: a toy job (``examples/bandit.py --prompts``) on two rollout nodes hears a
preemption notice for one of them in the middle of a rollout, moves that node's prompts to the
other node, and finishes the rollout there; at the notice's deadline the server takes the node
out of service by itself and re-admits the job off it, and the driver resumes.

The event log must show every iteration trained exactly once, each training consuming every
prompt of its rollout exactly once (the moved ones included), the noticed rollout finished
without the node's help to the end, and the job never placed on the node again.

Run by `crates/weave-cli/tests/serve_process.rs`; exit code 0 on success.
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weave_client import WeaveClient, WeaveError  # noqa: E402
from server_process import Server, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BANDIT = os.path.join(HERE, "..", "examples", "bandit.py")
ITERATIONS, PROMPTS, PROMPT_S, NOTICE_S = 4, 24, 0.5, 20


def finishes(events, job, phase):
    return [e for e in events if e["job"] == job and e["kind"] == "finish" and e["phase"] == phase]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True)
    ap.add_argument("--admin", required=True)
    args = ap.parse_args()
    server = Server(args.serve_cmd)
    url = server.start()
    proc = None
    try:
        ops = WeaveClient(url, args.admin)
        cmd = [sys.executable, BANDIT, "--server", url, "--token", args.admin, "--job", "spot",
               "--iterations", str(ITERATIONS), "--prompts", str(PROMPTS), "--prompt-s", str(PROMPT_S),
               "--rollout-nodes", "2", "--rollout-s", "60", "--train-s", "60"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def granted(k):
            try:
                return any(e["kind"] == "grant" and e["job"] == "spot" and e.get("phase") == "rollout"
                           and e.get("iteration") == k for e in ops.events())
            except WeaveError:
                return False

        wait_for("rollout 1 granted", lambda: granted(1), 60, 0.05)
        time.sleep(1.0)
        nodes = ops.job("spot")["job"]["rollout_nodes"]
        assert len(nodes) == 2, nodes
        node = nodes[0]
        ops.node_notice(node, NOTICE_S, reason="spot reclaimed in a test")
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"the driver failed:\n{out}\n{err}"
        print(out.strip(), flush=True)
        view = ops.job("spot")["job"]
        assert view["state"] == "completed", view
        assert node in ops._request("GET", "/v1/cluster")[1]["down"], "the server took the node at the deadline"

        events = ops.events()
        trained = sorted(e["iteration"] for e in finishes(events, "spot", "train"))
        assert trained == list(range(ITERATIONS)), f"trained iterations {trained}"
        for e in finishes(events, "spot", "train"):
            consumed = e["meta"]["consumed_prompts"]
            assert consumed == list(range(PROMPTS)), f"training {e['iteration']} consumed {consumed}"
        rollouts = {e["iteration"]: e["meta"] for e in finishes(events, "spot", "rollout")}
        noticed = rollouts[1]
        assert noticed["left"] == [node] and noticed["moved"] > 0, noticed
        assert sum(noticed["produced_by"].values()) == PROMPTS, noticed
        assert noticed["produced_by"][node] < PROMPTS // 2, f"{node} stopped early: {noticed}"
        for k in range(2, ITERATIONS):
            assert node not in rollouts[k]["nodes"] or rollouts[k]["produced_by"][node] == 0, (k, rollouts[k])
        print(f"ok: notice on {node} mid-rollout: {noticed['moved']} prompts moved "
              f"({noticed['restarted']} dropped mid-generation and started over), produced {noticed['produced_by']}; "
              f"every iteration trained once on all {PROMPTS} prompts; the node went at its deadline", flush=True)
    finally:
        if proc and proc.poll() is None:
            proc.kill()
        server.stop()


if __name__ == "__main__":
    main()
