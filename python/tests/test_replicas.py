"""A client given several replicas' addresses (``weave serve --etcd``) sends each request to the
one that serves: a standby's 503 and a refused connection say the request was not taken, so the
next replica gets it; any other answer, including other 503s, is the server's."""

import socket
import unittest

from stub_http import JsonHandler, serve
from weave_client import WeaveClient, WeaveError, transport


def replica(status, message):
    class Handler(JsonHandler):
        calls = []

        def do_GET(self):
            Handler.calls.append(self.path)
            self.send_json(status, {"error": message} if status >= 400 else {"job": {"id": "a"}})

        do_POST = do_GET

    return Handler


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


class ReplicasTest(unittest.TestCase):
    def setUp(self):
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.shutdown()

    def _serve(self, handler):
        server, url = serve(handler)
        self.servers.append(server)
        return url

    def test_a_standby_and_a_dead_replica_hand_the_request_on(self):
        standby = replica(503, "standby: the active replica is b; this one takes over if it is lost")
        active = replica(200, "")
        urls = [closed_port(), self._serve(standby), self._serve(active)]
        client = WeaveClient(",".join(urls), retry_s=10)
        self.assertEqual(client.job("a")["job"]["id"], "a")
        self.assertEqual(client.server, urls[2], "it stays with the active one")
        self.assertEqual(len(standby.calls), 1)
        client.submit({"id": "b"})
        self.assertEqual(len(active.calls), 2)
        self.assertEqual(len(standby.calls), 1, "the active one is asked first from then on")

    def test_a_503_of_the_active_itself_is_its_answer(self):
        full = replica(503, "the store's disk refused the write")
        other = replica(200, "")
        client = WeaveClient(f"{self._serve(full)},{self._serve(other)}", retry_s=1)
        with self.assertRaises(WeaveError) as raised:
            client.submit({"id": "x"})
        self.assertEqual(raised.exception.status, 503)
        self.assertEqual(len(other.calls), 0, "a write the active refused is not sent elsewhere")

    def test_an_active_cut_off_from_etcd_hands_the_write_on(self):
        cut_off = replica(503, "the replicated log: etcd unreachable at http://10.0.0.1:2379: timed out")
        active = replica(200, "")
        client = WeaveClient(f"{self._serve(cut_off)},{self._serve(active)}", retry_s=10)
        client.submit({"id": "x"})
        self.assertEqual((len(cut_off.calls), len(active.calls)), (1, 1), "nothing was written: the next one takes it")

    def test_a_replica_whose_machine_is_gone_is_given_up_after_the_connect_timeout(self):
        # A silent address: a listener whose backlog is full takes no more connections, as a
        # machine that is gone answers none (or the network says at once it cannot be reached).
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        fillers = []
        for _ in range(8):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(silent.getsockname())
            fillers.append(f)
        self.addCleanup(lambda: [x.close() for x in fillers + [silent]])
        active = replica(200, "")
        dead = "http://%s:%d" % silent.getsockname()
        # Waiting the whole timeout (60 s) for the silent one would run past retry_s (10 s).
        self.addCleanup(setattr, transport, "CONNECT_S", transport.CONNECT_S)
        transport.CONNECT_S = 0.2
        for keep_alive in (False, True):
            client = WeaveClient(f"{dead},{self._serve(active)}", retry_s=10, timeout=60, keep_alive=keep_alive)
            self.assertEqual(client.job("a")["job"]["id"], "a")

    def test_keep_alive_follows_the_replica_too(self):
        urls = [self._serve(replica(503, "recovering: the server is replaying its store")), self._serve(replica(200, ""))]
        client = WeaveClient(",".join(urls), retry_s=10, keep_alive=True)
        self.assertEqual(client.job("a")["job"]["id"], "a")
        self.assertEqual(client.server, urls[1])


if __name__ == "__main__":
    unittest.main()
