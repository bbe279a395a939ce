"""A toy synchronous RL job: a policy-gradient learner on a multi-armed bandit.

Each iteration k: the rollout samples actions with the policy of weights version k (the
trajectories carry that version); the training step consumes exactly those trajectories
(it refuses any other version) and produces weights version k + 1. Both phases run inside
Weave's gate, and report the versions they used as phase metadata, so the server's event log
shows which weights every step consumed.

The job checkpoints after every iteration (in memory: the weights and the random stream). If
Weave re-queues it (preempted for another job, or its node lost), the gate raises
``Requeued`` and the job restores the checkpoint of the iteration it resumes from.

With ``--prompts N`` an on-policy rollout is N prompts (one sampled action each, seeded by the
prompt) generated on one worker per rollout node of the job (``weave_client.rollout_pool``),
``--prompt-s`` seconds each. When a preemption notice names one of those nodes (in a grant, or
in a heartbeat's answer mid-rollout), its prompts move to the other workers: the rollout
finishes there, and the training reports the prompts it consumed, each exactly once. When
the rollout's grant names rollout nodes lent to it (``weave serve --lending``: another group's
idle nodes), a worker starts on each once the borrowed engine is loaded (``load_in_s``) and
takes a share of the queued prompts; by the reclaim deadline (``reclaim_in_s``, brought
forward if a heartbeat says so) their prompts move back and the driver returns the loan.

With ``--staleness k`` it is a bounded off-policy job (as AReaL's or veRL's one-step
off-policy): a rollout thread and a training thread, one per lane. Rollout n samples with the
weights version its grant names (at most k behind), which may be older than the newest; the
training step corrects for the lag with clipped importance weights and reports it.
"""

import argparse
import math
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from weave_client import Requeued, WeaveClient  # noqa: E402
from weave_client.rollout_pool import RolloutPool  # noqa: E402

ARMS = [0.2, 0.5, 0.8, 0.35]


class Policy:
    def __init__(self):
        self.theta = [0.0] * len(ARMS)
        self.version = 0

    def probs(self):
        m = max(self.theta)
        e = [math.exp(t - m) for t in self.theta]
        s = sum(e)
        return [x / s for x in e]


def rollout(policy, rng, n):
    p = policy.probs()
    actions = rng.choices(range(len(ARMS)), weights=p, k=n)
    rewards = [1.0 if rng.random() < ARMS[a] else 0.0 for a in actions]
    return {"version": policy.version, "actions": actions, "rewards": rewards, "probs": p}


class Notices:
    """Preemption notices heard (from grants and heartbeats), passed to the rollout running."""

    def __init__(self):
        self.lock = threading.Lock()
        self.nodes = set()
        self.pool = None

    def heard(self, notice):
        with self.lock:
            self.nodes.add(notice["node"])
            pool = self.pool
        if pool is not None:
            pool.notice(notice["node"])

    def start(self, pool):
        with self.lock:
            self.pool = pool
            noticed = [n for n in pool.nodes if n in self.nodes]
        for n in noticed:
            pool.notice(n)

    def end(self):
        with self.lock:
            self.pool = None


class Loans:
    """The rollout nodes lent to the running rollout: lent to the pool when loaded, taken back
    and returned to the server by the deadline (the latest heard, from the grant or a
    heartbeat)."""

    def __init__(self, client, job):
        self.client, self.job = client, job
        self.cond = threading.Condition()
        self.loan, self.pool, self.uid = None, None, None
        self.load_at = self.reclaim_at = 0.0
        self.lent, self.done = False, True
        self.report = {}

    def start(self, loan, uid, pool):
        """The rollout's grant named ``loan``; ``pool`` is its rollout pool."""
        now = time.monotonic()
        with self.cond:
            self.loan, self.uid, self.pool = loan, uid, pool
            self.load_at, self.reclaim_at = now + loan["load_in_s"], now + loan["reclaim_in_s"]
            self.lent, self.done, self.report = False, False, {"lent": loan["nodes"]}
        threading.Thread(target=self._run, daemon=True).start()

    def heard(self, loan):
        """A heartbeat's answer names the loan: its deadline may have come forward."""
        with self.cond:
            if self.loan is not None and not self.done and loan["iteration"] == self.loan["iteration"]:
                self.reclaim_at = min(self.reclaim_at, time.monotonic() + loan["reclaim_in_s"])
                self.cond.notify_all()

    def _run(self):
        with self.cond:
            while not self.done:
                now = time.monotonic()
                if now >= self.reclaim_at:
                    for node in self.loan["nodes"]:
                        self.pool.notice(node)
                    self.report["returned_late_s"] = round(time.monotonic() - self.reclaim_at, 3)
                    self.done = True
                    break
                if not self.lent and now >= self.load_at:
                    self.lent = True
                    for node in self.loan["nodes"]:
                        self.pool.lend(node)
                wake = self.reclaim_at if self.lent else min(self.load_at, self.reclaim_at)
                self.cond.wait(max(0.0, wake - now))
            returned = "returned_late_s" in self.report
        if returned:
            try:
                self.client.return_loan(self.job, self.uid)
            except Exception as e:  # the rollout may have finished first: its finish ended the loan
                self.report["return_error"] = str(e)

    def end(self):
        """The rollout finished: the loan ends with it (the server ends it at the finish)."""
        with self.cond:
            self.done = True
            self.cond.notify_all()
            return dict(self.report)


