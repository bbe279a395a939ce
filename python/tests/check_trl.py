"""TRL's GRPOTrainer under Weave's gate (`weave_client.integrations.trl`, the example
`python/examples/trl_grpo.py`: a model built in code learning to answer with one word).

1. Cost: the same job alone under `weave serve` (gated, a checkpoint every step, as Weave's
   exact resume needs), as plain TRL with the same checkpoints, and as plain TRL without them;
   the median seconds per step of each, and the gate's own seconds, are reported (timing is
   never asserted on a shared machine).
2. Learning and preemption on an owned cluster (one node per pool, preemption on): alice's TRL
   job borrows the cluster; while it holds the training of iteration `--preempt-after` open
   (the example's `--hold-at`) bob's bandit job (his quota) arrives and preempts it; alice's
   trainer hears `Requeued`, waits, and resumes from the checkpoint of exactly Weave's count
   once bob's job is done. Checks: every iteration
   of alice's trained exactly once (the event log), the trainer resumed where Weave said, its
   reward went on where it was (the mean of the three iterations after the resume at least
   that of the three before, less 0.15), and it learned (mean reward >= 0.9 of its maximum,
   1.0, over its last ten iterations).
Prints the measurements as JSON on the last line; exit code 0 on success.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from weave_client import WeaveClient, WeaveError  # noqa: E402
from server_process import Server, wait_for  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "examples", "trl_grpo.py")
BANDIT = os.path.join(HERE, "..", "examples", "bandit.py")


def say(msg):
    print(f"check_trl: {msg}", flush=True)


def trl_job(args, out_dir, *extra):
    cmd = [args.python, "-W", "ignore", EXAMPLE, "--iterations", str(args.iterations), "--dir", out_dir, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc, what):
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def cost(args, rounds=2):
    """Seconds per step: gated alone, plain with the same checkpoints, plain without; each run
    `rounds` times, the three taking turns (the machine is shared: its noise moves single runs
    by 30%), the medians over every steady step of a kind's runs."""
    runs = {"weave": [], "plain": [], "plain_no_save": []}
    for r in range(rounds):
        server = Server(args.alone_serve_cmd.replace("/data", f"/data{r}"))
        try:
            url = server.start()
            runs["weave"].append(result(trl_job(args, os.path.join(args.work, f"alone{r}"), "--server", url,
                                                "--token", args.admin, "--job", f"trl-alone-{r}", "--submit"),
                                        "the gated job"))
        finally:
            server.stop()
        runs["plain"].append(result(trl_job(args, os.path.join(args.work, f"plain{r}"), "--no-weave"), "plain TRL"))
        runs["plain_no_save"].append(result(trl_job(args, os.path.join(args.work, f"nosave{r}"), "--no-weave",
                                                    "--no-save"), "plain TRL without checkpoints"))
    step = {k: statistics.median(s for run in v for s in run["step_s"]) for k, v in runs.items()}
    gate = statistics.mean(run["costs"]["gate_s"] for run in runs["weave"]) / args.iterations
    offload = statistics.mean(run["costs"]["offload_s"] for run in runs["weave"]) / args.iterations
    assert [r for _, r in runs["weave"][0]["rewards"]] == [r for _, r in runs["plain"][0]["rewards"]], \
        "the gate changed what the job learned"
    out = {"step_s": {k: round(v, 5) for k, v in step.items()}, "gate_s_per_iteration": round(gate, 5),
           "offload_s_per_iteration": round(offload, 6),
           "gated_over_plain": round(step["weave"] / step["plain"], 3),
           "gate_share_of_plain_step": round(gate / step["plain"], 3),
           "checkpoint_over_no_save": round(step["plain"] / step["plain_no_save"], 3)}
    say(f"seconds per step (median of {rounds} runs each): {out['step_s']}; the gate {gate * 1e3:.1f} ms per "
        f"iteration ({out['gate_share_of_plain_step']:.1%} of a plain step), offload {offload * 1e3:.3f} ms; gated / "
        f"plain {out['gated_over_plain']}; a checkpoint every step costs {out['checkpoint_over_no_save']}x; the "
        f"gated job's rewards equal plain TRL's, iteration for iteration")
    return out


