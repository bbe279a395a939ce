"""A request refused 429 (the token's rate limit) changed nothing on the server: the client
waits the ``Retry-After`` the server gives and sends it again, instead of failing the driver."""

import time
import unittest

from weave_client import WeaveClient, WeaveError
from stub_http import JsonHandler, serve


class Limited(JsonHandler):
    """Refuses the first `refusals` requests 429 with Retry-After: 1, then answers 201."""

    refusals = 1
    seen = []

    def do_POST(self):
        self.read_body()
        Limited.seen.append(time.monotonic())
        if len(Limited.seen) <= Limited.refusals:
            self.send_json(429, {"error": "rate limit for this token: try again in 1 s"}, [("Retry-After", "1")])
        else:
            self.send_json(201, {"job": {"id": "j", "state": "running"}})


class RateLimitTest(unittest.TestCase):
    def serve(self, refusals):
        Limited.refusals, Limited.seen = refusals, []
        server, url = serve(Limited)
        self.addCleanup(server.shutdown)
        return url

    def test_a_429_is_retried_after_the_servers_retry_after(self):
        url = self.serve(refusals=1)
        answer = WeaveClient(url, "t").submit({"id": "j", "type": "7B_8k"})
        self.assertEqual(answer["job"]["state"], "running")
        self.assertEqual(len(Limited.seen), 2)
        self.assertGreaterEqual(Limited.seen[1] - Limited.seen[0], 0.9, "waited the Retry-After")

    def test_the_retries_stop_at_the_clients_deadline(self):
        url = self.serve(refusals=100)
        with self.assertRaises(WeaveError) as raised:
            WeaveClient(url, "t", retry_s=1.5).submit({"id": "j", "type": "7B_8k"})
        self.assertEqual((raised.exception.status, raised.exception.retry_after), (429, 1.0))
        self.assertLessEqual(len(Limited.seen), 3)


if __name__ == "__main__":
    unittest.main()
