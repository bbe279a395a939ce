"""End-to-end check of Weave's Ray backend on a local multi-node Ray cluster (run inside the
cluster's private network namespace, see scripts/ray-local.sh).

Submits two toy RL jobs that Weave launches on Ray, checks from Ray's State API that their
actors run on the nodes Weave chose, kills the node only one of them uses, and checks that
that job is failed and re-admitted (resuming from its checkpoint) while the other carries on,
that both finish, that the on-policy barrier held and that the pools interleaved. Prints the
measurements (phase handoff latency under the gate, per-pool utilisation) as JSON on the last
line. Exit code 0 on success.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
from weave_client import WeaveClient  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import Server, wait_for  # noqa: E402


def say(msg):
    print(f"check_ray: {msg}", flush=True)


def ray_get(ray, path):
    with urllib.request.urlopen(ray + path, timeout=30) as r:
        return json.loads(r.read())


def ray_node_labels(ray):
    nodes = ray_get(ray, "/api/v0/nodes?limit=1000&detail=true")["data"]["result"]["result"]
    return {n["node_id"]: n["labels"].get("weave.io/node") for n in nodes}


def ray_job(ray, view):
    """Ray's record of the launch of this admission of the job (found by Weave's metadata)."""
    for j in ray_get(ray, "/api/jobs/"):
        meta = j.get("metadata") or {}
        if meta.get("weave_job") == view["id"] and meta.get("weave_uid") == str(view["uid"]):
            return j
    return {}


def actors_nodes(ray, view):
    """{class name: sorted Weave node names} of a launched job's actors, from the State API."""
    job_id = ray_job(ray, view).get("job_id")
    if job_id is None:  # not launched (or its driver not started) yet
        return {}
    actors = ray_get(ray, "/api/v0/actors?limit=10000&detail=true")["data"]["result"]["result"]
    labels = ray_node_labels(ray)
    out = {}
    for a in actors:
        if a.get("job_id") == job_id and a.get("node_id"):
            out.setdefault(a["class_name"], set()).add(labels.get(a["node_id"]))
    return {k: sorted(v) for k, v in out.items()}


def check_actor_placement(ray, view):
    sid = f"{view['id']} (uid {view['uid']})"
    placed = wait_for(f"{sid}'s actors", lambda: (lambda p: p if len(p) == 2 else None)(actors_nodes(ray, view)), 120)
    assert placed["RolloutWorker"] == sorted(view["rollout_nodes"]), (sid, placed, view["rollout_nodes"])
    assert placed["Learner"] == sorted(view["training_nodes"]), (sid, placed, view["training_nodes"])
    say(f"{sid}: Ray State API puts its actors on {placed}, as Weave chose")
    return placed


def submit(c, name, iterations, checkpoints, seed):
    spec = {
        "id": name, "type": "7B_8k", "iterations": iterations, "slo": 1.3,
        # Declared (rollout-heavy) times steer placement: sharing one rollout node would break
        # the SLO, so the second job scales out onto its own rollout node in the same group.
        "rollout_s": 300.0, "train_s": 100.0,
        "launch": {
            "entrypoint": f"python3 {ROOT}/python/examples/ray_bandit.py",
            # 0.4 s generation, 0.3 s update: the shared training pool is contended.
            "env": {"BANDIT_CHECKPOINTS": checkpoints, "BANDIT_SEED": str(seed), "BANDIT_TRAIN_S": "0.3"},
        },
    }
    return c.submit(spec)["job"]


def phase_spans(events):
    """[(job, phase, iteration, grant_us, end_us, meta)] from the event log; a grant that was
    never finished ends when its job failed."""
    open_, spans = {}, []
    for e in events:
        if e["kind"] == "grant":
            open_[e["job"]] = (e["phase"], e["iteration"], e["time_us"])
        elif e["kind"] == "finish":
            p, k, t = open_.pop(e["job"])
            assert (p, k) == (e["phase"], e["iteration"]), f"finish without its grant: {e}"
            spans.append((e["job"], p, k, t, e["time_us"], e["meta"]))
        elif e["kind"] == "failed" and e["job"] in open_:
            p, k, t = open_.pop(e["job"])
            spans.append((e["job"], p, k, t, e["time_us"], None))
    return spans