def prompt_rollout(policy, args, k, nodes, notices, loan=None):
    """Rollout ``k`` as ``args.prompts`` prompts over ``nodes`` (see the module's text)."""
    probs = policy.probs()

    def generate(prompt, node, stopped):
        for _ in range(10):
            if stopped():
                return None
            time.sleep(args.prompt_s / 10)
        rng = random.Random((args.seed * 1_000_003 + k) * 100_003 + prompt)
        a = rng.choices(range(len(ARMS)), weights=probs)[0]
        return a, 1.0 if rng.random() < ARMS[a] else 0.0

    pool = RolloutPool(nodes, generate)
    notices.start(pool)
    if loan is not None:
        loan[0].start(loan[1], loan[2], pool)
    out = pool.run(list(range(args.prompts)))
    notices.end()
    lent = loan[0].end() if loan is not None else {}
    prompts = sorted(out)
    traj = {"version": policy.version, "actions": [out[p][0] for p in prompts],
            "rewards": [out[p][1] for p in prompts], "probs": probs, "prompts": prompts}
    return traj, {"nodes": list(nodes), "left": pool.leaving(), "moved": pool.moved,
                  "restarted": pool.restarted, "produced_by": pool.produced_by, **lent}


def train(policy, traj, lr, staleness=0):
    lag = policy.version - traj["version"]
    if not 0 <= lag <= staleness:
        raise RuntimeError(f"off-policy: trajectories of version {traj['version']} for weights {policy.version}")
    baseline = sum(traj["rewards"]) / len(traj["rewards"])
    grad = [0.0] * len(ARMS)
    now = policy.probs()
    for a, r in zip(traj["actions"], traj["rewards"]):
        # Sampled with older weights: weigh by how much likelier the action is now (clipped).
        w = min(2.0, now[a] / traj["probs"][a]) if lag else 1.0
        for i, pi in enumerate(now):
            grad[i] += w * (r - baseline) * ((1.0 if i == a else 0.0) - pi)
    n = len(traj["actions"])
    policy.theta = [t + lr * g / n for t, g in zip(policy.theta, grad)]
    policy.version += 1


class Lanes:
    """A bounded-staleness run from iteration ``start``: the rollout lane samples with the
    weights version each grant names, the training lane consumes rollout n's trajectories in
    order. Either lane's ``Requeued`` stops both; ``run`` then raises it."""

    def __init__(self, client, args, policy, start):
        self.client, self.args, self.policy, self.start = client, args, policy, start
        self.versions = {policy.version: list(policy.theta)}  # weights by version, published whole
        self.trajs = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.requeued = None

    def _grant(self, phase, n):
        """Polls the gate for ``phase`` of ``n`` until granted or stopped."""
        while not self.stop.is_set():
            g = self.client.try_start(self.args.job, phase, n, wait_s=1.0)
            if g is not None:
                return g
        return None

    def _lane(self, body):
        try:
            body()
        except Requeued as r:
            self.requeued = self.requeued or r
            self.stop.set()
            with self.cond:
                self.cond.notify_all()

    def rollouts(self):
        for n in range(self.start, self.args.iterations):
            g = self._grant("rollout", n)
            if g is None:
                return
            with self.client.phase(self.args.job, "rollout", n, granted=g) as meta:
                with self.cond:
                    theta = self.versions[meta.weights]
                behaviour = Policy()
                behaviour.theta, behaviour.version = list(theta), meta.weights
                traj = rollout(behaviour, random.Random(self.args.seed * 1_000_003 + n), self.args.samples)
                time.sleep(0.15)
                meta["weights_version"] = meta.weights
                meta["mean_reward"] = sum(traj["rewards"]) / len(traj["rewards"])
            with self.cond:
                self.trajs[n] = traj
                self.cond.notify_all()

    def trainings(self):
        for n in range(self.start, self.args.iterations):
            with self.cond:
                while n not in self.trajs and not self.stop.is_set():
                    self.cond.wait(0.5)
                if self.stop.is_set():
                    return
                traj = self.trajs.pop(n)
            g = self._grant("train", n)
            if g is None:
                return
            with self.client.phase(self.args.job, "train", n, granted=g) as meta:
                meta["trajectory_version"] = traj["version"]
                meta["lag"] = self.policy.version - traj["version"]
                train(self.policy, traj, lr=2.0, staleness=self.args.staleness)
                time.sleep(0.05)
                meta["new_weights_version"] = self.policy.version
                with self.cond:
                    self.versions[self.policy.version] = list(self.policy.theta)

    def run(self):
        lanes = [threading.Thread(target=self._lane, args=(f,)) for f in (self.rollouts, self.trainings)]
        for t in lanes:
            t.start()
        for t in lanes:
            t.join()
        if self.requeued:
            raise self.requeued


