"""Sandboxes for the agentic reference task (:mod:`tool_task`): real processes on an
environment node.

``python -m weave_client.runtime.sandbox_host --addr IP:PORT`` runs on the environment node
and forks one process per connection: that process is a trajectory's sandbox. It holds the
prompt's secret table for its life and speaks lines:

- ``start SEED STEP_MS K1 .. Kn`` -> ``ready`` after the start-up (``--start-ms``, injected: a
  cached image's start);
- ``lookup K`` -> ``value V`` after one environment step: ``STEP_MS`` (the job's tool) with a
  fifth of it as sigma, normal, cut at 0: injected latency, beside the real round trip;
- ``score Y1 .. Yn`` -> ``reward R`` (the fraction of positions holding the value of the
  prompt's key there: the reward runs in the sandbox).

:class:`Environment` is the rollout side: it spreads a rollout's sandboxes over the
environment nodes, runs every turn's steps concurrently, notices a sandbox whose process or
node is gone (its connection closes, or it does not answer within ``timeout_s``), and stops
placing sandboxes on a node that refuses connections.
"""

import argparse
import os
import random
import selectors
import socket
import socketserver
import sys
import time
from typing import Dict, List, Optional, Set, Tuple


def table(seed: int) -> List[int]:
    """The prompt's secret table: key -> value."""
    rng = random.Random(seed)
    return [rng.randrange(10) for _ in range(10)]


def score(keys: List[int], values: List[int], looked_up: List[int], answer: List[int]) -> float:
    """Half for calling the tool on the right key at each turn, half for each right answer:
    a tool-use reward with its call checked (the answer alone gives a signal too sparse to learn
    from while the calls are still random)."""
    calls = sum(a == k for a, k in zip(looked_up, keys))
    right = sum(y == values[k] for y, k in zip(answer, keys))
    return (calls + right) / (2 * max(len(keys), 1))