def check_barrier(events, job, iterations):
    """Finished phases go rollout k, train k, rollout k+1, ...; after a failure the job
    resumes at rollout r where r = its completed iterations (the re-admission's resume_from)."""
    expected = ("rollout", 0)
    for e in events:
        if e["job"] != job:
            continue
        if e["kind"] in ("readmitted", "requeued"):
            expected = ("rollout", e["meta"]["resume_from"])
        elif e["kind"] == "finish":
            assert (e["phase"], e["iteration"]) == expected, f"{job}: barrier broken at {e}, expected {expected}"
            if e["phase"] == "rollout":
                assert e["meta"]["weights_version"] == e["iteration"], f"{job}: stale weights {e}"
                expected = ("train", e["iteration"])
            else:
                assert e["meta"]["new_weights_version"] == e["iteration"] + 1, f"{job}: {e}"
                expected = ("rollout", e["iteration"] + 1)
    assert expected == ("rollout", iterations), f"{job}: ended at {expected}, wanted {iterations} iterations"


def exclusive(spans, label):
    """No two jobs hold the same resource at once (server grant..finish intervals)."""
    spans = sorted(spans, key=lambda s: s[3])
    for x, y in zip(spans, spans[1:]):
        assert y[3] >= x[4], f"{label}: {x[:5]} and {y[:5]} overlap"


def measure(spans, window, nodes):
    """Over `window` (server µs, both jobs running): the gate's handoff latency and per-pool
    utilisation. A handoff is a phase granted by another job's finish (it was waiting): the
    latency is from the finisher's wall_end to the waiter's wall_start, both measured inside the
    jobs (one machine, one clock), so it includes the finish report, the grant and the waiter's
    long-poll answer. The gate round trip is the same for a job's own next phase when it was
    granted at once. Utilisation is busy wall time / window, per pool."""
    lo, hi = window
    inside = sorted([s for s in spans if s[3] >= lo and s[4] <= hi and s[5] is not None], key=lambda s: s[3])
    handoffs, own = [], []
    for x in inside:
        for y in inside:
            if y[3] != x[4] or y is x:
                continue
            gap = (y[5]["wall_start"] - x[5]["wall_end"]) * 1000.0
            if x[0] != y[0] and x[1] == y[1] == "train":
                handoffs.append(gap)
            elif x[0] == y[0]:
                own.append(gap)
    span_s = (hi - lo) / 1e6

    def busy(ss):
        return sum(s[5]["wall_end"] - s[5]["wall_start"] for s in ss) / span_s

    def stats(v):
        v = sorted(v)
        if not v:
            return None
        return {"n": len(v), "median_ms": round(statistics.median(v), 1), "p90_ms": round(v[int(0.9 * (len(v) - 1))], 1),
                "max_ms": round(v[-1], 1)}

    def period(job):
        starts = sorted(s[3] for s in inside if s[0] == job and s[1] == "rollout")
        return round((starts[-1] - starts[0]) / 1e6 / (len(starts) - 1), 3) if len(starts) > 1 else None

    util = {"training t0 (shared)": busy([s for s in inside if s[1] == "train"])}
    for job, node in nodes.items():
        util[f"rollout {node} ({job})"] = busy([s for s in inside if s[1] == "rollout" and s[0] == job])
    return {
        "window_s": round(span_s, 2),
        "training_handoff": stats(handoffs),
        "gate_round_trip": stats(own),
        "utilisation": {k: round(v, 3) for k, v in util.items()},
        "iteration_s": {job: period(job) for job in nodes},
    }


def check_restart(c, ray, server):
    """SIGKILL the server while a job runs and start it again on the same store: the job rides
    it out (its client retries), keeps its admission, and nothing is launched twice."""
    before = c.job("toy-a")["job"]
    server.kill()
    t0 = time.time()
    time.sleep(1.0)
    server.start()
    after = c.job("toy-a")["job"]
    assert (after["uid"], after["group"]) == (before["uid"], before["group"]), (before, after)
    assert after["completed_iterations"] >= before["completed_iterations"]
    wait_for("toy-a to make progress after the restart",
             lambda: c.job("toy-a")["job"]["completed_iterations"] > after["completed_iterations"], 60)
    say(f"killed and restarted weave serve: toy-a kept uid {after['uid']} and went on "
        f"({time.time() - t0:.1f} s from the kill to its next iteration)")