def run_stale(client, args, policy):
    """Runs both lanes to the end; after ``Requeued``, from the checkpoint it names."""
    checkpoints = {0: list(policy.theta)}
    start = 0
    while True:
        lanes = Lanes(client, args, policy, start)
        try:
            lanes.run()
            return
        except Requeued as r:
            print(f"{args.job}: {r}", flush=True)
            checkpoints.update({v: th for v, th in lanes.versions.items()})
            start = r.resume_from
            policy.theta, policy.version = list(checkpoints[start]), start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", default=os.environ.get("WEAVE_TOKEN"))
    ap.add_argument("--job", required=True)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rollout-s", type=float, default=100.0, help="declared rollout time (for placement)")
    ap.add_argument("--train-s", type=float, default=100.0, help="declared training time (for placement)")
    ap.add_argument("--no-submit", action="store_true", help="the job was submitted already")
    ap.add_argument("--staleness", type=int, default=0, help="weights versions a rollout may lag (0: on-policy)")
    ap.add_argument("--prompts", type=int, default=0, help="on-policy: prompts per rollout over the job's nodes")
    ap.add_argument("--prompt-s", type=float, default=0.1, help="seconds to generate one prompt")
    ap.add_argument("--rollout-nodes", type=int, default=1, help="rollout nodes the job asks for")
    ap.add_argument("--train-wall-s", type=float, default=0.05, help="seconds a training step takes")
    args = ap.parse_args()

    client = WeaveClient(args.server, args.token)
    if not args.no_submit:
        spec = {"id": args.job, "type": "7B_8k", "iterations": args.iterations, "slo": 2.0,
                "rollout_s": args.rollout_s, "train_s": args.train_s}
        if args.staleness:
            spec["staleness"] = args.staleness
        if args.rollout_nodes > 1:
            spec["rollout_nodes"] = args.rollout_nodes
        client.submit(spec)
    policy = Policy()
    if args.staleness:
        with client.keepalive(args.job, interval_s=1.0):
            run_stale(client, args, policy)
        report(args, policy)
        return
    rng = random.Random(args.seed)
    checkpoints = {0: (list(policy.theta), rng.getstate())}
    k = 0
    notices, loans = Notices(), Loans(client, args.job)
    beat = 0.5 if args.prompts else 1.0
    with client.keepalive(args.job, interval_s=beat, on_notice=notices.heard, on_loan=loans.heard):
        while k < args.iterations:
            try:
                with client.phase(args.job, "rollout", k) as meta:
                    if meta.grant.get("preemption_notice"):
                        notices.heard(meta.grant["preemption_notice"])
                    if args.prompts:
                        nodes = client.job(args.job)["job"]["rollout_nodes"]
                        loan = meta.grant.get("loan")
                        lent = (loans, loan, meta.grant.get("uid")) if loan else None
                        traj, where = prompt_rollout(policy, args, k, nodes, notices, lent)
                        meta.update(where)
                    else:
                        traj = rollout(policy, rng, args.samples)
                        time.sleep(0.15)  # generation takes a while: makes the interleaving visible
                    meta["weights_version"] = policy.version
                    meta["mean_reward"] = sum(traj["rewards"]) / len(traj["rewards"])
                with client.phase(args.job, "train", k) as meta:
                    if args.prompts:
                        meta["consumed_prompts"] = traj["prompts"]
                    meta["trajectory_version"] = traj["version"]
                    train(policy, traj, lr=2.0)
                    time.sleep(args.train_wall_s)
                    meta["new_weights_version"] = policy.version
                k += 1
                checkpoints[k] = (list(policy.theta), rng.getstate())
            except Requeued as r:
                print(f"{args.job}: {r}", flush=True)
                k = r.resume_from
                theta, state = checkpoints[k]
                policy.theta, policy.version = list(theta), k
                rng.setstate(state)
    report(args, policy)


def report(args, policy):
    best = max(range(len(ARMS)), key=lambda i: policy.theta[i])
    print(f"{args.job}: done, weights version {policy.version}, preferred arm {best}, probs {[round(p, 3) for p in policy.probs()]}")


if __name__ == "__main__":
    main()
