"""The toy bandit RL job (see bandit.py) as a Ray job Weave launches.

Structured like a veRL trainer: a rollout worker group (one Ray actor per rollout node) with
``generate_sequences`` and an actor worker group (one learner per training node) with
``update_actor``; ``PhaseGate`` wraps both in Weave's gate, which is the whole integration.
Actors sit in placement groups pinned to the nodes Weave chose, with fractional GPUs so the
group's jobs share them. The learner saves a checkpoint per weights version inside the
training phase, so a re-admitted job (``WEAVE_RESUME_FROM=k``) continues from version k.

Run by `weave serve --backend ray`; needs WEAVE_* in the environment and, for checkpoints,
BANDIT_CHECKPOINTS (a directory).
"""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ray  # noqa: E402
from bandit import ARMS, Policy, rollout, train  # noqa: E402
from weave_client.ray_support import PhaseGate, WeaveJobEnv, actor_options, pinned_placement_groups  # noqa: E402

GPU_SHARE = 0.5  # two jobs' workers co-reside on a GPU; the gate decides who runs
ROLLOUT_S = float(os.environ.get("BANDIT_ROLLOUT_S", "0.4"))  # generation takes a while
TRAIN_S = float(os.environ.get("BANDIT_TRAIN_S", "0.15"))


def where():
    ctx = ray.get_runtime_context()
    return {"ray_node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "gpus": ray.get_gpu_ids()}


@ray.remote
class RolloutWorker:
    def __init__(self, seed):
        self.rng = random.Random(seed)

    def generate(self, theta, version, n):
        p = Policy()
        p.theta, p.version = theta, version
        traj = rollout(p, self.rng, n)
        time.sleep(ROLLOUT_S)
        return traj, where()


@ray.remote
class Learner:
    def __init__(self, theta, version):
        self.policy = Policy()
        self.policy.theta, self.policy.version = theta, version

    def update(self, traj):
        train(self.policy, traj, lr=2.0)
        time.sleep(TRAIN_S)
        return self.policy.theta, self.policy.version, where()


class RolloutGroup:
    def __init__(self, workers):
        self.workers = workers

    def generate_sequences(self, theta, version, samples):
        per = max(1, samples // len(self.workers))
        parts = ray.get([w.generate.remote(theta, version, per) for w in self.workers])
        traj = {"version": version, "actions": [], "rewards": [], "probs": parts[0][0]["probs"]}
        for t, _ in parts:
            traj["actions"] += t["actions"]
            traj["rewards"] += t["rewards"]
        return traj, [w for _, w in parts]


class ActorGroup:
    def __init__(self, learners, checkpoints, job):
        self.learners, self.checkpoints, self.job = learners, checkpoints, job

    def update_actor(self, traj):
        results = ray.get([lr.update.remote(traj) for lr in self.learners])
        theta, version, _ = results[0]
        if self.checkpoints:
            path = os.path.join(self.checkpoints, f"{self.job}-v{version}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"theta": theta, "version": version}, f)
            os.replace(path + ".tmp", path)
        return theta, version, [w for _, _, w in results]


def load_checkpoint(checkpoints, job, version):
    if version == 0:
        return [0.0] * len(ARMS)
    path = os.path.join(checkpoints or "", f"{job}-v{version}.json")
    with open(path) as f:
        ck = json.load(f)
    assert ck["version"] == version, (ck["version"], version)
    return ck["theta"]


def meta_of(phase, out):
    if phase == "rollout":
        traj, places = out
        return {"weights_version": traj["version"], "mean_reward": sum(traj["rewards"]) / len(traj["rewards"]),
                "ray_nodes": [p["ray_node"] for p in places], "gpus": [p["gpus"] for p in places]}
    _, version, places = out
    return {"new_weights_version": version, "ray_nodes": [p["ray_node"] for p in places],
            "gpus": [p["gpus"] for p in places]}


def main():
    env = WeaveJobEnv.from_env()
    iterations = env.iterations or 10
    checkpoints = os.environ.get("BANDIT_CHECKPOINTS")
    if checkpoints:
        os.makedirs(checkpoints, exist_ok=True)
    ray.init(address="auto", logging_level="WARNING")
    rollout_pg, train_pg = pinned_placement_groups(env, rollout_gpus=GPU_SHARE, training_gpus=GPU_SHARE)
    seed = int(os.environ.get("BANDIT_SEED", "1"))
    workers = [RolloutWorker.options(**actor_options(rollout_pg, i, GPU_SHARE)).remote(seed * 100 + i + env.resume_from)
               for i in range(len(env.rollout_nodes))]
    theta = load_checkpoint(checkpoints, env.job, env.resume_from)
    learners = [Learner.options(**actor_options(train_pg, i, GPU_SHARE)).remote(theta, env.resume_from)
                for i in range(len(env.training_nodes))]
    rollout_wg, actor_wg = RolloutGroup(workers), ActorGroup(learners, checkpoints, env.job)

    client = env.client()
    # Each phase also says how the job's bundles were pinned (the checker holds it to that).
    gate = PhaseGate(client, env.job, start_iteration=env.resume_from,
                     meta_fn=lambda phase, out: dict(meta_of(phase, out), pinned_by=env.pinned_by))
    gate.wrap(rollout_wg, generate="generate_sequences", update="update_actor", update_obj=actor_wg)
    version = env.resume_from
    with client.keepalive(env.job, interval_s=1.0):
        # The veRL-style loop, unchanged by the gate.
        for _ in range(env.resume_from, iterations):
            traj, _ = rollout_wg.generate_sequences(theta, version, 2000)
            theta, version, _ = actor_wg.update_actor(traj)
    best = max(range(len(ARMS)), key=lambda i: theta[i])
    print(f"{env.job}: done at weights version {version}, preferred arm {best}")


if __name__ == "__main__":
    main()