def check_log(events, job, n):
    fin = [e for e in events if e["job"] == job and e["kind"] == "finish"]
    trained = sorted(e["iteration"] for e in fin if e["phase"] == "train")
    assert trained == list(range(n)), f"{job}: trained iterations {trained}"
    for e in fin:
        if e["phase"] == "rollout":
            assert e["meta"]["weights_version"] == e["iteration"], e
        else:
            assert e["meta"]["new_weights_version"] == e["iteration"] + 1, e


def preemption(args):
    server = Server(args.serve_cmd)
    procs = []
    try:
        url = server.start()
        ops, bob = WeaveClient(url, args.admin), WeaveClient(url, args.bob)
        # Alice holds iteration `preempt_after`'s training open until bob's job has preempted
        # her: the preemption lands inside a phase, so her report is refused and she resumes
        # from a checkpoint. (Preempted while waiting between phases, a driver asks for exactly
        # the iteration Weave resumes from and goes on with its warm state: nothing to reload.)
        os.makedirs(args.work, exist_ok=True)
        release = os.path.join(args.work, "alice-release")
        alice = trl_job(args, os.path.join(args.work, "alice"), "--server", url, "--token", args.alice, "--job",
                        "trl-alice", "--submit", "--priority", "normal", "--hold-at", str(args.preempt_after),
                        "--hold-file", release)
        procs.append(alice)
        wait_for(f"alice's TRL job to hold its training of iteration {args.preempt_after}",
                 lambda: os.path.exists(release + ".held"), 600)
        view = bob.submit({"id": "bob-1", "type": "3B_4k", "iterations": 4, "slo": 1.0, "rollout_s": 50,
                           "train_s": 60, "priority": "high"})["job"]
        assert view["state"] == "running", f"bob's job did not start at once: {view}"
        queued = [q["id"] for q in ops.queue()]
        assert queued == ["trl-alice"], f"queue {queued}"
        at = _count(ops, "trl-alice")
        assert at == args.preempt_after, f"alice counted {at} iterations while holding {args.preempt_after}'s training"
        open(release, "w").close()
        say(f"bob-1 started; alice's TRL job preempted in its training after {at} iterations, waiting")
        bandit = subprocess.Popen([sys.executable, BANDIT, "--server", url, "--token", args.bob, "--job", "bob-1",
                                   "--iterations", "4", "--no-submit"], stdout=subprocess.PIPE, text=True)
        procs.append(bandit)
        bandit.communicate(timeout=300)
        assert bandit.returncode == 0, "bob's job failed"
        r = result(alice, "alice's TRL job")
        events = ops.events()
        check_log(events, "trl-alice", args.iterations)
        assert r["resumed_from"] == [at], f"resumed from {r['resumed_from']}, Weave counted {at}"
        rewards = dict((k, v) for k, v in r["rewards"])
        before = statistics.mean(rewards[k] for k in range(at - 3, at))
        after = statistics.mean(rewards[k] for k in range(at, at + 3))
        last = statistics.mean(rewards[k] for k in range(args.iterations - 10, args.iterations))
        assert after >= before - 0.15, f"reward {before:.3f} before the preemption, {after:.3f} after"
        assert last >= 0.9, f"mean reward over the last ten iterations {last:.3f} < 0.9"
        first = next(k for k in sorted(rewards) if statistics.mean(
            rewards[j] for j in range(k, min(k + 5, args.iterations))) >= 0.9)
        say(f"alice resumed from exactly {at}; reward {before:.3f} over the three iterations before, {after:.3f} "
            f"after; every iteration trained once; the mean of five reaches 0.9 at iteration {first}; last ten "
            f"{last:.3f}")
        return {"preempted_at": at, "reward_before": round(before, 4), "reward_after": round(after, 4),
                "reward_last10": round(last, 4), "reaches_0_9_at": first}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


def _count(client, job):
    """The job's completed iterations (0 before its driver has submitted it)."""
    try:
        return client.job(job)["job"]["completed_iterations"]
    except WeaveError as e:
        if e.status == 404:
            return 0
        raise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True, help="weave serve on one node per pool, preemption on")
    ap.add_argument("--alone-serve-cmd", required=True, help="weave serve for the job alone (its cost)")
    ap.add_argument("--admin", required=True)
    ap.add_argument("--alice", required=True)
    ap.add_argument("--bob", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable, help="a Python with the trl extra")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--preempt-after", type=int, default=20)
    args = ap.parse_args()
    out = {"preemption": preemption(args), "cost": cost(args)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
