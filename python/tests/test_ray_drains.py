"""Ray drains forwarded as Weave preemption notices: one per drain, the seconds left to its
deadline (rounded up), a default without one; nodes Weave does not know are skipped."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from weave_client import WeaveClient, WeaveError  # noqa: E402
from weave_client.ray_drains import Forwarder  # noqa: E402


class Recording(WeaveClient):
    def __init__(self, refuse=None):
        super().__init__("http://unused")
        self.sent, self.refuse = [], refuse or {}

    def _request(self, method, path, body=None, retry=False):
        node = path.split("/")[3]
        if node in self.refuse:
            raise WeaveError(self.refuse[node], "refused")
        self.sent.append((path, body["seconds"]))
        return 200, {"node": node, "state": "notice", "seconds": body["seconds"]}


class RayDrainsTest(unittest.TestCase):
    def test_each_drain_is_posted_once_with_the_seconds_left(self):
        drains = {"aaa": 1_000_000 + 59_500, "bbb": 0, "zzz": 1_000_000 + 5_000}
        names = {"aaa": "r1", "bbb": "t0"}  # zzz: a Ray node without the Weave label
        c = Recording()
        fwd = Forwarder(c, lambda: dict(drains), lambda: names, default_s=120, now_ms=lambda: 1_000_000)
        self.assertEqual(fwd.once(), {"r1": 60, "t0": 120})
        self.assertEqual(c.sent, [("/v1/nodes/r1/notice", 60), ("/v1/nodes/t0/notice", 120)])
        self.assertEqual(fwd.once(), {}, "posted once")
        # r1's drain ends (the node died or the drain was cancelled) and a new one comes.
        del drains["aaa"]
        fwd.once()
        drains["aaa"] = 1_000_000 + 1
        self.assertEqual(fwd.once(), {"r1": 1})

    def test_a_node_already_noticed_is_not_retried_and_other_errors_are(self):
        drains = {"aaa": 0, "bbb": 0}
        c = Recording(refuse={"r1": 400, "r2": 503})
        fwd = Forwarder(c, lambda: drains, lambda: {"aaa": "r1", "bbb": "r2"})
        self.assertEqual(fwd.once(), {})
        self.assertEqual(fwd.sent, {"aaa"})
        c.refuse = {}
        self.assertEqual(fwd.once(), {"r2": 120})

    def test_no_drain_asks_nothing_of_ray(self):
        def names():
            raise AssertionError("the node list is read only when something drains")
        fwd = Forwarder(Recording(), lambda: {}, names)
        self.assertEqual(fwd.once(), {})


if __name__ == "__main__":
    unittest.main()
