"""End to end: preemption on an owned cluster, with the Python client and a SIGKILL.

Two rollout and two training nodes; alice and bob are entitled to one of each (the tenants
file turns preemption on). Alice runs two bandit jobs, the second on bob's unused quota. Bob
submits a job: Weave preempts one of alice's (its driver hears ``Requeued`` if it held work of
the lost admission; between iterations it is only told to wait: ``in_flight`` says which the
event log shows), bob's job starts.
The server is then killed with SIGKILL and started again on the same store: the queue, the
victim's checkpoint and bob's admission survive. Bob's job runs to the end; the victim is
re-admitted and resumes from its last completed iteration. The event log must show every
iteration of every job trained exactly once, on the weights of that iteration.

Run by `crates/weave-cli/tests/serve_process.rs`; exit code 0 on success.
"""

import argparse
import re
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weave_client import WeaveClient  # noqa: E402
from server_process import Server, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BANDIT = os.path.join(HERE, "..", "examples", "bandit.py")


def say(msg):
    print(msg, flush=True)


def spec(job, iterations):
    # SLO 1.0: jobs never share nodes, so each holds one node of each pool.
    return {"id": job, "type": "3B_4k", "iterations": iterations, "slo": 1.0, "rollout_s": 50, "train_s": 60}


def driver(url, token, job, iterations, seed):
    cmd = [sys.executable, BANDIT, "--server", url, "--token", token, "--job", job,
           "--iterations", str(iterations), "--seed", str(seed), "--no-submit"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def check_log(events, iterations):
    """Every iteration trained exactly once, on its own weights; the victim re-admitted at its
    checkpoint."""
    for job, n in iterations.items():
        fin = [e for e in events if e["job"] == job and e["kind"] == "finish"]
        trained = sorted(e["iteration"] for e in fin if e["phase"] == "train")
        assert trained == list(range(n)), f"{job}: trained iterations {trained}"
        for e in fin:
            k = e["iteration"]
            if e["phase"] == "rollout":
                assert e["meta"]["weights_version"] == k, f"{job}: rollout {k} used {e['meta']}"
            else:
                assert e["meta"]["trajectory_version"] == k, f"{job}: training {k} consumed {e['meta']}"
                assert e["meta"]["new_weights_version"] == k + 1
    preempted = [e for e in events if e["kind"] == "preempted"]
    assert len(preempted) == 1, f"preemptions: {preempted}"
    victim = preempted[0]["job"]
    after = [e for e in events if e["job"] == victim and e["seq"] > preempted[0]["seq"]]
    done = max([e["iteration"] + 1 for e in events
                if e["job"] == victim and e["kind"] == "finish" and e["phase"] == "train"
                and e["seq"] < preempted[0]["seq"]], default=0)
    first_grant = next(e for e in after if e["kind"] == "grant")
    assert (first_grant["phase"], first_grant["iteration"]) == ("rollout", done), \
        f"{victim} resumed at {first_grant}, not rollout {done}"
    before = [e for e in events if e["job"] == victim and e["seq"] < preempted[0]["seq"]
              and e["kind"] in ("grant", "finish")]
    return victim, done, in_flight(before)


def in_flight(before):
    """What the victim's driver held when it was preempted, from its last grant or finish:

    - ``"nothing"``: its last training had finished; it asks for the rollout it resumes from
      and is told to wait, so it never needs to hear that it was re-queued;
    - ``"rollout granted"``: the server grants the next rollout the moment the previous
      training finishes, before the driver asks; the log cannot say whether the driver took
      the grant. If it did, its finish is refused and it hears ``Requeued``; if not, it
      waits as above. Either is right;
    - ``"trajectories"``: its rollout had finished (or training was granted); its next call,
      the training start or finish, is refused and it must hear ``Requeued``.
    """
    if not before or (before[-1]["kind"], before[-1]["phase"]) == ("finish", "train"):
        return "nothing"
    if (before[-1]["kind"], before[-1]["phase"]) == ("grant", "rollout"):
        return "rollout granted"
    return "trajectories"


def requeued_at(out):
    """The iterations the driver was told to resume from (``Requeued``), in order."""
    return [int(m) for m in re.findall(r"re-queued .*; it resumes from iteration (\d+)", out)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--alice", required=True)
    ap.add_argument("--bob", required=True)
    args = ap.parse_args()
    server = Server(args.serve_cmd)
    url = server.start()
    procs = {}
    try:
        ops = WeaveClient(url, args.admin)
        alice = WeaveClient(url, args.alice)
        bob = WeaveClient(url, args.bob)
        iterations = {"alice-1": 25, "alice-2": 25, "bob-1": 4}
        for job in ("alice-1", "alice-2"):
            view = alice.submit(spec(job, iterations[job]))["job"]
            assert view["state"] == "running", view
        procs["alice-1"] = driver(url, args.alice, "alice-1", iterations["alice-1"], 1)
        procs["alice-2"] = driver(url, args.alice, "alice-2", iterations["alice-2"], 2)
        wait_for("both of alice's jobs to complete 2 iterations",
                 lambda: all(alice.job(j)["job"]["completed_iterations"] >= 2 for j in ("alice-1", "alice-2")), 60)
        view = bob.submit(spec("bob-1", iterations["bob-1"]))["job"]
        assert view["state"] == "running", f"bob's job did not start at once: {view}"
        waiting = [q["id"] for q in ops.queue()]
        assert len(waiting) == 1 and waiting[0].startswith("alice-"), f"queue {waiting}"
        victim = waiting[0]
        say(f"bob-1 started at once; {victim} was preempted and waits: {ops.queue()[0]['queue_reason']}")

        server.kill()
        t0 = time.time()
        server.start()
        say(f"SIGKILLed and restarted weave serve ({time.time() - t0:.2f} s)")
        assert [q["id"] for q in ops.queue()] == [victim], ops.queue()
        assert bob.job("bob-1")["job"]["state"] == "running"

        procs["bob-1"] = driver(url, args.bob, "bob-1", iterations["bob-1"], 3)
        outs = {}
        for job, p in procs.items():
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, f"{job} failed:\n{out}\n{err}"
            say(out.strip())
            outs[job] = out
        for job in iterations:
            assert ops.job(job)["job"]["state"] == "completed", ops.job(job)
        victim_log, resumed_at, held = check_log(ops.events(), iterations)
        assert victim_log == victim
        told = requeued_at(outs[victim])
        # Decided from the event log: a driver holding trajectories must hear it was re-queued
        # (even if it was re-admitted before it asked again); one that held nothing must not;
        # whenever it hears it, it resumes from the log's checkpoint, and only once.
        if held == "trajectories":
            assert told == [resumed_at], f"{victim} held trajectories; its driver was told {told}:\n{outs[victim]}"
        elif held == "nothing":
            assert told == [], f"{victim} held nothing; its driver was told {told}:\n{outs[victim]}"
        else:
            assert told in ([], [resumed_at]), f"{victim}'s driver was told {told}:\n{outs[victim]}"
        for job in iterations:
            if job != victim:
                assert requeued_at(outs[job]) == [], f"{job} was never preempted:\n{outs[job]}"
        how = f"holding {held}, its driver told" if told else f"holding {held}, its driver waited"
        say(f"ok: {victim} preempted ({how}), resumed from iteration {resumed_at}; every iteration trained once")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        server.stop()


if __name__ == "__main__":
    main()
