"""A toy synchronous RL job: a policy-gradient learner on a multi-armed bandit.

Each iteration k: the rollout samples actions with the policy of weights version k (the
trajectories carry that version); the training step consumes exactly those trajectories
(it refuses any other version) and produces weights version k + 1. Both phases run inside
Weave's gate, and report the versions they used as phase metadata, so the server's event log
shows which weights every step consumed.

The job checkpoints after every iteration (in memory: the weights and the random stream). If
Weave re-queues it (preempted for another job, or its node lost), the gate raises
``Requeued`` and the job restores the checkpoint of the iteration it resumes from.
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from weave_client import Requeued, WeaveClient  # noqa: E402

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


def train(policy, traj, lr):
    if traj["version"] != policy.version:
        raise RuntimeError(f"off-policy: trajectories of version {traj['version']} for weights {policy.version}")
    baseline = sum(traj["rewards"]) / len(traj["rewards"])
    grad = [0.0] * len(ARMS)
    for a, r in zip(traj["actions"], traj["rewards"]):
        for i, pi in enumerate(traj["probs"]):
            grad[i] += (r - baseline) * ((1.0 if i == a else 0.0) - pi)
    n = len(traj["actions"])
    policy.theta = [t + lr * g / n for t, g in zip(policy.theta, grad)]
    policy.version += 1


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
    args = ap.parse_args()

    client = WeaveClient(args.server, args.token)
    if not args.no_submit:
        client.submit({"id": args.job, "type": "7B_8k", "iterations": args.iterations, "slo": 2.0,
                       "rollout_s": args.rollout_s, "train_s": args.train_s})
    rng = random.Random(args.seed)
    policy = Policy()
    checkpoints = {0: (list(policy.theta), rng.getstate())}
    k = 0
    with client.keepalive(args.job, interval_s=1.0):
        while k < args.iterations:
            try:
                with client.phase(args.job, "rollout", k) as meta:
                    traj = rollout(policy, rng, args.samples)
                    time.sleep(0.15)  # generation takes a while: makes the interleaving visible
                    meta["weights_version"] = policy.version
                    meta["mean_reward"] = sum(traj["rewards"]) / len(traj["rewards"])
                with client.phase(args.job, "train", k) as meta:
                    meta["trajectory_version"] = traj["version"]
                    train(policy, traj, lr=2.0)
                    time.sleep(0.05)
                    meta["new_weights_version"] = policy.version
                k += 1
                checkpoints[k] = (list(policy.theta), rng.getstate())
            except Requeued as r:
                print(f"{args.job}: {r}", flush=True)
                k = r.resume_from
                theta, state = checkpoints[k]
                policy.theta, policy.version = list(theta), k
                rng.setstate(state)
    best = max(range(len(ARMS)), key=lambda i: policy.theta[i])
    print(f"{args.job}: done, weights version {policy.version}, preferred arm {best}, probs {[round(p, 3) for p in policy.probs()]}")


if __name__ == "__main__":
    main()
