"""The TRL integration's gate without TRL: a step's generation is its rollout phase and its
training phase runs from the generation's end to the step's checkpoint; after ``Requeued``
the trainer is rebuilt from the checkpoint of exactly Weave's count."""

import os
import tempfile
import unittest

from weave_client import Requeued
from weave_client.integrations.trl import Gate, checkpoint, train


class FakeClient:
    def __init__(self):
        self.calls = []
        self.views = []

    def start(self, job, phase, iteration):
        self.calls.append(("start", phase, iteration))
        return {}

    def finish(self, job, phase, iteration, seconds, meta):
        self.calls.append(("finish", phase, iteration, meta))
        return {}

    def job(self, job):
        return {"job": self.views.pop(0)}


class GateTest(unittest.TestCase):
    def test_a_step_is_a_rollout_then_a_training_closed_at_its_checkpoint(self):
        client = FakeClient()
        gate = Gate(client, "j")
        self.assertEqual(gate.rollout(3, lambda: "batch", lambda out: 0.5), "batch")
        self.assertEqual([c[:3] for c in client.calls],
                         [("start", "rollout", 3), ("finish", "rollout", 3), ("start", "train", 3)])
        self.assertEqual(client.calls[1][3], {"weights_version": 3, "mean_reward": 0.5})
        gate.trained()
        gate.trained()  # a second save without a step between reports nothing
        self.assertEqual(client.calls[3], ("finish", "train", 3, {"trajectory_version": 3, "new_weights_version": 4}))
        self.assertEqual(len(client.calls), 4)
        self.assertEqual(gate.iterations, 1)

    def test_a_requeued_trainer_resumes_from_the_checkpoint_of_weaves_count(self):
        client = FakeClient()
        client.views = [{"state": "queued"}, {"state": "running", "completed_iterations": 7}]
        gate = Gate(client, "j")
        resumed = []

        class Trainer:
            def train(self, resume_from_checkpoint=None):
                resumed.append(resume_from_checkpoint)
                if len(resumed) == 1:
                    raise Requeued("j", 7, "preempted")

        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "checkpoint-7"))
            gate.wait_to_run = lambda: Gate.wait_to_run(gate, timeout_s=5)
            out = train(Trainer, gate, d)
            self.assertEqual(resumed, [None, os.path.join(d, "checkpoint-7")])
            self.assertEqual(out["resumed_from"], [7])
            with self.assertRaises(RuntimeError):
                checkpoint(d, 8)


if __name__ == "__main__":
    unittest.main()
