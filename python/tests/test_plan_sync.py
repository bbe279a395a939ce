"""A weight-sync plan executed with gloo (``weave_client.runtime.plan_sync``), the side of
``weave sync bench --gloo-python`` that compares it with Weave's engine: every rollout rank
ends with every checked byte, and a piece that fails its checksum fails the run, naming it.

Skipped where torch is not installed; ``.ci/run`` installs the ``torch`` extra.
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised on machines without the extra
    torch = None

PIECE = 1 << 16


def _topology_aware(model_bytes, n, m):
    """The planner's topology-aware plan for n -> m GPUs (as weave_model::syncplan makes it)."""
    size = -(-model_bytes // n)
    transfers = []
    for i in range(n):
        offset = min(i * size, model_bytes)
        length = min(size, model_bytes - offset)
        holder = i % m
        transfers.append({"stage": 1, "from": {"side": "train", "gpu": i}, "to": {"side": "rollout", "gpu": holder},
                          "offset": offset, "len": length, "tier": "slow"})
        transfers += [{"stage": 2, "from": {"side": "rollout", "gpu": holder}, "to": {"side": "rollout", "gpu": j},
                       "offset": offset, "len": length, "tier": "fast"} for j in range(m) if j != holder]
    return {"kind": "topology-aware", "model_bytes": model_bytes, "train_gpus": n, "rollout_gpus": m,
            "transfers": transfers}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class PlanSyncTest(unittest.TestCase):
    def _run(self, damage):
        n, m, size = 2, 2, 300_001
        model = bytes((i * 2654435761 >> 13) & 0xFF for i in range(size))
        plan = _topology_aware(size, n, m)
        checksums = {}
        for t in plan["transfers"]:
            at = t["offset"]
            while at < t["offset"] + t["len"]:
                ln = min(PIECE, t["offset"] + t["len"] - at)
                checksums[f"{at}:{ln}"] = hashlib.sha256(model[at:at + ln]).hexdigest()
                at += ln
        if damage:
            key = sorted(checksums)[1]
            checksums[key] = "0" * 64
        with tempfile.TemporaryDirectory() as d:
            mf, mod = os.path.join(d, "manifest.json"), os.path.join(d, "model.bin")
            with open(mf, "w") as f:
                json.dump({"version": 1, "plan": plan, "piece": PIECE, "checksums": checksums}, f)
            with open(mod, "wb") as f:
                f.write(model)
            master = f"127.0.0.1:{_free_port()}"
            env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR")
            procs = [subprocess.Popen([sys.executable, "-m", "weave_client.runtime.plan_sync", "--manifest", mf,
                                       "--model", mod, "--side", side, "--gpu", str(k), "--master", master],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                     for side, count in (("train", n), ("rollout", m)) for k in range(count)]
            outs = []
            for p in procs:
                try:
                    out, err = p.communicate(timeout=120 if not damage else 30)
                except subprocess.TimeoutExpired:
                    # A rank whose peer failed may wait for it; the failing rank has spoken.
                    p.kill()
                    out, err = p.communicate()
                outs.append((p.returncode, out, err))
            return key if damage else None, outs[n:]

    def test_every_rollout_rank_ends_with_every_checked_byte(self):
        _, rollout = self._run(damage=False)
        stage1 = []
        for code, out, err in rollout:
            self.assertEqual(code, 0, err)
            report = json.loads(out.splitlines()[0])
            self.assertGreater(report["seconds"], 0)
            stage1.append(report["stats"]["stage1_bytes"])
        self.assertEqual(stage1, [150_001, 150_000], "each holds its shard from the slow link")

    def test_a_piece_failing_its_checksum_fails_the_run_naming_it(self):
        key, rollout = self._run(damage=True)
        offset, length = key.split(":")
        failed = [err for code, _, err in rollout if code not in (0, None)]
        self.assertTrue(any(f"piece [{offset}, +{length}) failed its checksum" in e for e in failed), rollout)


if __name__ == "__main__":
    unittest.main()
