"""What the mini cluster's shaped link carries: one TCP stream's payload rate from the training
node to the rollout node, as a fraction of the link's line rate.

A sync plan's prediction charges every stream a share of line rate; the share fitted to the
paper's Fig. 12 (0.85) belongs to that cluster's links, not to a ``tc tbf`` link between two
namespaces, whose share is what one bulk stream measures here (headers and the token bucket's
pacing). The probe is independent of the syncs it calibrates: one stream, one message at a
time, no plan, no gloo.
"""

import json
import statistics
import subprocess
import sys

from .minicluster import MiniCluster

PORT = 29690

_RECEIVER = r"""
import socket, struct, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept()
def read(n):
    buf = bytearray()
    while len(buf) < n:
        part = c.recv(min(1 << 20, n - len(buf)))
        if not part:
            return None
        buf += part
    return buf
while True:
    head = read(8)
    if head is None:
        break
    read(struct.unpack("!Q", head)[0]); c.sendall(b"k")
"""

_SENDER = r"""
import json, socket, struct, sys, time
size, runs = int(sys.argv[3]), int(sys.argv[4])
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
payload, times = bytes(size), []
for _ in range(runs):
    t = time.perf_counter(); c.sendall(struct.pack("!Q", size) + payload); c.recv(1)
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def stream_efficiency(slow_mbit: float, size: int = 2_000_000, runs: int = 5) -> float:
    """The median payload rate of ``runs`` messages of ``size`` bytes on one connection, over
    the line rate; the first message (slow start) is not counted."""
    ip = MiniCluster.link_ip("rollout")
    receiver = subprocess.Popen([*MiniCluster.prefix("rollout"), sys.executable, "-c", _RECEIVER, ip, str(PORT)],
                                stdout=subprocess.PIPE, text=True)
    try:
        if receiver.stdout is None or receiver.stdout.readline().strip() != "ready":
            raise RuntimeError("the link probe's receiver did not start")
        out = subprocess.run([*MiniCluster.prefix("train"), sys.executable, "-c", _SENDER, ip, str(PORT), str(size),
                              str(runs + 1)], check=True, capture_output=True, text=True, timeout=120).stdout
    finally:
        receiver.kill()
        receiver.wait()
    seconds = statistics.median(json.loads(out)[1:])
    return min(1.0, size * 8 / (seconds * slow_mbit * 1e6))
