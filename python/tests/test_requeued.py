"""The gate turns a 409 for a job whose admission ended (it waits in the queue again, or has
already been re-admitted as a new admission) into ``Requeued``."""

import unittest

from weave_client import Requeued, WeaveClient, WeaveError


class FakeClient(WeaveClient):
    def __init__(self, state, uid=7):
        super().__init__("http://unused")
        self.state = state
        self.uid = uid
        self.sent = []

    def _request(self, method, path, body=None, retry=False):
        if method == "POST":
            self.sent.append(body)
            raise WeaveError(409, "job `j`: the job is preempted")
        view = {"state": self.state, "uid": self.uid, "next": "rollout 3",
                "queue_reason": "its tenant's quota is in use"}
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
        # Granted under admission 7 and refused while admission 7 still runs: a plain conflict.
        c = FakeClient("running", uid=7)
        c._admission["j"] = 7
        with self.assertRaises(WeaveError) as raised:
            c.finish("j", "train", 4, 1.0)
        self.assertNotIsInstance(raised.exception, Requeued)
        self.assertEqual(c.sent[-1]["uid"], 7, "the finish names the admission it was granted under")

    def test_a_job_already_re_admitted_is_still_requeued(self):
        # The phase was granted under admission 7; the job was preempted and re-admitted as
        # admission 9 before its driver reported back: the driver must still hear it.
        for call in (lambda c: c.start("j", "train", 4), lambda c: c.finish("j", "train", 4, 1.0)):
            c = FakeClient("running", uid=9)
            c._admission["j"] = 7
            with self.assertRaises(Requeued) as raised:
                call(c)
            self.assertEqual(raised.exception.resume_from, 3)
            self.assertNotIn("j", c._admission, "the ended admission is forgotten")


if __name__ == "__main__":
    unittest.main()
