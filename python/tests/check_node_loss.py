"""End to end: a bounded-staleness job (``examples/bandit.py --staleness 1``, two lanes) rides
out the loss of its rollout node.

One rollout and one training node. Halfway through, an admin takes the rollout node out of
service (``POST /v1/nodes/r0/down``): the job's admission ends and it waits in the queue; its
lanes hear ``Requeued`` and stop. The node comes back, the job is re-admitted, and the driver
resumes both lanes from the iteration Weave counted. The event log must show every iteration
trained exactly once, each rollout on weights at most one version behind, each training on its
own trajectories, and the driver told to resume from exactly that count.

Run by `crates/weave-cli/tests/serve_process.rs`; exit code 0 on success.
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weave_client import WeaveClient, WeaveError  # noqa: E402
from server_process import Server, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BANDIT = os.path.join(HERE, "..", "examples", "bandit.py")
ITERATIONS = 16


def check_log(events, job, n, staleness):
    fin = [e for e in events if e["job"] == job and e["kind"] == "finish"]
    trained = sorted(e["iteration"] for e in fin if e["phase"] == "train")
    assert trained == list(range(n)), f"{job}: trained iterations {trained}"
    # The weights each rollout sampled with (a rollout redone after the loss: the last one).
    sampled = {e["iteration"]: e["meta"]["weights_version"] for e in fin if e["phase"] == "rollout"}
    for k, v in sampled.items():
        assert k - staleness <= v <= k, f"rollout {k} used weights {v}"
    for e in (e for e in fin if e["phase"] == "train"):
        k, meta = e["iteration"], e["meta"]
        assert meta["trajectory_version"] == sampled[k] and meta["new_weights_version"] == k + 1, \
            f"training {k} consumed {meta}; rollout {k} sampled with weights {sampled[k]}"


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
        cmd = [sys.executable, BANDIT, "--server", url, "--token", args.admin, "--job", "stale",
               "--iterations", str(ITERATIONS), "--staleness", "1", "--rollout-s", "50", "--train-s", "50"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        def completed():
            try:
                return ops.job("stale")["job"]["completed_iterations"]
            except WeaveError:  # not submitted yet
                return 0

        wait_for("4 completed iterations", lambda: completed() >= 4, 60, 0.05)
        ops.node_down("r0", "lost in a test")
        view = ops.job("stale")["job"]
        acked = view["completed_iterations"]
        assert view["state"] == "queued", f"the job waits while its node is down: {view}"
        # Long enough for both lanes to ask the gate and hear that the admission ended.
        time.sleep(2.5)
        ops.node_up("r0")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"the driver failed:\n{out}\n{err}"
        print(out.strip(), flush=True)
        assert ops.job("stale")["job"]["state"] == "completed", ops.job("stale")
        check_log(ops.events(), "stale", ITERATIONS, 1)
        told = [int(m) for m in re.findall(r"re-queued .*; it resumes from iteration (\d+)", out)]
        assert told == [acked], f"acknowledged {acked} at the loss; the driver was told {told}:\n{out}"
        print(f"ok: node lost after {acked} iterations, the stale job resumed there; every iteration trained once",
              flush=True)
    finally:
        if proc and proc.poll() is None:
            proc.kill()
        server.stop()


if __name__ == "__main__":
    main()
