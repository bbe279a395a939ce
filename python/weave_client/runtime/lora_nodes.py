"""``lora_jobs`` on the mini cluster's nodes (``minicluster``): every engine process runs on the
rollout node and every trainer on the training node (network namespaces, the processes pinned
to their node's core as ``lora_jobs`` pins them), and the adapters cross the shaped link
between the two over TCP. The parent, on this machine, starts them and speaks the same control
messages to them over the control bridge.

    python -m weave_client.runtime.lora_jobs --jobs 4 --iterations 600 --nodes-mbit 100

A node process is started as ``python -m weave_client.runtime.lora_nodes --role engine|train
...``: the trainer of group ``g`` listens on the training node's link address, port
``PEER_PORT + g``; its engine connects there. Needs root (``minicluster.available``).
"""

import argparse
import dataclasses
import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Listener

from . import minicluster

PEER_PORT = 29810
AUTH = b"weave-lora-nodes"
# Eight processes importing torch at once on two cores take a minute or more to start.
STARTUP_S = 300


class Channel:
    """A queue over a connection (``put``, ``get``, ``empty``): a put never waits for the
    reader, as a ``multiprocessing`` queue's does not (a sender thread writes). Pickled plainly:
    the connection's own pickler hands torch tensors over as shared memory, which another
    machine cannot open."""

    def __init__(self, conn):
        self.conn = conn
        self.outbox = queue.Queue()
        threading.Thread(target=self._send, daemon=True).start()

    def _send(self):
        while True:
            self.conn.send_bytes(pickle.dumps(self.outbox.get()))
            self.outbox.task_done()

    def put(self, obj):
        self.outbox.put(obj)

    def get(self):
        return pickle.loads(self.conn.recv_bytes())

    def empty(self):
        return not self.conn.poll()


class NodeProcess:
    """A node process as ``lora_jobs`` watches its children (``name``, ``exitcode``,
    ``terminate``, ``join``)."""

    def __init__(self, name, popen):
        self.name, self.popen = name, popen

    @property
    def exitcode(self):
        return self.popen.poll()

    def terminate(self):
        self.popen.terminate()

    def join(self, timeout=None):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def start(s, base_path, groups, cores, mc):
    """Starts each group's engine on the rollout node and its trainer on the training node;
    returns the processes and their control connections (in the order ``lora_jobs`` starts its
    children: each group's engine, then its trainer)."""
    # Every node process connects at once: a backlog of one would drop their SYNs for minutes.
    listener = Listener((mc.server_ip, 0), backlog=64, authkey=AUTH)
    host, port = listener.address
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs, order = [], []
    for g, members in enumerate(groups):
        for role, node, core in (("engine", "rollout", cores[0]), ("train", "train", cores[1])):
            cmd = [*mc.prefix(node), sys.executable, "-m", "weave_client.runtime.lora_nodes", "--role", role,
                   "--group", str(g), "--members", ",".join(map(str, members)), "--core", str(core),
                   "--base", base_path, "--setup", json.dumps(dataclasses.asdict(s)), "--control", f"{host}:{port}"]
            procs.append(NodeProcess(f"{role}-{g}", subprocess.Popen(cmd, env=env)))
            order.append((g, role))
    accepted = []

    def accept():
        for _ in order:
            conn = listener.accept()
            accepted.append((tuple(conn.recv()), conn))

    waiter = threading.Thread(target=accept, daemon=True)
    waiter.start()
    waiter.join(STARTUP_S)  # a node that never starts is an error, not a wait forever
    listener.close()
    if len(accepted) < len(order):
        for proc in procs:
            proc.terminate()
        raise RuntimeError(f"{len(order) - len(accepted)} LoRA node processes did not start within {STARTUP_S} s")
    controls = dict(accepted)
    return procs, [controls[k] for k in order]


def _peer(role, group):
    """The connection between a group's engine and trainer, across the shaped link."""
    address = (minicluster.link_ip_of_trainer(), PEER_PORT + group)
    if role == "train":
        with Listener(address, authkey=AUTH) as listener:
            return listener.accept()
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            return Client(address, authkey=AUTH)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv=None):
    from .lora_procs import engine_main, trainer_main
    from .lora_task import Setup

    p = argparse.ArgumentParser(description="one node process of lora_jobs on the mini cluster")
    p.add_argument("--role", choices=["engine", "train"], required=True)
    for flag in ("--group", "--core"):
        p.add_argument(flag, type=int, required=True)
    for flag in ("--members", "--base", "--setup", "--control"):
        p.add_argument(flag, required=True)
    a = p.parse_args(argv)
    host, port = a.control.rsplit(":", 1)
    control = Client((host, int(port)), authkey=AUTH)
    control.send((a.group, a.role))
    peer = Channel(_peer(a.role, a.group))
    s, members = Setup(**json.loads(a.setup)), [int(m) for m in a.members.split(",")]
    fn = engine_main if a.role == "engine" else trainer_main
    fn(a.core, a.base, s, members, peer, peer, control)
    peer.outbox.join()  # what is still in the outbox goes out before the process ends


if __name__ == "__main__":
    main()
