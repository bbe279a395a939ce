"""A bounded-staleness job's side of the client: the grant's weights version reaches the
phase body, ``try_start`` gives up when not granted, and a retried rollout finish that was
already recorded is recognised by the rollout lane's own counter."""

import unittest

from fake_gate import FakeGate
from weave_client import WeaveClient, WeaveError


class Gate(FakeGate):
    """Grants rollout 3 with weights version 2; answers 202 for anything else."""

    def grant(self, path):
        if "/phases/rollout/3/start" in path:
            return 200, {"status": "granted", "phase": "rollout", "iteration": 3, "uid": 4, "weights": 2}
        return 202, {"status": "waiting"}


class StalenessTest(unittest.TestCase):
    def test_the_rollout_body_sees_its_weights_version(self):
        c = Gate()
        with c.phase("j", "rollout", 3) as meta:
            self.assertEqual(meta.weights, 2)
            meta["weights_version"] = meta.weights
        path, body = c.finished[0]
        self.assertTrue(path.endswith("/phases/rollout/3/finish"))
        self.assertEqual(body["meta"], {"weights_version": 2}, "the grant is not sent back as metadata")
        self.assertEqual(body["uid"], 4)

    def test_try_start_gives_up_when_not_granted(self):
        self.assertIsNone(Gate().try_start("j", "train", 2, wait_s=0))

    def test_a_retried_rollout_finish_already_recorded_returns_the_view(self):
        class Retried(WeaveClient):
            calls = 0

            def _request(self, method, path, body=None, retry=False):
                Retried.calls += 1
                if method == "POST" and Retried.calls == 1:
                    raise ConnectionResetError("gone mid-request")
                if method == "POST":
                    raise WeaveError(409, "phase order: cannot finish rollout of iteration 3")
                # Training 2 runs; the rollout lane has moved past 3.
                return 200, {"job": {"next": "train 2", "completed_iterations": 2, "next_rollout": 4}}

        view = Retried("http://unused").finish("j", "rollout", 3, 1.0)
        self.assertEqual(view["next_rollout"], 4)


if __name__ == "__main__":
    unittest.main()
