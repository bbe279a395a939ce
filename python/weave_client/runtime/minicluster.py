"""A miniature cluster on one machine: a rollout node and a training node as network
namespaces, each a CPU set, joined by a rate-limited link (``tc tbf`` both ways: the slow
inter-pool link weights cross), and both on a control bridge to this machine (where ``weave
serve`` listens) that is not limited. With ``env_nodes``, environment nodes (the agentic jobs'
sandbox hosts) join the control bridge too: the rollout reaches its sandboxes over it. Needs
root and iproute2; :func:`available` says why not.

    with MiniCluster(slow_mbit=100) as mc:
        mc.prefix("rollout")   # ["ip", "netns", "exec", "wv-node-r"]
        mc.server_ip           # bind weave serve here; both nodes reach it
        mc.link_ip("train")    # the trainer's address on the slow link (gloo's master)
"""

import os
import shutil
import subprocess
from typing import List, Optional

NS = {"rollout": "wv-node-r", "train": "wv-node-t"}
LINK_IP = {"rollout": "10.216.0.2", "train": "10.216.0.1"}
CONTROL_IP = {"rollout": "10.215.0.2", "train": "10.215.0.3"}
SERVER_IP = "10.215.0.1"
BRIDGE = "wv-ctl"
# The slow link's NIC in each node: gloo binds it (GLOO_SOCKET_IFNAME).
LINK_NIC = {"rollout": "wvl-r", "train": "wvl-t"}


def available() -> Optional[str]:
    """``None`` if a mini cluster can be built here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    return None


def _sh(*args: str) -> None:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed: {r.stderr.strip()}")


def env_ns(i: int) -> str:
    return f"wv-node-e{i}"


def env_ip(i: int) -> str:
    """Environment node ``i``'s address on the control bridge."""
    return f"10.215.0.{10 + i}"


class MiniCluster:
    def __init__(self, slow_mbit: float, env_nodes: int = 0) -> None:
        self.slow_mbit = slow_mbit
        self.server_ip = SERVER_IP
        self.nodes = {**NS, **{f"env{i}": env_ns(i) for i in range(env_nodes)}}
        self.control_ip = {**CONTROL_IP, **{f"env{i}": env_ip(i) for i in range(env_nodes)}}

    def __enter__(self) -> "MiniCluster":
        self.down()
        try:
            self._up()
        except Exception:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _up(self) -> None:
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "addr", "add", f"{SERVER_IP}/24", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        for role, ns in self.nodes.items():
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            ctl = _control_nic(role)
            _sh("ip", "link", "add", ctl, "netns", ns, "type", "veth", "peer", "name", f"{ctl}p")
            _sh("ip", "link", "set", f"{ctl}p", "master", BRIDGE)
            _sh("ip", "link", "set", f"{ctl}p", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.control_ip[role]}/24", "dev", ctl)
            _sh("ip", "-n", ns, "link", "set", ctl, "up")
        _sh("ip", "link", "add", LINK_NIC["rollout"], "netns", NS["rollout"], "type", "veth",
            "peer", "name", LINK_NIC["train"], "netns", NS["train"])
        rate = f"{self.slow_mbit}mbit"
        # A small bucket (2 ms at the rate, at least 10 full frames): a weights message of a few
        # hundred kB must not cross at line speed on the bucket's credit.
        burst = f"{max(int(self.slow_mbit * 1000 / 8 / 500), 15)}kb"
        for role, ns in NS.items():
            nic = LINK_NIC[role]
            _sh("ip", "-n", ns, "addr", "add", f"{LINK_IP[role]}/24", "dev", nic)
            _sh("ip", "-n", ns, "link", "set", nic, "up")
            _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", nic, "root", "tbf", "rate", rate,
                "burst", burst, "latency", "100ms")

    def down(self) -> None:
        for role, ns in self.nodes.items():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            # A namespace a process still held when it was deleted lives on until that process
            # ends, and with it the bridge's end of its control link: remove it by name.
            subprocess.run(["ip", "link", "del", f"{_control_nic(role)}p"], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)

    @staticmethod
    def prefix(role: str) -> List[str]:
        """Runs a command on the node of ``role`` (``"rollout"``, ``"train"``, ``"env0"``, ...)."""
        return ["ip", "netns", "exec", NS[role] if role in NS else env_ns(int(role[3:]))]

    @staticmethod
    def link_ip(role: str) -> str:
        return LINK_IP[role]


def _control_nic(role: str) -> str:
    """The node's end of its control link (the bridge's end is this name with a ``p``)."""
    return f"wvc-{role[0]}{role[3:]}"


def link_ip_of_trainer() -> str:
    """Where a job's trainer listens for its process group (gloo's master)."""
    return LINK_IP["train"]
