"""The gate turns a 409 for a job that waits in the queue again into ``Requeued``."""

import unittest

from weave_client import Requeued, WeaveClient, WeaveError


class FakeClient(WeaveClient):
    def __init__(self, state):
        super().__init__("http://unused")
        self.state = state

    def _request(self, method, path, body=None, retry=False):
        if method == "POST":
            raise WeaveError(409, "job `j`: the job is preempted")
        view = {"state": self.state, "next": "rollout 3", "queue_reason": "its tenant's quota is in use"}
        history = [{"kind": "preempted", "meta": {"reason": "preempted by a higher-priority job of its tenant"}}]
        return 200, {"job": view, "history": history}


class RequeuedTest(unittest.TestCase):
    def test_a_queued_job_resumes_from_its_next_iteration(self):
        for call in (lambda c: c.start("j", "train", 4), lambda c: c.finish("j", "train", 4, 1.0)):
            with self.assertRaises(Requeued) as raised:
                call(FakeClient("queued"))
            self.assertEqual(raised.exception.resume_from, 3)
            self.assertIn("higher-priority", raised.exception.reason)
            self.assertEqual(raised.exception.status, 409)

    def test_a_running_job_keeps_the_plain_conflict(self):
        with self.assertRaises(WeaveError) as raised:
            FakeClient("running").start("j", "train", 4)
        self.assertNotIsInstance(raised.exception, Requeued)


if __name__ == "__main__":
    unittest.main()
