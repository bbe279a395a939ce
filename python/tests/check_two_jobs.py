"""Checks, from the server's event log, that two bandit jobs shared one group, interleaved
their phases, and that every training step consumed trajectories of the right weights
version. Exit code 0 on success; prints what it found."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from weave_client import WeaveClient  # noqa: E402


def main(server, token, a, b, iterations):
    c = WeaveClient(server, token)
    events = c.events()
    groups = {e["job"]: e["group"] for e in events if e["kind"] == "admitted"}
    assert groups[a] == groups[b], f"not co-scheduled: {groups}"
    for job in (a, b):
        fin = [e for e in events if e["job"] == job and e["kind"] == "finish"]
        assert len(fin) == 2 * iterations, f"{job}: {len(fin)} finishes"
        for i, e in enumerate(fin):
            k, phase = i // 2, ("rollout" if i % 2 == 0 else "train")
            assert (e["phase"], e["iteration"]) == (phase, k), f"{job}: out of order {e}"
            if phase == "rollout":
                assert e["meta"]["weights_version"] == k, f"{job}: rollout {k} used weights {e['meta']}"
            else:
                assert e["meta"]["trajectory_version"] == k, f"{job}: training {k} consumed {e['meta']}"
                assert e["meta"]["new_weights_version"] == k + 1
        assert c.job(job)["job"]["state"] == "completed"
    # Interleaving: rollout grants on the shared node alternate between the two jobs, and
    # one job's rollout overlaps the other's training.
    rollouts = [e["job"] for e in events if e["kind"] == "grant" and e["phase"] == "rollout"]
    switches = sum(1 for x, y in zip(rollouts, rollouts[1:]) if x != y)
    assert switches >= 2 * iterations - 2, f"rollouts did not interleave: {rollouts}"
    spans = {}
    for e in events:
        if e["kind"] in ("grant", "finish") and e["phase"]:
            key = (e["job"], e["phase"], e["iteration"])
            spans.setdefault(key, [None, None])[0 if e["kind"] == "grant" else 1] = e["time_us"]
    overlaps = 0
    for (j1, p1, k1), (s1, e1) in spans.items():
        for (j2, p2, k2), (s2, e2) in spans.items():
            if j1 != j2 and p1 == "rollout" and p2 == "train" and s1 < e2 and s2 < e1:
                overlaps += 1
    assert overlaps > 0, "no rollout ever ran during the other job's training"
    print(f"ok: group {groups[a]}, rollout order {rollouts}, {overlaps} rollout/training overlaps")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
