"""Weave's PyTorch runtime: resident state, checkpoints, versioned weight sync, GRPO.

Skipped where torch is not installed (the stdlib client's own tests run without it);
``.ci/run`` installs the ``torch`` extra, so they run there.
"""

import json
import os
import socket
import tempfile
import unittest

try:
    import torch
    import torch.multiprocessing as mp
except ImportError:  # pragma: no cover - exercised on machines without the extra
    torch = None

if torch is not None:
    from weave_client.runtime import CheckpointError, ResidentState
    from weave_client.runtime.policy import (
        GrpoConfig,
        PolicyConfig,
        advantages,
        build_policy,
        make_optimizer,
        reward,
        rollout,
        train_step,
    )


def _build():
    cfg, g = PolicyConfig(), GrpoConfig(prompts=8, group=4)
    p = build_policy(cfg)
    return {"policy": p}, {"adam": make_optimizer(p, g)}


def _trained_state(name="job/trainer"):
    torch.set_num_threads(1)
    s = ResidentState(name, _build)
    s.activate()
    g = GrpoConfig(prompts=8, group=4)
    rng = torch.Generator().manual_seed(3)
    train_step(s.modules["policy"], s.optimizers["adam"], rollout(s.modules["policy"], rng, g), g)
    return s


def _snapshot(s):
    state = {f"p.{k}": v.clone() for k, v in s.modules["policy"].state_dict().items()}
    for i, st in enumerate(s.optimizers["adam"].state.values()):
        for k, v in st.items():
            state[f"o.{i}.{k}"] = v.clone()
    return state


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class ResidentStateTest(unittest.TestCase):
    def test_offload_releases_the_working_copy_and_warm_restores_it_exactly(self):
        s = _trained_state()
        before = _snapshot(s)
        held = s.state_bytes()
        off = s.offload()
        self.assertEqual(off.kind, "offload")
        self.assertEqual(s.host_bytes(), held, "the host buffer holds the whole state")
        for p in s.modules["policy"].parameters():
            self.assertEqual(p.untyped_storage().nbytes(), 0, "the working copy is released")
        sw = s.activate()
        self.assertEqual(sw.kind, "warm")
        after = _snapshot(s)
        self.assertEqual(before.keys(), after.keys())
        for k in before:
            self.assertTrue(torch.equal(before[k], after[k]), k)

    def test_cold_load_from_a_checkpoint_is_exact_and_damage_is_named(self):
        s = _trained_state()
        s.version = 7
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trainer.pt")
            s.save(path)
            cold = ResidentState("job/trainer", _build)
            self.assertEqual(cold.activate(path).kind, "cold")
            self.assertEqual(cold.version, 7)
            want, got = _snapshot(s), _snapshot(cold)
            for k in want:
                self.assertTrue(torch.equal(want[k], got[k]), k)
            # Its optimizer state can be offloaded like any other (loaded storage is not).
            cold.offload()
            self.assertEqual(cold.activate().kind, "warm")
            # Another job's checkpoint is refused, naming both.
            with self.assertRaisesRegex(CheckpointError, "not `other/trainer`"):
                ResidentState("other/trainer", _build).activate(path)
            # One flipped byte: refused with the file's name, nothing loaded.
            with open(path, "r+b") as f:
                f.seek(100)
                b = f.read(1)
                f.seek(100)
                f.write(bytes([b[0] ^ 0xFF]))
            with self.assertRaisesRegex(CheckpointError, "trainer.pt: damaged"):
                ResidentState("job/trainer", _build).activate(path)
            with self.assertRaisesRegex(CheckpointError, "no such checkpoint"):
                ResidentState("job/trainer", _build).activate(os.path.join(d, "missing.pt"))
            os.remove(path + ".sha256")
            with self.assertRaisesRegex(CheckpointError, "digest"):
                ResidentState("job/trainer", _build).activate(path)

    def test_weights_published_into_an_offloaded_state_appear_on_activation(self):
        s = ResidentState("job/rollout", lambda: ({"policy": build_policy(PolicyConfig())}, {}))
        s.activate()
        s.offload()
        new = torch.arange(sum(p.numel() for p in s.modules["policy"].parameters()), dtype=torch.float32)
        s.load_parameters(new, 5)
        s.activate()
        self.assertEqual(s.version, 5)
        self.assertTrue(torch.equal(s.parameters_flat(), new))
        with self.assertRaisesRegex(ValueError, "weights received"):
            s.load_parameters(new[:10], 6)
        self.assertEqual(s.version, 5, "a refused update changes nothing")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sync_peer(rank, port, flat, corrupt, out):
    import torch.distributed as dist

    from weave_client.runtime.sync import Plan, recv_weights, send_weights

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    plan = Plan.single(flat.numel() * 4)
    if rank == 0:
        stats = send_weights(flat, 3, plan, 0, corrupt_first=corrupt)
        out.put(("sent", stats.attempts))
    else:
        got = recv_weights(plan, 1)
        out.put(("received", got.version, got.refused, torch.equal(got.flat, flat)))
    dist.barrier()
    dist.destroy_process_group()


