"""The real-jobs experiment's fault scenarios (``--lose-node``, ``--kill-trainer``,
``--kill-rollout-mid-sync``, ``--notice-train-node``): each runs GRPO jobs under ``weave serve``,
injects a fault, and checks from the event log and the jobs' own logs that every job resumed
from exactly the iteration Weave counts and trained every iteration once on its own version."""

import json
import os
import shutil
import signal
import statistics
import time
from typing import Any, Dict, List

from weave_client import WeaveClient
from weave_client.runtime.harness import (Serve, check_versions, job_cmd, phases, run_jobs, say, start_jobs,
                                          wait_jobs, wait_until)

def node_loss(a, serve: Serve, ops: WeaveClient, prof: Dict[str, Dict[str, float]]) -> Dict[str, Any]:
    """The pair once more; halfway through, the rollout node is lost: both jobs' rollout
    workers are SIGKILLed and the node taken out of service, then a replacement comes up.
    Checks that each job resumed from exactly the iteration Weave counted (0 acknowledged
    iterations lost), trained every iteration once, and that its reward went on."""
    names = {k: f"loss-{k}" for k in "AB"}
    for k in "AB":
        spec = {"id": names[k], "type": "3B_4k", "iterations": a.iterations, "slo": 2.0,
                "rollout_s": prof[k]["rollout_s"], "train_s": prof[k]["train_s"], "switch_warm_s": prof[k]["warm_s"],
                "sync_s": prof[k]["gap_s"]}
        assert ops.submit(spec)["job"]["state"] == "running", f"{names[k]} was not admitted"
    running = start_jobs([job_cmd(a, serve.url, names[k], k, 29700 + i, ["--checkpoint-every", "1"])
                          for i, k in enumerate("AB")])
    wait_until(lambda: ops.job(names["A"])["job"]["completed_iterations"] >= a.iterations // 2, 600)
    for k in "AB":
        with open(os.path.join(a.work, names[k], "pids.json")) as f:
            os.kill(json.load(f)["rollout"], signal.SIGKILL)
    ops.node_down("r0", "rollout node lost: its processes were killed")
    acked = {k: ops.job(names[k])["job"]["completed_iterations"] for k in "AB"}
    time.sleep(1.0)
    ops.node_up("r0")
    wait_jobs(running)
    events = ops.events()
    out: Dict[str, Any] = {"acked_at_loss": acked}
    for k in "AB":
        name = names[k]
        check_versions(events, name, a.iterations)
        resumed = [(e.get("meta") or {}).get("resume_from") for e in events
                   if e["job"] == name and e["kind"] in ("requeued", "readmitted")]
        logs = phases(a.work, name)
        starts = [r["iteration"] for r in logs if r.get("role") == "trainer" and r.get("event") == "start"]
        # The launcher may see its processes die before the node is reported lost (and restart
        # the admission itself): then the job is re-admitted twice, each time from Weave's count.
        assert resumed and set(resumed) == {acked[k]} and starts[0] == 0 and set(starts[1:]) == {acked[k]}, \
            f"{name}: acknowledged {acked[k]}, Weave resumed from {resumed}, the trainer started at {starts}"
        reward = {r["iteration"]: r["mean_reward"] for r in logs if r.get("phase") == "rollout"}
        before = [reward[i] for i in range(max(0, acked[k] - 3), acked[k]) if i in reward]
        after = [reward[i] for i in range(acked[k], min(a.iterations, acked[k] + 3))]
        out[k] = {"resumed_from": acked[k], "acknowledged_lost": acked[k] - resumed[0],
                  "reward_before": statistics.mean(before) if before else None, "reward_after": statistics.mean(after),
                  "restarts": sum(1 for r in logs if r.get("event") == "restart")}
    say(f"node loss: resumed from {acked}, rewards before/after " +
        ", ".join(f"{k} {out[k]['reward_before']:.3f}/{out[k]['reward_after']:.3f}" for k in "AB"))
    return out


def killed_run(a, serve: Serve, ops: WeaveClient, name: str, inject: List[str], every: int) -> "tuple[List[int], list]":
    """Runs job A once as ``name`` with a fault injected; checks every iteration trained once on
    its own version. Returns the iterations its trainer started at and its restarts."""
    spec = {"id": name, "type": "3B_4k", "iterations": a.iterations, "slo": 2.0}
    assert ops.submit(spec)["job"]["state"] == "running", f"{name} was not admitted"
    run_jobs([job_cmd(a, serve.url, name, "A", 29800, ["--checkpoint-every", str(every), *inject])])
    check_versions(ops.events(), name, a.iterations)
    logs = phases(a.work, name)
    starts = [r["iteration"] for r in logs if r.get("role") == "trainer" and r.get("event") == "start"]
    return starts, [r for r in logs if r.get("event") == "restart"]


def trainer_killed(a, serve: Serve, ops: WeaveClient) -> Dict[str, Any]:
    """One job whose trainer SIGKILLs itself right after training ``c - 1`` is acknowledged,
    before the slack checkpoint of iteration ``c`` is written (``c`` a checkpoint iteration):
    no checkpoint on disk holds what Weave counts, only the trainer's staged copy in host
    memory. Checks that the job resumed from exactly Weave's count and trained every
    iteration once."""
    name, every = "killed-A", max(2, a.iterations // 2)
    starts, restarts = killed_run(a, serve, ops, name, ["--die-after-finish", str(every - 1)], every)
    assert starts == [0, every] and [r["iteration"] for r in restarts] == [every], \
        f"{name}: died after acknowledging {every}, the trainer started at {starts}, restarts {restarts}"
    say(f"trainer killed after acknowledging iteration {every} (before its checkpoint): resumed from {starts[1]}, "
        f"exit codes {restarts[0]['exit_codes']}")
    return {"acknowledged_at_kill": every, "resumed_from": starts[1], "acknowledged_lost": every - starts[1]}


def rollout_killed_mid_sync(a, serve: Serve, ops: WeaveClient) -> Dict[str, Any]:
    """One job whose rollout worker SIGKILLs itself while weights version ``v`` are on their way
    to it (header received, bytes not): training ``v - 1`` is acknowledged, so the job must
    resume from ``v``, never sample from a half-received model (every rollout's version is
    checked), and train every iteration once."""
    name, v = "sync-killed-A", max(2, a.iterations // 2)
    starts, restarts = killed_run(a, serve, ops, name, ["--die-mid-sync", str(v)], max(2, a.iterations))
    assert starts == [0, v] and [r["iteration"] for r in restarts] == [v], \
        f"{name}: its rollout worker died receiving version {v}; trainer starts {starts}, restarts {restarts}"
    say(f"rollout worker killed mid-sync of version {v}: the job resumed from {starts[1]}, "
        f"exit codes {restarts[0]['exit_codes']}")
    return {"version_in_flight": v, "resumed_from": starts[1], "acknowledged_lost": v - starts[1]}


def training_node_noticed(a, serve: Serve, ops: WeaveClient) -> Dict[str, Any]:
    """One job that checkpoints only at its end; halfway, its training node gets a preemption
    notice (a long one: the node goes when the test says). Once the trainer has trained under
    the notice, the node's host is lost: the job's processes and its driver SIGKILLed, its
    staged copies in host memory gone; the node is taken out of service and a replacement
    comes up, and the job's driver is started again from Weave's count (as the Ray backend
    relaunches). Only what the trainer did on hearing the notice (a checkpoint of every
    acknowledged iteration) holds that count: the job must resume from exactly it and train
    every iteration once."""
    from .checkpointing import staging_dir

    # Long enough that the notice (heard within a heartbeat, 1 s) lands mid-run.
    name, n = "noticed-A", max(a.iterations, 200)
    spec = {"id": name, "type": "3B_4k", "iterations": n, "slo": 2.0}
    assert ops.submit(spec)["job"]["state"] == "running", f"{name} was not admitted"
    cmd = job_cmd(a, serve.url, name, "A", 29850, ["--checkpoint-every", str(n)])
    cmd[cmd.index("--iterations") + 1] = str(n)
    (_, driver), = start_jobs([cmd])
    wait_until(lambda: ops.job(name)["job"]["completed_iterations"] >= n // 4, 600)
    node = ops.job(name)["job"]["training_nodes"][0]
    ops.node_notice(node, 3600, reason="spot reclaimed (test)")
    # The trainer heard it (its log says at which acknowledged iteration); two more trainings
    # are acknowledged under it before the host goes.
    heard = [None]

    def trained_on() -> bool:
        heard[0] = heard[0] or next((r for r in phases(a.work, name) if r.get("event") == "notice"), None)
        return heard[0] is not None and ops.job(name)["job"]["completed_iterations"] >= heard[0]["iteration"] + 2

    wait_until(trained_on, 600)
    driver.kill()
    with open(os.path.join(a.work, name, "pids.json")) as f:
        for pid in json.load(f).values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    driver.wait()
    shutil.rmtree(staging_dir(os.path.join(a.work, name)), ignore_errors=True)
    acked = ops.job(name)["job"]["completed_iterations"]
    ops.node_down(node, "preempted: the provider took it (test)")
    ops.node_up(node)
    wait_until(lambda: ops.job(name)["job"]["state"] == "running", 60)
    run_jobs([[*cmd, "--resume-from", str(acked)]])
    events = ops.events()
    check_versions(events, name, n)
    logs = phases(a.work, name)
    starts = [r["iteration"] for r in logs if r.get("role") == "trainer" and r.get("event") == "start"]
    assert starts == [0, acked], f"{name}: acknowledged {acked} when its node went, the trainer started at {starts}"
    in_phase = [r["checkpoint_on_notice_s"] for r in logs if r.get("checkpoint_on_notice_s") is not None]
    say(f"training node {node} noticed after iteration {heard[0]['iteration']}, lost with its host memory after "
        f"{acked}: resumed from {starts[1]}; {len(in_phase)} checkpoints written inside phases under the notice "
        f"(median {statistics.median(in_phase):.4f} s)")
    return {"acknowledged_at_loss": acked, "resumed_from": starts[1], "acknowledged_lost": acked - starts[1],
            "checkpoints_in_phase": len(in_phase), "checkpoint_s": statistics.median(in_phase)}
