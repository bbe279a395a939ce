"""An admin's preemption notice goes to the node's notice endpoint with its seconds."""

import unittest

from weave_client import WeaveClient


class Recording(WeaveClient):
    def __init__(self):
        super().__init__("http://unused")
        self.sent = []

    # What the server answered, passed back to the caller unchanged (a marker the client could
    # not make up).
    ANSWER = {"node": "r0", "state": "notice", "deadline_in_s": 119.5}

    def _request(self, method, path, body=None, retry=False):
        self.sent.append((method, path, body))
        return 200, dict(self.ANSWER)


class NodeNoticeTest(unittest.TestCase):
    def test_a_notice_names_the_node_the_seconds_and_the_reason_if_given(self):
        c = Recording()
        self.assertEqual(c.node_notice("r0", 120), Recording.ANSWER)
        c.node_notice("r1", 30, reason="spot reclaimed")
        self.assertEqual(c.sent, [
            ("POST", "/v1/nodes/r0/notice", {"seconds": 120}),
            ("POST", "/v1/nodes/r1/notice", {"seconds": 30, "reason": "spot reclaimed"}),
        ])


if __name__ == "__main__":
    unittest.main()
