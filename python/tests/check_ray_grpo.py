"""Real jobs on Ray under the full Weave policy: two reference GRPO jobs (PyTorch) that
`weave serve --backend ray` places and launches on a local multi-node Ray cluster (run inside
its private network namespace, see scripts/ray-local.sh; the cluster's Python needs the
`torch` extra and Ray).

A rollout-heavy job (8-digit sorting, one update pass) and a training-heavy one (4 digits,
five passes) are submitted with `launch` sections that run `weave_client.runtime.ray_grpo`.
Checks: Weave runs them (placement as the full policy decides, reported), Ray's State API puts
each job's `Trainer` actor on the training node Weave chose and its `RolloutWorker` on its
rollout node (its training node when Weave co-locates it), both jobs complete every
iteration, each rollout sampled with its own iteration's weights and each training produced
the next version (the on-policy barrier), no two jobs held the training pool at once, and one
Ray submission per admission. Prints what it measured as JSON on the last line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
from check_ray import (  # noqa: E402
    actors_nodes,
    check_barrier,
    exclusive,
    launches_per_admission,
    phase_spans,
    ray_get,
)
from server_process import Server, wait_for  # noqa: E402
from weave_client import WeaveClient  # noqa: E402
from weave_client.runtime import experiment  # noqa: E402

# name, digits, GRPO passes, declared rollout / training seconds (steer placement: complementary)
JOBS = (("sort-a", 8, 1, 300.0, 100.0), ("sort-b", 4, 5, 100.0, 300.0))


def say(msg):
    print(f"check_ray_grpo: {msg}", flush=True)


def submit(c, args, name, digits, epochs, rollout_s, train_s, driver="ray_grpo", env=None):
    """Submits one reference job that Weave launches through ``weave_client.runtime.<driver>``."""
    entry = (f"{args.python} -m weave_client.runtime.{driver} --dir {args.checkpoints}/{name} --digits {digits} "
             f"--epochs {epochs} --prompts {args.prompts} --rollout-cpus 0 --train-cpus 1 --checkpoint-every 4")
    env = {"PYTHONPATH": os.path.join(ROOT, "python"), **(env or {})}
    spec = {"id": name, "type": "3B_4k", "iterations": args.iterations, "slo": 2.0, "rollout_s": rollout_s,
            "train_s": train_s, "launch": {"entrypoint": entry, "env": env}}
    return c.submit(spec)["job"]


def check_placement(ray, view):
    """Each actor on the node Weave chose for its phase (both on the training node when co-located)."""
    sid = f"{view['id']} (uid {view['uid']})"
    placed = wait_for(f"{sid}'s actors", lambda: (lambda p: p if len(p) == 2 else None)(actors_nodes(ray, view)), 300)
    colocated = "coloc" in (view["placement"] or "") or not view["rollout_nodes"]
    rollout_on = view["training_nodes"] if colocated else view["rollout_nodes"]
    assert placed["Trainer"] == sorted(view["training_nodes"])[:1], (sid, placed, view)
    assert placed["RolloutWorker"] == sorted(rollout_on)[:1], (sid, placed, view)
    say(f"{sid}: Ray State API puts its actors on {placed}, as Weave chose")
    return placed


def work_span_s(events, jobs):
    """From the jobs' first grant to their last finish (server clock): the span of the work,
    without process and actor start-up."""
    mine = [e for e in events if e["job"] in jobs and e["kind"] in ("grant", "finish")]
    return (max(e["time_us"] for e in mine) - min(e["time_us"] for e in mine)) / 1e6


def job_spans_s(events, jobs):
    """Each job's first grant and last finish, in seconds from the first grant of any of them."""
    mine = [e for e in events if e["job"] in jobs and e["kind"] in ("grant", "finish")]
    t0 = min(e["time_us"] for e in mine)
    return {j: [round((f(e["time_us"] for e in mine if e["job"] == j) - t0) / 1e6, 1) for f in (min, max)]
            for j in jobs}


