"""Unit tests of weave_client.ray_support that need no Ray: the environment contract and the
phase-gate shim's ordering. Run: pip install ./python, then
python3 -m unittest discover -s python/tests -p 'test_*.py' (or PYTHONPATH=python)"""

import contextlib
import unittest

# The installed package (`pip install ./python`), or the source tree on PYTHONPATH.
from weave_client.ray_support import PhaseGate, WeaveEnvError, WeaveJobEnv, node_bundles, node_selectors, pin_mode

ENV = {
    "WEAVE_JOB": "j1", "WEAVE_JOB_UID": "4", "WEAVE_SERVER": "http://127.0.0.2:7070", "WEAVE_TOKEN": "wj1.j1.00",
    "WEAVE_ROLLOUT_NODES": "r0,r2", "WEAVE_TRAINING_NODES": "t0", "WEAVE_RESUME_FROM": "3", "WEAVE_ITERATIONS": "9",
}


class FakeClient:
    """Records the gate calls in order."""

    def __init__(self):
        self.calls = []

    @contextlib.contextmanager
    def phase(self, job, phase, iteration):
        self.calls.append(("start", job, phase, iteration))
        meta = {}
        yield meta
        self.calls.append(("finish", job, phase, iteration, sorted(meta)))


class Trainer:
    def generate_sequences(self, x):
        return ("traj", x)

    def update_actor(self, traj):
        return ("weights", traj)


class RaySupportTest(unittest.TestCase):
    def test_environment_is_read_with_its_defaults(self):
        env = WeaveJobEnv.from_env(ENV)
        self.assertEqual((env.job, env.uid, env.resume_from, env.iterations), ("j1", 4, 3, 9))
        self.assertEqual((env.rollout_nodes, env.training_nodes), (["r0", "r2"], ["t0"]))
        self.assertEqual(env.resource("r2"), "weave_node_r2")
        bundles = node_bundles(env, env.rollout_nodes, 0.5, 1)
        self.assertEqual(bundles, [{"GPU": 0.5, "CPU": 1, "weave_node_r0": 1}, {"GPU": 0.5, "CPU": 1, "weave_node_r2": 1}])
        per_gpu = node_bundles(env, env.rollout_nodes, 0.25, 0.5, workers_per_node=8)
        self.assertEqual(len(per_gpu), 16)
        self.assertEqual([b.get("weave_node_r2", 0) for b in per_gpu], [0] * 8 + [1] * 8)

    def test_label_selectors_pin_bundles_in_bundle_order(self):
        env = WeaveJobEnv.from_env(ENV)
        bundles = node_bundles(env, env.rollout_nodes, 0.5, 1, workers_per_node=2, by_labels=True)
        self.assertEqual(bundles, [{"GPU": 0.5, "CPU": 1}] * 4)
        self.assertEqual(node_selectors(env.rollout_nodes, 2), [{"weave.io/node": "r0"}] * 2 + [{"weave.io/node": "r2"}] * 2)
        self.assertEqual(pin_mode("resources"), "resources")
        with self.assertRaisesRegex(WeaveEnvError, "WEAVE_RAY_PIN='nodes'"):
            pin_mode("nodes")

    def test_mode_says_where_each_phase_runs(self):
        self.assertFalse(WeaveJobEnv.from_env(ENV).colocated)
        env = WeaveJobEnv.from_env(dict(ENV, WEAVE_MODE="colocated", WEAVE_ROLLOUT_NODES="t0"))
        self.assertTrue(env.colocated)
        self.assertEqual(env.rollout_nodes, env.training_nodes)
        with self.assertRaisesRegex(WeaveEnvError, "WEAVE_MODE='both'"):
            WeaveJobEnv.from_env(dict(ENV, WEAVE_MODE="both"))

    def test_missing_or_bad_variables_are_named(self):
        with self.assertRaisesRegex(WeaveEnvError, "WEAVE_TOKEN"):
            WeaveJobEnv.from_env({k: v for k, v in ENV.items() if k != "WEAVE_TOKEN"})
        with self.assertRaisesRegex(WeaveEnvError, "WEAVE_RESUME_FROM='x'"):
            WeaveJobEnv.from_env(dict(ENV, WEAVE_RESUME_FROM="x"))

    def test_gate_wraps_generate_and_update_in_order(self):
        client, trainer = FakeClient(), Trainer()
        gate = PhaseGate(client, "j1", start_iteration=3, meta_fn=lambda phase, out: {"out": out[0]})
        gate.wrap(trainer)
        for i in range(2):
            traj = trainer.generate_sequences(i)
            self.assertEqual(trainer.update_actor(traj), ("weights", ("traj", i)))
        keys = ["out", "wall_end", "wall_start"]
        self.assertEqual(client.calls, [
            ("start", "j1", "rollout", 3), ("finish", "j1", "rollout", 3, keys),
            ("start", "j1", "train", 3), ("finish", "j1", "train", 3, keys),
            ("start", "j1", "rollout", 4), ("finish", "j1", "rollout", 4, keys),
            ("start", "j1", "train", 4), ("finish", "j1", "train", 4, keys),
        ])
        self.assertEqual(gate.iteration, 5)


if __name__ == "__main__":
    unittest.main()
