"""Real jobs on Slurm under the full Weave policy: two reference GRPO jobs (PyTorch) that
`weave serve --backend slurm` places and launches as Slurm batch jobs on a local Slurm cluster
(run inside its switch's namespace with SLURM_CONF set, see scripts/slurm-local.sh; each job
step on its node's namespace and CPU set).

Checks: each admission is one Slurm job pinned to exactly the nodes Weave chose (`squeue`),
whose trainer step runs on the job's training node and rollout step on its rollout node (their
start records name `SLURMD_NODENAME`); `weave serve` SIGKILLed and restarted, then slurmctld
restarted, mid-run, launch nothing twice; the jobs' rollout node set DOWN in Slurm (`scontrol`)
mid-run: every job on it is re-admitted and relaunched by Weave and resumes from exactly
Weave's count; both complete every iteration, each trained once, the on-policy barrier held,
one Slurm job per admission. A launch Slurm refuses (a server sending to a partition that
does not exist) fails its job with Slurm's message, the job kept. Prints what it measured as
JSON on the last line.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
from check_ray import check_barrier, exclusive, phase_spans  # noqa: E402
from check_ray_grpo import JOBS, check_resumed_trainers, lose_rollout_node, submit  # noqa: E402
from server_process import Server, wait_for  # noqa: E402
from weave_client import WeaveClient  # noqa: E402
from weave_client.runtime import experiment  # noqa: E402

# The network interface every node of slurm-local.sh has: gloo's process group binds it.
NODE_NIC = "wv0"


def say(msg):
    print(f"check_slurm_grpo: {msg}", flush=True)


def squeue():
    """[(Slurm job id, name, state, nodes)] of every job Slurm lists."""
    out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i|%j|%T|%N"], capture_output=True, text=True,
                         check=True).stdout
    return [tuple(line.split("|")) for line in out.splitlines() if line.strip()]


def slurm_jobs_of(view):
    """Slurm's jobs for this admission of the job (named `weave-<instance>-<job>-<uid>`)."""
    return [j for j in squeue() if j[1].endswith(f"-{view['id']}-{view['uid']}") and j[1].startswith("weave-")]


def expand(nodes):
    """Slurm's compressed host list (`r[0-1],t0`) as names."""
    out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


def starts(args, job):
    """The start records of the job's processes so far (none before its log exists)."""
    try:
        return [r for r in experiment.phases(args.checkpoints, job) if r.get("event") == "start"]
    except FileNotFoundError:
        return []


def step_nodes(args, view):
    """{role: node} from the newest start record of each of the job's processes (the steps of
    the current launch, once it has started both)."""
    return {r["role"]: r["node"] for r in starts(args, view["id"]) if "node" in r}


def check_placement(args, view, started_before=0):
    """The admission's Slurm job runs on exactly Weave's nodes, and its trainer and rollout
    steps on the nodes of their phases."""
    sid = f"{view['id']} (uid {view['uid']})"
    running = wait_for(f"{sid}'s Slurm job running", lambda: [j for j in slurm_jobs_of(view) if j[2] == "RUNNING"],
                       300, explain=lambda: squeue())
    assert len(running) == 1, (sid, running)
    colocated = "coloc" in (view["placement"] or "") or not view["rollout_nodes"]
    rollout_on = view["training_nodes"] if colocated else view["rollout_nodes"]
    assert expand(running[0][3]) == sorted(set(view["rollout_nodes"]) | set(view["training_nodes"])), (sid, running)

    def started():
        n = len(starts(args, view["id"]))
        nodes = step_nodes(args, view)
        return nodes if n >= started_before + 2 and len(nodes) == 2 else None
    nodes = wait_for(f"{sid}'s steps started", started, 300)
    assert nodes == {"trainer": view["training_nodes"][0], "rollout": rollout_on[0]}, (sid, nodes, view)
    say(f"{sid}: Slurm job {running[0][0]} on {running[0][3]}; steps {nodes}, as Weave chose")
    return {"slurm_job": running[0][0], "steps": nodes}


def restart_both(args, c, server, views):
    """`weave serve` SIGKILLed and restarted, then slurmctld restarted, once every job has
    run `--kill-after` iterations: afterwards each admission still has exactly one Slurm job."""
    wait_for("iterations before the restarts", lambda: all(
        c.job(v["id"])["job"]["completed_iterations"] >= args.kill_after for v in views), args.timeout_s)
    before = {v["id"]: slurm_jobs_of(c.job(v["id"])["job"]) for v in views}
    server.kill()
    url = server.start()
    say(f"weave serve SIGKILLed and restarted at {url}")
    subprocess.run(args.restart_controller, shell=True, check=True)
    time.sleep(3)  # a few of the backend's rounds against the restarted controller
    for v in views:
        now = slurm_jobs_of(c.job(v["id"])["job"])
        assert [j[0] for j in now] == [j[0] for j in before[v["id"]]], (v["id"], before[v["id"]], now)
    say("after both restarts each admission still has its one Slurm job")
    return WeaveClient(url, args.token)