def period_s(events, job, lo=0, hi=float("inf")):
    """Median time between the job's consecutive rollout grants inside [lo, hi] (server µs),
    skipping its first two iterations (start-up): its iteration time in steady state."""
    starts = [e["time_us"] for e in events if e["job"] == job and e["kind"] == "grant" and e["phase"] == "rollout"
              and e["iteration"] >= 2 and lo <= e["time_us"] <= hi]
    gaps = sorted(b - a for a, b in zip(starts, starts[1:]))
    return gaps[len(gaps) // 2] / 1e6 if gaps else float("nan")


def pair_period_s(events, jobs):
    """The pair's meta-iteration while both run: the mean of the jobs' steady iteration times
    inside the window where both do."""
    lo = max(min(e["time_us"] for e in events if e["job"] == j and e["kind"] == "grant") for j in jobs)
    hi = min(max(e["time_us"] for e in events if e["job"] == j and e["kind"] == "finish") for j in jobs)
    return statistics.mean(period_s(events, j, lo, hi) for j in jobs)


def lose_rollout_node(args, c, views, check=None):
    """Kills the rollout node the jobs use once each completed `--kill-after` iterations: every
    job on it must be failed, re-admitted elsewhere and relaunched by Weave, its new driver
    resuming from exactly the iteration Weave counts; ``check(view)`` checks where the new
    launch runs (default: its Ray actors). Returns {job: resume_from}."""
    check = check or (lambda view: check_placement(args.ray, view))
    wait_for(f"{args.kill_after} iterations each", lambda: all(
        c.job(v["id"])["job"]["completed_iterations"] >= args.kill_after for v in views), args.timeout_s)
    node = views[0]["rollout_nodes"][0]
    hit = [v for v in views if node in v["rollout_nodes"]]
    say(f"killing rollout node {node} (used by {[v['id'] for v in hit]})")
    subprocess.run(args.kill.replace("{node}", node), shell=True, check=True)

    def readmitted(v):
        # A process of the job may die before Ray reports the node lost: the driver then asks
        # for a restart, re-admitted in place; Weave moves the job once it knows. Wait for that.
        j = c.job(v["id"])
        # Re-admitted at once, or queued until there is room ("requeued"): both resume there.
        again = [e["meta"]["resume_from"] for e in j["history"] if e["kind"] in ("readmitted", "requeued")]
        moved = j["job"]["state"] in ("running", "completed") and node not in j["job"]["rollout_nodes"]
        return (again, j["job"]) if again and moved else None

    resumed = {}
    for v in hit:
        try:
            again, now = wait_for(f"{v['id']} to be re-admitted off {node}", lambda v=v: readmitted(v), 180)
        except AssertionError:
            j = c.job(v["id"])
            say(f"{v['id']}: {j['job']['state']} on {j['job']['rollout_nodes']}, "
                f"history {[e['kind'] for e in j['history'] if e['kind'] not in ('grant', 'finish')]}")
            raise
        check(now)
        resumed[v["id"]] = again
        say(f"{v['id']} re-admitted from iterations {again} (the last onto {now['rollout_nodes']} + "
            f"{now['training_nodes']})")
    return resumed


def trainer_records(args, job):
    return [r for r in experiment.phases(args.checkpoints, job) if r.get("role") == "trainer"]


def sync_figures(args, jobs):
    """Each job's weight syncs (trainer -> rollout worker, digest and answer included): median
    seconds and bytes, and with `--link-mbit` the share of the link's rate they reached."""
    out = {}
    for job in jobs:
        syncs = [r for r in trainer_records(args, job) if "sync_s" in r]
        if not syncs:
            continue
        s, b = statistics.median(r["sync_s"] for r in syncs), syncs[-1]["sync_bytes"]
        out[job] = {"syncs": len(syncs), "median_s": round(s, 5), "bytes": b}
        if args.link_mbit:
            line_s = b * 8 / (args.link_mbit * 1e6)
            out[job].update(line_rate_s=round(line_s, 5), of_line_rate=round(line_s / s, 3))
        say(f"{job}: {len(syncs)} weight syncs, median {s * 1e3:.1f} ms for {b / 1e6:.3f} MB"
            + (f" ({line_s * 1e3:.1f} ms at {args.link_mbit:g} Mbit/s: {line_s / s:.0%} of line rate)"
               if args.link_mbit else ""))
    return out


def check_resumed_trainers(args, resumed):
    """Every trainer started after a re-admission started from exactly that re-admission's
    iteration, and the last one from the last (a relaunch stopped before its actors were placed
    starts none)."""
    for job, again in resumed.items():
        starts = [r["iteration"] for r in trainer_records(args, job) if r.get("event") == "start"]
        assert set(starts[1:]) <= set(again) and starts[-1] == again[-1], \
            f"{job}: trainers started at {starts}, Weave re-admitted it from {again}"
        say(f"{job}: trainer starts at iterations {starts} (Weave's resume points {again})")


def solo_spans(args, c):
    """Each job alone, one after the other, on the same cluster: the baseline of the pair."""
    spans = {}
    for name, *rest in JOBS:
        solo = f"{name}-solo"
        submit(c, args, solo, *rest)
        wait_for(f"{solo} to complete", lambda: c.job(solo)["job"]["state"] == "completed", args.timeout_s)
        events = c.events()
        spans[name] = (work_span_s(events, {solo}), period_s(events, solo))
        say(f"{solo}: {args.iterations} iterations alone in {spans[name][0]:.1f} s of work, "
            f"{spans[name][1]:.3f} s per iteration in steady state")
    return spans


def predicted_meta(args, events, names):
    """The pair's measured meta-iteration against what `weave group analyze` predicts from
    the jobs' measured phases: from their solo runs (what admission was told) and from the pair
    run itself (the schedule model on its own inputs), as the runtime's experiment does."""
    work = argparse.Namespace(work=args.checkpoints, weave=args.serve_cmd.split()[0])
    keys = dict(zip("AB", names))
    solo = {k: experiment.profile(events, experiment.phases(work.work, f"{n}-solo"), f"{n}-solo")
            for k, n in keys.items()}
    pair = {k: experiment.profile(events, experiment.phases(work.work, n), n) for k, n in keys.items()}
    for k in keys:
        pair[k]["gap_s"] = solo[k]["gap_s"]
    measured = statistics.median(experiment.periods(events, keys["A"], 3) + experiment.periods(events, keys["B"], 3))
    out = {"measured_s": round(measured, 4)}
    for what, prof in (("from_solo", solo), ("from_pair", pair)):
        p, _ = experiment.predict(work, prof, f"group-{what}.json")
        out[f"predicted_{what}_s"] = round(p, 4)
        out[f"error_{what}"] = round(measured / p - 1, 3)
    say(f"meta-iteration measured {measured:.4f} s; predicted from the pair's phases {out['predicted_from_pair_s']} s "
        f"({out['error_from_pair']:+.1%}), from the solo runs {out['predicted_from_solo_s']} s "
        f"({out['error_from_solo']:+.1%})")
    return out


def run(args, c):
    solo = solo_spans(args, c) if args.compare_solo else None
    t0 = time.time()
    views = [submit(c, args, *job) for job in JOBS]
    for v in views:
        say(f"admitted {v['id']}: {v['placement']}: rollout {v['rollout_nodes']}, "
            f"training {v['training_nodes']}, group {v['group']}")
    placed = {v["id"]: check_placement(args.ray, v) for v in views}
    resumed = lose_rollout_node(args, c, views) if args.kill else {}
    for v in views:
        wait_for(f"{v['id']} to complete", lambda v=v: c.job(v["id"])["job"]["state"] == "completed", args.timeout_s)
        assert c.job(v["id"])["job"]["completed_iterations"] == args.iterations
    wall_s = time.time() - t0
    events = c.events()
    if args.events:
        with open(args.events, "w") as f:
            json.dump(events, f)
    for v in views:
        check_barrier(events, v["id"], args.iterations)
    check_resumed_trainers(args, resumed)
    spans = phase_spans(events)
    same_pool = len({tuple(v["training_nodes"]) for v in views}) == 1
    if same_pool:
        exclusive([s for s in spans if s[1] == "train"], "training pool")
    launches = launches_per_admission(args.ray)
    assert launches and all(n == 1 for n in launches.values()), f"launches: {launches}"
    rewards = {}
    for v in views:
        r = [s[5]["mean_reward"] for s in sorted(spans, key=lambda s: s[3])
             if s[0] == v["id"] and s[1] == "rollout" and s[5] is not None]
        rewards[v["id"]] = {"first": r[0], "last": r[-1]}
    switches = {v["id"]: sorted({s[5].get("switch") for s in spans if s[0] == v["id"] and s[5]}) for v in views}
    # Admission to the first ask, per admission (a launched job joins its group then).
    started = {v["id"]: [round(e["meta"]["waited_s"], 1) for e in events if e["job"] == v["id"] and e["kind"] == "ready"]
               for v in views}
    say(f"start-up, admission to first ask (s, per admission): {started}")
    say(f"both completed {args.iterations} iterations in {wall_s:.0f} s; barrier held; one Ray submission per "
        f"admission; rewards {rewards}")
    out = {}
    if solo is not None:
        pair = work_span_s(events, {v["id"] for v in views})
        meta = pair_period_s(events, [v["id"] for v in views])
        solo_work = sum(w for w, _ in solo.values())
        out = {"solo_work_s": {k: round(w, 1) for k, (w, _) in solo.items()}, "pair_work_s": round(pair, 1),
               "gain": round(solo_work / pair, 3), "pair_spans_s": job_spans_s(events, [v["id"] for v in views]),
               "solo_period_s": {k: round(p, 4) for k, (_, p) in solo.items()}, "pair_period_s": round(meta, 4),
               "steady_gain": round(sum(p for _, p in solo.values()) / meta, 3),
               "meta_iteration": predicted_meta(args, events, [v["id"] for v in views])}
        say(f"one after the other {solo_work:.1f} s of work, co-executed {pair:.1f} s: {out['gain']:.2f}x; "
            f"steady state {out['steady_gain']:.2f}x (solo periods {out['solo_period_s']}, pair {meta:.4f} s)")
    print(json.dumps({
        **out,
        "wall_s": round(wall_s, 1),
        "groups": {v["id"]: v["group"] for v in views},
        "placement": {v["id"]: v["placement"] for v in views},
        "actors": placed,
        "shared_training_pool": same_pool,
        "rewards": rewards,
        "resumed_from": resumed,
        "switches": switches,
        "started_after_s": started,
        "sync": sync_figures(args, [v["id"] for v in views]),
    }), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True, help="starts `weave serve --backend ray` inside the namespace")
    ap.add_argument("--token", required=True)
    ap.add_argument("--ray", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--python", default=sys.executable, help="the Python the jobs' drivers run (torch and Ray)")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--kill", help="command that kills a node ({node} is replaced): lose the jobs' rollout node")
    ap.add_argument("--kill-after", type=int, default=3, help="... once every job completed this many iterations")
    ap.add_argument("--events", help="write the server's event log here (JSON)")
    ap.add_argument("--link-mbit", type=float, help="the inter-pool link's rate (ray-local.sh's WEAVE_RAY_LINK_MBIT): "
                    "weight syncs are reported against it")
    ap.add_argument("--compare-solo", action="store_true",
                    help="first run each job alone, one after the other, and report the pair's gain over that")
    args = ap.parse_args()
    server = Server(args.serve_cmd)
    try:
        run(args, WeaveClient(server.start(), args.token))
    except BaseException:
        driver_logs(args.ray)
        raise
    finally:
        server.stop()


def driver_logs(ray):
    """The end of every launched driver's log (Ray's Job API), to see why a run failed."""
    try:
        for j in ray_get(ray, "/api/jobs/"):
            if "weave_job" in (j.get("metadata") or {}):
                logs = ray_get(ray, f"/api/jobs/{j['submission_id']}/logs").get("logs", "")
                tail = "\n".join(logs.splitlines()[-40:])
                print(f"--- Ray job {j['submission_id']} ({j.get('status')}):\n{tail}", file=sys.stderr, flush=True)
    except OSError as e:
        print(f"(could not read the drivers' logs from Ray: {e})", file=sys.stderr)


if __name__ == "__main__":
    main()
