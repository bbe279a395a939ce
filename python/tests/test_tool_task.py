"""The agentic reference task: tool calls into sandbox processes, a lost environment node's
trajectories re-run exactly once, and the reward computed in the sandbox.

Skipped where torch is not installed; ``.ci/run`` installs the ``torch`` extra.
"""

import os
import signal
import subprocess
import sys
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - exercised on machines without the extra
    torch = None

from weave_client.runtime import sandbox_host


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _host() -> "tuple[subprocess.Popen, str]":
    addr = f"127.0.0.1:{_free_port()}"
    p = subprocess.Popen([sys.executable, "-m", "weave_client.runtime.sandbox_host", "--addr", addr, "--start-ms", "1"],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().startswith("listening")
    return p, addr


def _lose(p: subprocess.Popen) -> None:
    """The node's processes go: the host and every sandbox it forked."""
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)


class ScoreTest(unittest.TestCase):
    def test_half_for_the_calls_half_for_the_answers(self):
        keys, values = [3, 1], sandbox_host.table(7)
        self.assertEqual(sandbox_host.score(keys, values, [3, 1], [values[3], values[1]]), 1.0)
        self.assertEqual(sandbox_host.score(keys, values, [3, 1], [(values[3] + 1) % 10, (values[1] + 1) % 10]), 0.5)
        self.assertEqual(sandbox_host.score(keys, values, [0, 0], [values[3], (values[1] + 1) % 10]), 0.25)


class SandboxesTest(unittest.TestCase):
    def setUp(self):
        self.hosts = [_host(), _host()]
        self.addCleanup(lambda: [_lose(p) for p, _ in self.hosts if p.poll() is None])

    def test_a_lookup_answers_from_the_prompts_table_and_the_sandbox_scores(self):
        env = sandbox_host.Environment([a for _, a in self.hosts], step_ms=1.0)
        boxes = env.open([(11, [4, 2]), (12, [4, 2])])
        got = boxes.lookup([4, 4])
        self.assertEqual(got, [sandbox_host.table(11)[4], sandbox_host.table(12)[4]])
        t = sandbox_host.table(11)
        self.assertEqual(boxes.score([[t[4], t[2]], [0, 0]])[0], 0.75, "one right call of two, both answers")
        self.assertEqual(boxes.alive(), [True, True])
        self.assertEqual(boxes.stats()["turns"], 2)
        boxes.close()

    def test_a_lost_node_kills_its_sandboxes_and_the_next_rollout_avoids_it(self):
        env = sandbox_host.Environment([a for _, a in self.hosts], step_ms=1.0)
        boxes = env.open([(1, [0]), (2, [0]), (3, [0]), (4, [0])])
        _lose(self.hosts[0][0])
        boxes.lookup([0, 0, 0, 0])
        self.assertEqual(boxes.alive(), [False, True, False, True], "trajectories alternate between the nodes")
        boxes.close()
        again = env.open([(1, [0]), (2, [0])])
        self.assertEqual(again.alive(), [True, True], "both on the node that answers")
        again.close()

    def test_a_sandbox_that_outlives_its_host_does_not_keep_the_node_answering(self):
        env = sandbox_host.Environment([self.hosts[0][1]], step_ms=1.0)
        boxes = env.open([(1, [0])])
        host = self.hosts[0][0]
        host.kill()  # the host alone: its sandbox lives on
        host.wait(timeout=30)
        self.assertEqual(boxes.lookup([0]), [sandbox_host.table(1)[0]], "the sandbox still answers")
        with self.assertRaisesRegex(RuntimeError, "no environment node answers"):
            env.open([(2, [0])])
        boxes.close()

    def test_no_node_answering_is_an_error_naming_them(self):
        env = sandbox_host.Environment([a for _, a in self.hosts], step_ms=1.0)
        for p, _ in self.hosts:
            _lose(p)
        with self.assertRaisesRegex(RuntimeError, "no environment node answers"):
            env.open([(1, [0])])


@unittest.skipIf(torch is None, "needs torch (pip install './python[torch]')")
class ToolRolloutTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)
        self.hosts = [_host(), _host()]
        self.addCleanup(lambda: [_lose(p) for p, _ in self.hosts if p.poll() is None])

    def _policy(self):
        from weave_client.runtime.policy import GrpoConfig, PolicyConfig, build_policy

        return build_policy(PolicyConfig(digits=2, task="tool", seed=3)), GrpoConfig(prompts=4, group=4)

    def test_a_rollout_holds_each_trajectory_once_with_its_tool_calls(self):
        from weave_client.runtime import tool_task

        policy, g = self._policy()
        env = sandbox_host.Environment([a for _, a in self.hosts], step_ms=1.0)
        batch = tool_task.rollout(policy, torch.Generator().manual_seed(5), g, env)
        seq, stats = batch["seq"], batch["env_stats"]
        self.assertEqual(tuple(seq.shape), (16, tool_task.length(2)))
        self.assertEqual(stats["trajectories"], 16)
        self.assertEqual(stats["turns"], 32, "two tool calls per trajectory")
        self.assertEqual(stats["rerun"], 0)
        self.assertTrue(((batch["reward"] >= 0) & (batch["reward"] <= 1)).all())
        self.assertTrue((seq[:, 2] == tool_task.SEP).all())

    def test_trajectories_of_a_lost_node_run_again_and_count_once(self):
        from weave_client.runtime import tool_task

        policy, g = self._policy()

        class LosesNodeZero(sandbox_host.Environment):
            """Loses environment node 0 once its first pass's sandboxes have started."""

            def open(inner, specs):
                boxes = super().open(specs)
                if self.hosts[0][0].poll() is None:
                    _lose(self.hosts[0][0])
                return boxes

        env = LosesNodeZero([a for _, a in self.hosts], step_ms=1.0)
        batch = tool_task.rollout(policy, torch.Generator().manual_seed(5), g, env)
        stats = batch["env_stats"]
        self.assertEqual(stats["trajectories"], 16)
        self.assertEqual(stats["rerun"], 8, "node 0 held every other trajectory")
        self.assertEqual(batch["seq"].shape[0], 16)
        # Each trajectory's sequence is whole: its prompt, the separator, calls and answers.
        self.assertTrue((batch["seq"][:, 2] == tool_task.SEP).all())
        self.assertTrue(torch.isfinite(batch["old_logprob"]).all())

    def test_the_policy_learns_to_call_the_tool(self):
        """A few updates raise the reward: the calls are learned before the answers."""
        from weave_client.runtime import tool_task
        from weave_client.runtime.policy import GrpoConfig, make_optimizer, train_step

        policy, _ = self._policy()
        g = GrpoConfig(prompts=16, group=8, lr=3e-3)
        opt = make_optimizer(policy, g)
        env = sandbox_host.Environment([a for _, a in self.hosts], step_ms=0.0)
        rng = torch.Generator().manual_seed(1)
        rewards = []
        for _ in range(40):
            batch = tool_task.rollout(policy, rng, g, env)
            rewards.append(float(batch["reward"].mean()))
            train_step(policy, opt, batch, g)
        self.assertGreater(sum(rewards[-5:]) / 5, sum(rewards[:5]) / 5 + 0.15, rewards)


if __name__ == "__main__":
    unittest.main()
