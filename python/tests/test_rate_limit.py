"""A request refused 429 (the token's rate limit) changed nothing on the server: the client
waits the ``Retry-After`` the server gives and sends it again, instead of failing the driver."""

import http.server
import json
import threading
import time
import unittest

from weave_client import WeaveClient, WeaveError


class Limited(http.server.BaseHTTPRequestHandler):
    """Refuses the first `refusals` requests 429 with Retry-After: 1, then answers 201."""

    refusals = 1
    seen = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Limited.seen.append(time.monotonic())
        if len(Limited.seen) <= Limited.refusals:
            body = json.dumps({"error": "rate limit for this token: try again in 1 s"}).encode()
            self.send_response(429)
            self.send_header("Retry-After", "1")
        else:
            body = json.dumps({"job": {"id": "j", "state": "running"}}).encode()
            self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class RateLimitTest(unittest.TestCase):
    def serve(self, refusals):
        Limited.refusals, Limited.seen = refusals, []
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Limited)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.shutdown)
        return f"http://127.0.0.1:{server.server_address[1]}"

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
