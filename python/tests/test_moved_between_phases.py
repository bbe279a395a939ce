"""A move takes effect between phases (after the training in flight finished): the driver
learns of it from its next grant, which names a new admission, and hears ``Requeued`` with the
iteration to resume from; the grant is kept for it."""

import unittest

from weave_client import Requeued, WeaveClient


class Scripted(WeaveClient):
    def __init__(self, grants, completed, ended="moved"):
        super().__init__("http://unused")
        self.grants = list(grants)
        self.completed = completed
        self.ended = ended
        self.sent = []

    def _request(self, method, path, body=None, retry=False):
        self.sent.append((method, path))
        if method == "GET":
            return 200, {"job": {"completed_iterations": self.completed},
                         "history": [{"kind": self.ended, "meta": {"resume_from": self.completed}}]}
        return 200, {"uid": self.grants.pop(0)}


class MovedBetweenPhasesTest(unittest.TestCase):
    def test_a_grant_under_a_new_admission_raises_requeued_with_the_resume_point(self):
        c = Scripted([7, 7, 9, 9], completed=4)
        c.start("a", "rollout", 3)
        c.start("a", "train", 3)
        with self.assertRaises(Requeued) as r:
            c.start("a", "rollout", 4)
        self.assertEqual((r.exception.resume_from, r.exception.reason), (4, "moved"))
        # Asked again after restoring iteration 4: the same admission, no second Requeued.
        self.assertEqual(c.start("a", "rollout", 4)["uid"], 9)

    def test_a_readmission_that_is_not_a_move_is_told_by_its_refused_report_not_here(self):
        c = Scripted([7, 9], completed=4, ended="failed")
        c.start("a", "rollout", 3)
        self.assertEqual(c.start("a", "rollout", 4)["uid"], 9)

    def test_the_first_grant_is_not_a_move(self):
        c = Scripted([3], completed=0)
        self.assertEqual(c.start("a", "rollout", 0)["uid"], 3)
        self.assertNotIn(("GET", "/v1/jobs/a"), c.sent)


if __name__ == "__main__":
    unittest.main()