def _plan_peer(rank, port, plan_json, flat, corrupt, out):
    """One rank of a two-trainer, two-rollout-worker plan: trainers send, rollout workers receive."""
    import torch.distributed as dist

    from weave_client.runtime.sync import Plan, recv_weights, send_weights

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    plan = Plan.from_weave(plan_json)
    if rank < 2:
        stats = send_weights(flat, 7, plan, rank, corrupt_first=corrupt and rank == 1)
        out.put((rank, "sent", stats.attempts, stats.bytes))
    else:
        got = recv_weights(plan, rank)
        out.put((rank, "received", got.version, got.refused, torch.equal(got.flat, flat)))
    dist.barrier()
    dist.destroy_process_group()


def _run_peers(test, target, world, args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, port, *args, q)) for r in range(world)]
    for p in procs:
        p.start()
    msgs = sorted([q.get(timeout=120) for _ in range(world)], key=str)
    for p in procs:
        p.join(timeout=120)
        test.assertEqual(p.exitcode, 0)
    return msgs


def _topology_aware(model_bytes):
    """weave-sync's topology-aware plan for two training and two rollout GPUs: shard i crosses
    to rollout GPU i, which forwards it to the other (the JSON ``weave sync plan --emit`` prints)."""
    half = (model_bytes + 1) // 2
    shards = [(0, half), (half, model_bytes - half)]
    end = lambda side, gpu: {"side": side, "gpu": gpu}  # noqa: E731
    transfers = []
    for i, (o, n) in enumerate(shards):
        transfers.append({"stage": 1, "from": end("train", i), "to": end("rollout", i), "offset": o, "len": n,
                          "tier": "slow"})
        transfers.append({"stage": 2, "from": end("rollout", i), "to": end("rollout", 1 - i), "offset": o,
                          "len": n, "tier": "fast"})
    return {"kind": "topology-aware", "model_bytes": model_bytes, "train_gpus": 2, "rollout_gpus": 2,
            "transfers": transfers}


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class SyncTest(unittest.TestCase):
    def test_a_damaged_copy_is_refused_and_sent_again(self):
        flat = torch.randn(10_000, generator=torch.Generator().manual_seed(1))
        for corrupt, attempts in ((False, 1), (True, 2)):
            msgs = _run_peers(self, _sync_peer, 2, (flat, corrupt))
            self.assertEqual(msgs[0], ("received", 3, attempts - 1, True))
            self.assertEqual(msgs[1], ("sent", attempts))

    def test_a_plan_of_shards_and_forwards_delivers_every_byte_checked(self):
        flat = torch.randn(10_001, generator=torch.Generator().manual_seed(2))
        plan = _topology_aware(flat.numel() * 4)
        for corrupt, attempts in ((False, 1), (True, 2)):
            msgs = _run_peers(self, _plan_peer, 4, (plan, flat, corrupt))
            # Each trainer sends its own half once per attempt; each worker ends with all of it.
            self.assertEqual(msgs[0], (0, "sent", attempts, 20_002))
            self.assertEqual(msgs[1], (1, "sent", attempts, 20_002))
            self.assertEqual(msgs[2], (2, "received", 7, attempts - 1, True))
            self.assertEqual(msgs[3], (3, "received", 7, attempts - 1, True))


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class RanksTest(unittest.TestCase):
    def test_a_plan_that_does_not_fit_the_jobs_ranks_or_bytes_is_refused_by_name(self):
        from weave_client.runtime.grpo_job import parse_args
        from weave_client.runtime.job_process import weights_plan

        base = ["--server", "x", "--job", "j", "--port", "1", "--dir", "/tmp/j"]
        self.assertEqual(weights_plan(parse_args(base), 40).transfers[0].length, 40)
        with self.assertRaises(SystemExit) as e:
            weights_plan(parse_args([*base, "--trainers", "2"]), 40)
        self.assertIn("--sync-plan", str(e.exception))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            with open(path, "w") as f:
                json.dump({"plan": _topology_aware(40)}, f)
            self.assertEqual(len(weights_plan(parse_args([*base, "--trainers", "2", "--sync-plan", path]), 40)
                                 .transfers), 4)
            for trainers, nbytes in ((2, 44), (3, 40)):
                with self.assertRaises(SystemExit) as e:
                    weights_plan(parse_args([*base, "--trainers", str(trainers), "--sync-plan", path]), nbytes)
                self.assertIn(path, str(e.exception))


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class ResumeTest(unittest.TestCase):
    def test_a_relaunch_resumes_from_exactly_weaves_count_or_refuses(self):
        from weave_client.runtime import checkpointing

        s = _trained_state("sort/trainer")
        s.version = 4
        with tempfile.TemporaryDirectory() as d:
            s.save(checkpointing.checkpoint_path(d))
            checkpointing.resume_at("sort", d, 4)
            with open(os.path.join(d, "resume.json")) as f:
                self.assertEqual(json.load(f), {"iteration": 4, "path": checkpointing.checkpoint_path(d)})
            # Weave counts 5 completed, the checkpoint holds 4: refused, naming both.
            with self.assertRaisesRegex(SystemExit, "iteration 4.*hold iteration 5"):
                checkpointing.resume_at("sort", d, 5)
            # Nothing completed: start afresh, whatever lies in the directory.
            checkpointing.resume_at("sort", d, 0)
            with open(os.path.join(d, "resume.json")) as f:
                self.assertEqual(json.load(f), {"iteration": 0, "path": None})

    def test_a_notice_on_the_training_node_checkpoints_the_acknowledged_iteration_outside_phases(self):
        import shutil
        from types import SimpleNamespace

        from weave_client.runtime import checkpointing

        s = _trained_state("sort/trainer")
        s.version = 3
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(checkpointing.staging_dir(d), exist_ok=True)
            try:
                s.save(checkpointing.staged_path(d, 3))
                log, ckpt = os.path.join(d, "phases.jsonl"), checkpointing.checkpoint_path(d)
                a = SimpleNamespace(dir=d, job="sort")
                # In a phase (the lock held): nothing is written now; the phase writes it.
                busy = checkpointing.NoticeGuard(a, ["t0"], {"acked": 3, "pending": None, "durable": -1}, log)
                with busy.lock:
                    busy.heard({"node": "t0", "deadline_us": 1})
                self.assertIsNotNone(busy.noticed)
                self.assertFalse(os.path.exists(checkpointing.noticed_path(d, 3)))
                run = {"acked": 3, "pending": None, "durable": -1}
                guard = checkpointing.NoticeGuard(a, ["t0"], run, log)
                guard.heard({"node": "r0", "deadline_us": 1})
                self.assertIsNone(guard.noticed, "a notice on another node")
                self.assertFalse(os.path.exists(checkpointing.noticed_path(d, 3)))
                guard.heard({"node": "t0", "deadline_us": 1})
                self.assertEqual(run["durable"], 3)
                # The host goes with its memory: the copy on disk holds the acknowledged
                # iteration, also when the host went in the middle of writing the next one.
                shutil.rmtree(checkpointing.staging_dir(d))
                with open(checkpointing.noticed_path(d, 4), "wb") as f:
                    f.write(b"half a state")
                with open(checkpointing.noticed_path(d, 4) + ".sha256", "w") as f:
                    f.write("0" * 64 + "\n")
                self.assertEqual(checkpointing.resume_file(d, 3), checkpointing.noticed_path(d, 3))
                self.assertFalse(os.path.exists(ckpt), "the checkpoint is left as it was")
                with open(log) as f:
                    written = [json.loads(line) for line in f if '"checkpoint"' in line]
                self.assertEqual([(e["iteration"], e["on_notice"]) for e in written], [(3, True)])
            finally:
                shutil.rmtree(checkpointing.staging_dir(d), ignore_errors=True)


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
@unittest.skipUnless(hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2, "needs two CPUs")
class PinTest(unittest.TestCase):
    def test_a_process_pinned_by_its_node_stays_on_the_nodes_cpus(self):
        import subprocess
        import sys

        a, b = sorted(os.sched_getaffinity(0))[:2]
        # A child on CPU a (as a node's CPU set pins it) asked for b keeps a; asked for a, runs on a.
        code = ("import os; from weave_client.runtime.job_process import pin_to; "
                f"os.sched_setaffinity(0, [{a}]); print(pin_to([{b}]), pin_to([{a}]), sorted(os.sched_getaffinity(0)))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split(), [f"[{a}]", f"[{a}]", f"[{a}]"])
        # Free to use both: it is pinned where it asks.
        code = f"from weave_client.runtime.job_process import pin_to; import os; pin_to([{b}]); print(sorted(os.sched_getaffinity(0)))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.strip(), f"[{b}]")


@unittest.skipIf(torch is None, "needs the torch extra: pip install './python[torch]'")
class GrpoTest(unittest.TestCase):
    def test_reward_and_advantages(self):
        prompt = torch.tensor([[3, 1, 2, 0]])
        self.assertEqual(reward(prompt, torch.tensor([[0, 1, 2, 3]])).item(), 1.0)
        self.assertEqual(reward(prompt, torch.tensor([[0, 1, 3, 2]])).item(), 0.5)
        a = advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.2]), 4)
        self.assertAlmostEqual(a[:4].sum().item(), 0.0, places=5)
        self.assertTrue(torch.equal(a[4:], torch.zeros(4)), "a group with equal rewards teaches nothing")

    def test_a_fixed_seed_learns_the_same_way_twice_and_improves(self):
        torch.set_num_threads(1)

        def run():
            g = GrpoConfig()
            p = build_policy(PolicyConfig())
            opt = make_optimizer(p, g)
            rewards = []
            for k in range(60):
                b = rollout(p, torch.Generator().manual_seed(1_000_003 + k), g)
                rewards.append(b["reward"].mean().item())
                train_step(p, opt, b, g)
            return rewards

        first, second = run(), run()
        self.assertEqual(first, second, "bit-for-bit reproducible for a seed")
        self.assertLess(sum(first[:10]) / 10, 0.15, "starts near the random policy's 0.1")
        self.assertGreater(sum(first[-10:]) / 10, sum(first[:10]) / 10 + 0.03, "and learns")


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(torch is None or not torch.cuda.is_available(),
                 "needs CUDA: the pinned-memory, non-blocking path runs only where a GPU is")
class CudaResidentStateTest(unittest.TestCase):
    """The CUDA path of :class:`ResidentState`: pinned host buffer, non-blocking copies, and the
    working copies on the GPU released while offloaded."""

    def test_offload_to_pinned_memory_and_warm_back_exactly(self):
        cfg, g = PolicyConfig(), GrpoConfig(prompts=8, group=4)

        def build():
            p = build_policy(cfg)
            return {"policy": p}, {"adam": make_optimizer(p, g)}

        s = ResidentState("job/cuda", build, device="cuda")
        s.activate()
        policy = s.modules["policy"]
        with torch.no_grad():
            for p in policy.parameters():
                p.mul_(1.5).add_(0.25)
        before = {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}
        allocated = torch.cuda.memory_allocated()
        off = s.offload()
        self.assertTrue(s.host.is_pinned(), "the host buffer is pinned")
        self.assertLess(torch.cuda.memory_allocated(), allocated, "the GPU copies are released")
        self.assertEqual(off.bytes, s.state_bytes())
        sw = s.activate()
        self.assertEqual(sw.kind, "warm")
        for k, v in s.modules["policy"].state_dict().items():
            self.assertTrue(v.is_cuda)
            self.assertTrue(torch.equal(v.cpu(), before[k]), k)