def drain_training_node(args, c, views):
    """The jobs' training node drained in Slurm while they run on it: Slurm keeps it
    `draining` (its jobs go on), and Weave reads that as a preemption notice on it, giving
    Slurm's reason; the jobs go on to complete (they finish well before the notice runs out)."""
    node = views[0]["training_nodes"][0]
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=weave-e2e-drain"], check=True)

    def noticed():
        notices = c._request("GET", "/v1/cluster")[1]["notices"]
        return [n for n in notices if n["node"] == node]
    notice = wait_for(f"Weave's notice on {node}", noticed, 30)[0]
    assert "weave-e2e-drain" in notice["reason"], notice
    say(f"{node} drained in Slurm while the jobs run on it: Weave's notice says {notice['reason']!r}")
    return notice["reason"]


def check_refused_launch(args):
    """A server that launches into a partition Slurm does not have: the job fails with
    Slurm's message and is kept (listed, failed, its reason readable)."""
    server = Server(args.refused_serve_cmd)
    try:
        c = WeaveClient(server.start(), args.token)
        submit(c, args, "refused", 4, 1, 100.0, 100.0, driver="slurm_grpo")
        job = wait_for("the refused launch to fail the job", lambda: (lambda j: j if j["state"] == "failed" else None)(
            c.job("refused")["job"]), 60)
        assert "Invalid partition" in (job.get("failure") or ""), job
        say(f"a launch Slurm refused: job {job['state']}: {job['failure']}")
        return job["failure"]
    finally:
        server.stop()


def run(args, server, c):
    refused = check_refused_launch(args) if args.refused_serve_cmd else None
    env = {"GLOO_SOCKET_IFNAME": NODE_NIC}
    views = [submit(c, args, *job, driver="slurm_grpo", env=env) for job in JOBS]
    for v in views:
        say(f"admitted {v['id']}: {v['placement']}: rollout {v['rollout_nodes']}, training {v['training_nodes']}")
    placed = {v["id"]: check_placement(args, v) for v in views}
    if args.restart_controller:
        c = restart_both(args, c, server, views)
    before = {v["id"]: len(starts(args, v["id"])) for v in views}
    resumed = lose_rollout_node(args, c, views, check=lambda now: check_placement(args, now, before[now["id"]]))
    drained = drain_training_node(args, c, views) if args.drain else None
    for v in views:
        wait_for(f"{v['id']} to complete", lambda v=v: c.job(v["id"])["job"]["state"] == "completed", args.timeout_s)
        assert c.job(v["id"])["job"]["completed_iterations"] == args.iterations
    events = c.events()
    for v in views:
        check_barrier(events, v["id"], args.iterations)
    check_resumed_trainers(args, resumed)
    spans = phase_spans(events)
    if len({tuple(v["training_nodes"]) for v in views}) == 1:
        exclusive([s for s in spans if s[1] == "train"], "training pool")
    launches = {}
    for _, name, _, _ in squeue():
        launches[name] = launches.get(name, 0) + 1
    assert launches and all(n == 1 for n in launches.values()), f"Slurm jobs per name: {launches}"
    rewards = {}
    for v in views:
        r = [s[5]["mean_reward"] for s in sorted(spans, key=lambda s: s[3])
             if s[0] == v["id"] and s[1] == "rollout" and s[5] is not None]
        rewards[v["id"]] = {"first": r[0], "last": r[-1]}
    for v in views:
        trained = sorted(e["iteration"] for e in events if e["job"] == v["id"] and e["kind"] == "finish"
                         and e["phase"] == "train")
        assert trained == list(range(args.iterations)), f"{v['id']}: trained iterations {trained}"
    say(f"both completed {args.iterations} iterations; barrier held; one Slurm job per admission "
        f"({len(launches)} in all); rewards {rewards}")
    print(json.dumps({"placement": {v["id"]: v["placement"] for v in views}, "placed": placed, "drain": drained,
                      "resumed_from": resumed, "slurm_jobs": launches, "rewards": rewards,
                      "refused": refused, "starts": {v["id"]: len(starts(args, v["id"])) for v in views}}), flush=True)


def driver_logs(out_dir):
    """The end of every launch's output, to see why a run failed."""
    for path in sorted(glob.glob(os.path.join(out_dir, "*.out"))):
        with open(path, errors="replace") as f:
            tail = "\n".join(f.read().splitlines()[-30:])
        print(f"--- {os.path.basename(path)}:\n{tail}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True, help="starts `weave serve --backend slurm` in the namespace")
    ap.add_argument("--token", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--slurm-output", required=True, help="the server's --slurm-output directory")
    ap.add_argument("--python", default=sys.executable, help="the Python the jobs run (with torch)")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--kill", required=True, help="command that takes a node out ({node} is replaced)")
    ap.add_argument("--kill-after", type=int, default=3, help="... once every job completed this many iterations")
    ap.add_argument("--restart-controller", help="command that restarts slurmctld: with it, weave serve and then "
                    "slurmctld are restarted mid-run")
    ap.add_argument("--drain", action="store_true", help="after the lost node, drain the jobs' training node "
                    "in Slurm: Weave must read it as a notice")
    ap.add_argument("--refused-serve-cmd", help="first check a launch Slurm refuses, on a server this starts "
                    "(sending launches to a partition Slurm lacks)")
    args = ap.parse_args()
    server = Server(args.serve_cmd)
    try:
        run(args, server, WeaveClient(server.start(), args.token))
    except BaseException:
        driver_logs(args.slurm_output)
        raise
    finally:
        server.stop()


if __name__ == "__main__":
    main()