def check_drain(c, args, node):
    """Drains ``node`` in Ray (a spot preemption with a 10-minute deadline: b's actors keep it
    busy, so Ray keeps it ALIVE), forwards the drain with ``weave_client.ray_drains --once``,
    and checks that b's view carries the notice with Ray's deadline and that the backend does
    not undo it while Ray still reports the node alive."""
    ray_id = [i for i, name in ray_node_labels(args.ray).items() if name == node][0]
    gcs = args.ray.split("//")[1].split(":")[0] + ":6379"
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    subprocess.run([ray_cli, "drain-node", "--address", gcs, "--node-id", ray_id, "--reason",
                    "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot reclaimed in a test",
                    "--deadline-remaining-seconds", "600"], check=True)
    t_drain_ms = time.time() * 1000
    fwd = subprocess.run([sys.executable, "-m", "weave_client.ray_drains", "--server", c.server, "--token",
                          args.admin_token, "--ray-address", gcs, "--dashboard", args.ray, "--once"],
                         capture_output=True, text=True, cwd=os.path.join(ROOT, "python"))
    assert fwd.returncode == 0, f"the forwarder failed:\n{fwd.stdout}\n{fwd.stderr}"
    assert f"{node} drained in Ray" in fwd.stdout, fwd.stdout
    notice = c.job("toy-b")["job"].get("preemption_notice")
    assert notice and notice["node"] == node, f"b's view: {notice}"
    # The seconds posted are what was left of Ray's deadline when the forwarder read it.
    seconds = int(fwd.stdout.split("notice of ")[1].split()[0])
    left_s = (t_drain_ms + 600_000 - time.time() * 1000) / 1000
    assert left_s - 5 <= seconds <= 600, f"posted {seconds} s; {left_s:.1f} s were left of Ray's deadline"
    # Two backend polls later the node is still noticed, not brought back up, and b still on it.
    time.sleep(1.5)
    cluster = WeaveClient(c.server, args.admin_token)._request("GET", "/v1/cluster")[1]
    assert [n["node"] for n in cluster["notices"]] == [node] and node not in cluster["down"], cluster
    b = c.job("toy-b")["job"]
    assert b["state"] == "running" and node in b["rollout_nodes"], b
    say(f"drained {node} in Ray: forwarded as a notice ({fwd.stdout.strip()}; {left_s:.1f} s were left of "
        f"Ray's deadline); b runs on until the node goes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", help="a running server's URL (or give --serve-cmd)")
    ap.add_argument("--serve-cmd", help="start (and, mid-run, kill and restart) the server with this command")
    ap.add_argument("--token", required=True)
    ap.add_argument("--admin-token", help="an admin's token: drain b's node in Ray first and forward the drain "
                                          "to Weave as a preemption notice (weave_client.ray_drains)")
    ap.add_argument("--ray", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--kill", required=True, help="command that kills a node; {node} is replaced")
    ap.add_argument("--iterations-a", type=int, default=50)
    ap.add_argument("--iterations-b", type=int, default=30)
    ap.add_argument("--kill-after", type=int, default=20, help="kill b's node after b completed this many")
    ap.add_argument("--pin", choices=["labels", "resources"], required=True,
                    help="how the jobs must have pinned their bundles (the server is told with --ray-pin, or "
                         "left on auto for labels: this Ray has label selectors)")
    args = ap.parse_args()
    server = Server(args.serve_cmd) if args.serve_cmd else None
    try:
        url = server.start() if server else args.server
        run(args, WeaveClient(url, args.token), server)
    finally:
        if server:
            server.stop()


def run(args, c, server):
    a = submit(c, "toy-a", args.iterations_a, args.checkpoints, 1)
    b = submit(c, "toy-b", args.iterations_b, args.checkpoints, 2)
    say(f"admitted: a {a['placement']} on {a['rollout_nodes']}+{a['training_nodes']}, "
        f"b {b['placement']} on {b['rollout_nodes']}+{b['training_nodes']}, groups {a['group']}/{b['group']}")
    assert a["group"] == b["group"], "the two jobs are not in one co-execution group"
    assert a["training_nodes"] == b["training_nodes"], "one group shares its training pool"
    lost = sorted(set(b["rollout_nodes"]) - set(a["rollout_nodes"]))
    assert lost, f"b has no rollout node of its own: {b['rollout_nodes']}"
    check_actor_placement(args.ray, a)
    check_actor_placement(args.ray, b)

    # The drain comes first: its Ray CLI and forwarder take many seconds on a loaded machine,
    # and b must still be running on the node when it is killed (after the drain, b ran out
    # its iterations before the kill in one CI run in two).
    if args.admin_token:
        check_drain(c, args, lost[0])
    wait_for(f"b to complete {args.kill_after} iterations",
             lambda: c.job("toy-b")["job"]["completed_iterations"] >= args.kill_after, 240)
    a_uid = c.job("toy-a")["job"]["uid"]
    b_now = c.job("toy-b")["job"]
    assert b_now["state"] == "running" and b_now["completed_iterations"] < args.iterations_b, (
        f"b ended before its node could be killed (the test lost its race, not the server): {b_now}")
    cmd = args.kill.replace("{node}", lost[0])
    say(f"killing node {lost[0]}: {cmd}")
    subprocess.run(cmd, shell=True, check=True)
    t_kill = time.time()

    def readmitted():
        j = c.job("toy-b")
        kinds = [e["kind"] for e in j["history"]]
        return j["job"] if "readmitted" in kinds and j["job"]["state"] == "running" else None

    b2 = wait_for("b to be failed and re-admitted", readmitted, 120, explain=lambda: plane_state(c, args))
    detect_s = time.time() - t_kill
    hist = c.job("toy-b")["history"]
    failed = [e for e in hist if e["kind"] == "failed"]
    assert failed, "b was never marked failed"
    reason = (failed[0].get("meta") or {}).get("reason", "")
    say(f"b failed ({reason}) and was re-admitted {detect_s:.1f} s after the kill, onto "
        f"{b2['rollout_nodes']}+{b2['training_nodes']} in group {b2['group']} (uid {b['uid']} -> {b2['uid']})")
    assert f"node {lost[0]} lost" in reason, reason
    assert lost[0] not in b2["rollout_nodes"], "re-admitted onto the lost node"
    check_actor_placement(args.ray, b2)
    a_now = c.job("toy-a")["job"]
    assert a_now["state"] in ("running", "completed") and a_now["uid"] == a_uid, f"a was disturbed: {a_now}"

    if server:
        check_restart(c, args.ray, server)
    for name, n in (("toy-a", args.iterations_a), ("toy-b", args.iterations_b)):
        wait_for(f"{name} to complete", lambda name=name: c.job(name)["job"]["state"] == "completed", 300)
        assert c.job(name)["job"]["completed_iterations"] == n
    events = c.events()
    check_barrier(events, "toy-a", args.iterations_a)
    check_barrier(events, "toy-b", args.iterations_b)
    spans = phase_spans(events)
    pinned = {(s[5] or {}).get("pinned_by") for s in spans if s[5] is not None}
    assert pinned == {args.pin}, f"the jobs pinned their bundles by {pinned}, not {args.pin}"
    say(f"every phase ran in bundles pinned by {args.pin}")
    exclusive([s for s in spans if s[1] == "train"], "training pool")
    for node in sorted(set(a["rollout_nodes"]) | set(b["rollout_nodes"]) | set(b2["rollout_nodes"])):
        # Rollout node -> the spans of the admissions that held it.
        holders = [s for s in spans if s[1] == "rollout" and node in node_of(s, a, b, b2, events)]
        exclusive(holders, f"rollout node {node}")
    # Interleaving: a's training overlaps b's rollout and vice versa, and the training pool
    # changes hands between the jobs.
    def overlaps(x, y):
        return sum(1 for s in spans if s[0] == x and s[1] == "train" for r in spans
                   if r[0] == y and r[1] == "rollout" and r[3] < s[4] and s[3] < r[4])
    ab, ba = overlaps("toy-a", "toy-b"), overlaps("toy-b", "toy-a")
    trainers = [s[0] for s in sorted(spans, key=lambda s: s[3]) if s[1] == "train"]
    switches = sum(1 for x, y in zip(trainers, trainers[1:]) if x != y)
    assert ab > 0 and ba > 0, f"pools did not interleave: {ab} / {ba} overlaps"
    assert switches >= 4, f"training pool changed hands only {switches} times"
    say(f"barrier held; training pool changed hands {switches} times; a-train/b-rollout overlaps {ab}, "
        f"b-train/a-rollout overlaps {ba}")
    # Steady state with both jobs running: from b's third iteration (actors started) to the kill.
    warm = min(e["time_us"] for e in events if e["job"] == "toy-b" and e["kind"] == "grant" and e["iteration"] == 2)
    kill_us = failed[0]["time_us"]
    m = measure(spans, (warm, kill_us), {"toy-a": a["rollout_nodes"][0], "toy-b": b["rollout_nodes"][0]})
    m["failure_detect_and_readmit_s"] = round(detect_s, 1)
    m["training_gpus"] = sorted({f"{e['job']}: {e['meta']['gpus']}" for e in events
                                 if e["kind"] == "finish" and e["phase"] == "train"})
    m["solo"] = check_cancel_stops_ray(c, args.ray, args.checkpoints)
    launches = launches_per_admission(args.ray)
    assert all(n == 1 for n in launches.values()), f"launched twice: {launches}"
    say(f"one Ray submission per admission: {sorted(launches)}")
    print(json.dumps(m), flush=True)


def plane_state(c, args):
    """What the plane says of both jobs and the cluster (for a timed-out wait): whether a still
    makes progress tells a stalled plane from a job left queued."""
    lines = []
    for name in ("toy-a", "toy-b"):
        j = c.job(name)
        view = {k: j["job"].get(k) for k in ("uid", "state", "completed_iterations", "rollout_nodes",
                                              "training_nodes", "group")}
        lines.append(f"{name}: {view}; history {[(e['kind'], e.get('meta')) for e in j['history'][-6:]]}")
    if args.admin_token:
        lines.append(f"cluster: {WeaveClient(c.server, args.admin_token)._request('GET', '/v1/cluster')[1]}")
    lines.append(f"last events: {[(e['job'], e['kind']) for e in c.events()[-12:]]}")
    return "\n".join(lines)


def launches_per_admission(ray):
    """{(Weave job, admission uid): Ray submissions of it} on this cluster."""
    launches = {}
    for j in ray_get(ray, "/api/jobs/"):
        meta = j.get("metadata") or {}
        if "weave_job" in meta:
            key = (meta["weave_job"], meta["weave_uid"])
            launches[key] = launches.get(key, 0) + 1
    return launches


def check_cancel_stops_ray(c, ray, checkpoints):
    """Cancelling a job in Weave stops its Ray job. The job first runs alone for a few
    iterations: the same toy job's utilisation without a partner, for comparison."""
    view = submit(c, "toy-c", 1000, checkpoints, 3)
    wait_for("toy-c to run in Ray", lambda: ray_job(ray, view).get("status") == "RUNNING", 120)
    wait_for("toy-c's iterations", lambda: c.job("toy-c")["job"]["completed_iterations"] >= 10, 120)
    events = [e for e in c.events() if e["job"] == "toy-c"]
    spans = phase_spans(events)
    lo = min(e["time_us"] for e in events if e["kind"] == "grant" and e["iteration"] == 2)
    hi = max(s[4] for s in spans)
    solo = measure(spans, (lo, hi), {"toy-c": view["rollout_nodes"][0]})
    del solo["training_handoff"]
    c.cancel("toy-c")
    t0 = time.time()
    status = wait_for("Ray to stop toy-c", lambda: (lambda s: s if s == "STOPPED" else None)(ray_job(ray, view).get("status")), 60)
    say(f"cancelled toy-c in Weave: its Ray job is {status} {time.time() - t0:.1f} s later")
    return solo


def node_of(span, a, b, b2, events):
    """The rollout nodes of the admission a span belongs to (b's spans before the failure ran
    on b's first nodes)."""
    if span[0] == "toy-a":
        return a["rollout_nodes"]
    t_fail = min(e["time_us"] for e in events if e["job"] == "toy-b" and e["kind"] == "failed")
    return b["rollout_nodes"] if span[3] < t_fail else b2["rollout_nodes"]


if __name__ == "__main__":
    main()
