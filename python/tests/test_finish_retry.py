"""A finish answered 503 (the server replays its store after a restart, or its disk refused
the write) was not recorded: it is retried, never turned into a failure of the job."""

import unittest

from weave_client import WeaveClient, WeaveError


class RecoveringServer(WeaveClient):
    """Answers the first finish 503 "recovering", then records it; counts the calls."""

    def __init__(self, then=None):
        super().__init__("http://unused")
        self.calls = []
        self.then = then

    def _request(self, method, path, body=None, retry=False):
        self.calls.append((method, retry))
        if method == "POST" and len(self.calls) == 1:
            raise WeaveError(503, "recovering: the server is replaying its store; try again shortly")
        if method == "POST" and self.then is not None:
            raise self.then
        return 200, {"job": {"state": "running", "next": "rollout 5", "completed_iterations": 5}}


class FinishRetryTest(unittest.TestCase):
    def test_a_503_finish_is_retried_and_succeeds(self):
        client = RecoveringServer()
        self.assertEqual(client.finish("j", "train", 4, 1.0)["job"]["next"], "rollout 5")
        self.assertEqual(client.calls, [("POST", False), ("POST", True)])

    def test_a_retried_finish_already_recorded_returns_the_view(self):
        client = RecoveringServer(then=WeaveError(409, "job `j`: train 4 is not the next phase"))
        self.assertEqual(client.finish("j", "train", 4, 1.0)["completed_iterations"], 5)

    def test_other_errors_are_not_retried(self):
        class Refusing(RecoveringServer):
            def _request(self, method, path, body=None, retry=False):
                self.calls.append((method, retry))
                raise WeaveError(400, "bad duration")

        client = Refusing()
        with self.assertRaises(WeaveError) as raised:
            client.finish("j", "train", 4, 1.0)
        self.assertEqual(raised.exception.status, 400)
        self.assertEqual(client.calls, [("POST", False)])


if __name__ == "__main__":
    unittest.main()