class _Sandbox(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        # This runs in the forked sandbox: it must not keep the host's listening socket, or a
        # node whose host is gone would still accept connections while a sandbox lingers.
        self.server.socket.close()
        cfg = self.server.cfg  # type: ignore[attr-defined]
        words = self.rfile.readline().split()
        if len(words) < 2 or words[0] != b"start":
            return
        seed, step_ms, keys = int(words[1]), float(words[2]), [int(k) for k in words[3:]]
        values = table(seed)
        latency = random.Random(seed ^ os.getpid())
        time.sleep(cfg.start_ms / 1000)
        self.wfile.write(b"ready\n")
        looked_up: List[int] = []
        for line in self.rfile:
            cmd, *args = line.split()
            if cmd == b"lookup":
                time.sleep(max(latency.gauss(step_ms, step_ms / 5), 0.0) / 1000)
                looked_up.append(int(args[0]) % 10)
                self.wfile.write(b"value %d\n" % values[looked_up[-1]])
            elif cmd == b"score":
                self.wfile.write(b"reward %r\n" % score(keys, values, looked_up, [int(y) for y in args]))
                return


class _Host(socketserver.ForkingTCPServer):
    allow_reuse_address = True
    max_children = 4096  # one per trajectory of the rollouts it serves
    request_queue_size = 4096  # a rollout connects all its sandboxes at once


def serve(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", required=True, help="IP:PORT to listen on")
    ap.add_argument("--start-ms", type=float, default=20.0)
    cfg = ap.parse_args(argv)
    ip, _, port = cfg.addr.rpartition(":")
    with _Host((ip, int(port)), _Sandbox) as host:
        host.cfg = cfg  # type: ignore[attr-defined]
        print(f"listening {cfg.addr}", flush=True)
        host.serve_forever()


class Sandboxes:
    """One rollout pass's sandboxes, one per trajectory (see :class:`Environment`)."""

    def __init__(self, conns: List[Optional[socket.socket]], timeout_s: float) -> None:
        self.conns, self.timeout_s = conns, timeout_s
        self._stats = {"turns": 0, "env_s": 0.0, "startup_s": 0.0, "reward_s": 0.0}

    def _ask(self, lines: List[bytes], stat: str) -> List[Optional[bytes]]:
        """Sends each live sandbox its line; its answer, or ``None`` (and the sandbox is dead).
        Each answer's wait is added to ``stat``."""
        sel = selectors.DefaultSelector()
        sent = time.perf_counter()
        for i, (c, line) in enumerate(zip(self.conns, lines)):
            if c is None:
                continue
            try:
                c.sendall(line)
                sel.register(c, selectors.EVENT_READ, (i, bytearray()))
            except OSError:
                self.conns[i] = None
        out: List[Optional[bytes]] = [None] * len(lines)
        deadline = sent + self.timeout_s
        while sel.get_map():
            ready = sel.select(max(deadline - time.perf_counter(), 0.0))
            if not ready:
                break
            for key, _ in ready:
                i, buf = key.data
                try:
                    chunk = key.fileobj.recv(256)
                except OSError:
                    chunk = b""
                buf += chunk
                if chunk and not buf.endswith(b"\n"):
                    continue
                sel.unregister(key.fileobj)
                if chunk:
                    out[i] = bytes(buf)
                    self._stats[stat] += time.perf_counter() - sent
        for key in list(sel.get_map().values()):  # no answer in time
            sel.unregister(key.fileobj)
        for i, answer in enumerate(out):
            if answer is None and self.conns[i] is not None:
                self.conns[i].close()
                self.conns[i] = None
        sel.close()
        return out

    def lookup(self, keys: List[int]) -> List[int]:
        answers = self._ask([b"lookup %d\n" % k for k in keys], "env_s")
        self._stats["turns"] += sum(a is not None for a in answers)
        return [int(a.split()[1]) if a else 0 for a in answers]

    def score(self, answers: List[List[int]]) -> List[float]:
        got = self._ask([("score " + " ".join(map(str, y)) + "\n").encode() for y in answers], "reward_s")
        return [float(a.split()[1]) if a else 0.0 for a in got]

    def alive(self) -> List[bool]:
        return [c is not None for c in self.conns]

    def stats(self) -> Dict[str, float]:
        return dict(self._stats)

    def close(self) -> None:
        for c in self.conns:
            if c is not None:
                c.close()


class Environment:
    """The environment nodes a job's rollout may use (``IP:PORT`` each), and its tool's step."""

    def __init__(self, addrs: List[str], step_ms: float, timeout_s: float = 20.0) -> None:
        if not addrs:
            raise ValueError("an agentic job needs at least one environment node (--env IP:PORT)")
        self.addrs = [(a.rpartition(":")[0], int(a.rpartition(":")[2])) for a in addrs]
        self.refused: Set[Tuple[str, int]] = set()
        self.timeout_s, self.step_ms = timeout_s, step_ms

    def _connect(self, i: int) -> Tuple[socket.socket, Tuple[str, int]]:
        """A connection for trajectory ``i``: its node in turn, or the next one that answers."""
        for j in range(len(self.addrs)):
            addr = self.addrs[(i + j) % len(self.addrs)]
            if addr in self.refused:
                continue
            try:
                return socket.create_connection(addr, timeout=self.timeout_s), addr
            except OSError:
                self.refused.add(addr)
        raise RuntimeError(f"no environment node answers (tried {self.addrs})")

    def open(self, specs: List[Tuple[int, List[int]]]) -> Sandboxes:
        """Starts one sandbox per ``(table seed, keys)``, all at once."""
        conns: List[Optional[socket.socket]] = []
        for i in range(len(specs)):
            c, _ = self._connect(i)
            c.settimeout(None)
            conns.append(c)
        boxes = Sandboxes(conns, self.timeout_s)
        boxes._ask([("start %d %r %s\n" % (seed, self.step_ms, " ".join(map(str, keys)))).encode()
                    for seed, keys in specs], "startup_s")
        return boxes


if __name__ == "__main__":
    serve(sys.argv[1:])
