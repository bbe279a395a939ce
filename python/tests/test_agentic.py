"""An agentic job's side of the client: the grant's sandboxes reach the phase body, and what a
rollout's environments did is sent with its finish as ``meta.agentic``."""

import unittest

from fake_gate import FakeGate

SANDBOXES = {"sandboxes": 32, "sandbox": {"cores": 1.0, "mem_gib": 2.0, "pausable": False}}


class Gate(FakeGate):
    """Grants rollout 0 with its sandboxes and training 0 with the next rollout's to start."""

    def grant(self, path):
        grant = {"status": "granted", "iteration": 0, "uid": 1, "environment": dict(SANDBOXES)}
        if "/phases/train/0/start" in path:
            grant["environment"]["start_sandboxes_for"] = 1
        return 200, grant


class AgenticTest(unittest.TestCase):
    def test_the_rollout_sees_its_sandboxes_and_reports_its_environments(self):
        c = Gate()
        with c.phase("j", "rollout", 0) as meta:
            self.assertEqual(meta.environment, SANDBOXES)
            meta.report_environment(trajectories=32, turns=320, env_s=9600.0, startup_s=16.0)
        _, body = c.finished[0]
        self.assertEqual(body["meta"], {"agentic": {"trajectories": 32, "turns": 320, "env_s": 9600.0,
                                                    "startup_s": 16.0}})
        with c.phase("j", "train", 0) as meta:
            self.assertEqual(meta.environment["start_sandboxes_for"], 1)
        self.assertNotIn("meta", c.finished[1][1], "nothing reported, nothing sent")

    def test_a_job_without_a_declaration_has_no_environment(self):
        class Plain(FakeGate):
            def grant(self, path):
                return 200, {"status": "granted", "iteration": 0, "uid": 1}

        with Plain().phase("j", "rollout", 0) as meta:
            self.assertIsNone(meta.environment)


if __name__ == "__main__":
    unittest.main()
