"""``WeaveClient(keep_alive=True)``: requests a moment apart share one connection, an idle one
is replaced, error answers are ``WeaveError`` as with urllib, and a server that is gone is a
``ConnectionError`` (what the client's retries expect)."""

import unittest
from unittest import mock

from weave_client import WeaveClient, WeaveError
from weave_client import transport
from stub_http import JsonHandler, serve


class Handler(JsonHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections = set()

    def do_GET(self):
        Handler.connections.add(self.client_address)
        if self.path.endswith("/missing"):
            self.send_json(404, {"error": "job `missing` not found"})
        else:
            self.send_json(200, {"job": {"id": self.path, "auth": self.headers.get("Authorization")}})


class KeepAliveTest(unittest.TestCase):
    def setUp(self):
        Handler.connections = set()
        self.server, self.url = serve(Handler)

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_requests_a_moment_apart_share_a_connection_and_an_idle_one_is_replaced(self):
        c = WeaveClient(self.url, "tok", keep_alive=True)
        for _ in range(5):
            self.assertEqual(c.job("a")["job"]["auth"], "Bearer tok")
        self.assertEqual(len(Handler.connections), 1)
        with mock.patch.object(transport, "KEEP_ALIVE_IDLE_S", -1.0):
            c.job("a")
        self.assertEqual(len(Handler.connections), 2)
        # Without keep-alive every request opens its own connection.
        plain = WeaveClient(self.url, "tok")
        plain.job("a")
        plain.job("a")
        self.assertEqual(len(Handler.connections), 4)

    def test_errors_read_as_with_urllib(self):
        for keep in (True, False):
            with self.assertRaises(WeaveError) as raised:
                WeaveClient(self.url, keep_alive=keep).job("missing")
            self.assertEqual((raised.exception.status, raised.exception.message), (404, "job `missing` not found"))
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            gone = f"http://127.0.0.1:{s.getsockname()[1]}"  # nobody listens there
        with self.assertRaises(ConnectionError):
            WeaveClient(gone, keep_alive=True)._request_once("GET", "/v1/jobs/a")


if __name__ == "__main__":
    unittest.main()
