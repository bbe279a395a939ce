"""A rollout pool moves a noticed node's prompts to the other workers: every prompt is
generated exactly once, the dropped one started over elsewhere with the same result."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from weave_client.rollout_pool import RolloutPool  # noqa: E402


class Generator:
    """Each prompt takes ``steps`` steps of ``step_s``; its result depends on the prompt only.
    Records every attempt and which ones stopped."""

    def __init__(self, steps=5, step_s=0.01):
        self.steps, self.step_s = steps, step_s
        self.lock = threading.Lock()
        self.started, self.stopped = [], []

    def __call__(self, prompt, node, stopped):
        with self.lock:
            self.started.append((prompt, node))
        for _ in range(self.steps):
            if stopped():
                with self.lock:
                    self.stopped.append((prompt, node))
                return None
            time.sleep(self.step_s)
        return prompt * 10


class RolloutPoolTest(unittest.TestCase):
    def test_without_a_notice_every_prompt_runs_once_where_it_was_dealt(self):
        g = Generator()
        pool = RolloutPool(["r0", "r1"], g)
        out = pool.run(list(range(10)))
        self.assertEqual(out, {p: p * 10 for p in range(10)})
        self.assertEqual(sorted(p for p, _ in g.started), list(range(10)))
        self.assertEqual((pool.moved, pool.restarted), (0, 0))
        self.assertEqual(pool.produced_by, {"r0": 5, "r1": 5})

    def test_a_notice_mid_rollout_moves_the_nodes_prompts_and_nothing_is_lost_or_doubled(self):
        g = Generator(steps=10, step_s=0.01)
        pool = RolloutPool(["r0", "r1", "r2"], g)
        prompts = list(range(30))
        result = {}
        t = threading.Thread(target=lambda: result.update(pool.run(prompts)))
        t.start()
        # Wait until r1 is generating, then take it.
        while not any(n == "r1" for _, n in list(g.started)):
            time.sleep(0.005)
        self.assertTrue(pool.notice("r1"))
        t.join(10)
        self.assertEqual(result, {p: p * 10 for p in prompts})
        self.assertEqual(pool.leaving(), ["r1"])
        # The prompt r1 was generating was dropped there and started over on another worker.
        dropped = [p for p, n in g.stopped]
        self.assertEqual([n for _, n in g.stopped], ["r1"])
        for p in dropped:
            self.assertTrue(any(q == p and n != "r1" for q, n in g.started), p)
        self.assertEqual(pool.restarted, 1)
        self.assertGreater(pool.moved, pool.restarted, "its queued prompts moved too")
        self.assertEqual(sum(pool.produced_by.values()), 30)
        finished = len([1 for p, n in g.started if n == "r1"]) - len(dropped)
        self.assertEqual(pool.produced_by["r1"], finished)

    def test_a_notice_on_the_last_node_moves_nothing_and_a_stranger_is_ignored(self):
        pool = RolloutPool(["r0", "r1"], Generator())
        self.assertFalse(pool.notice("r9"))
        self.assertTrue(pool.notice("r0"))
        self.assertFalse(pool.notice("r0"), "already leaving")
        self.assertFalse(pool.notice("r1"), "the last node stays")
        out = pool.run(list(range(6)))
        self.assertEqual(out, {p: p * 10 for p in range(6)})
        self.assertEqual(pool.produced_by, {"r0": 0, "r1": 6})

    def test_a_lent_node_takes_a_share_mid_rollout_and_its_reclaim_moves_the_rest_back(self):
        g = Generator(steps=10, step_s=0.01)
        pool = RolloutPool(["r0"], g)
        self.assertFalse(pool.lend("x0"), "no rollout running")
        prompts = list(range(40))
        result = {}
        t = threading.Thread(target=lambda: result.update(pool.run(prompts)))
        t.start()
        while not g.started:
            time.sleep(0.005)
        self.assertTrue(pool.lend("x0"))
        self.assertFalse(pool.lend("x0"), "lent once")
        # Let the lent worker produce some, then reclaim it.
        while pool.produced_by["x0"] < 3:
            time.sleep(0.005)
        self.assertTrue(pool.notice("x0"))
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(result, {p: p * 10 for p in prompts}, "every prompt once")
        self.assertEqual(sum(pool.produced_by.values()), 40)
        self.assertGreaterEqual(pool.produced_by["x0"], 3)
        self.assertLess(pool.produced_by["x0"], 20, "it left before taking half")
        self.assertEqual(pool.leaving(), ["x0"])
        # Nothing ran on the lent node after its reclaim: every attempt there either finished
        # (counted) or was dropped and restarted on r0.
        attempts = [p for p, n in g.started if n == "x0"]
        dropped = [p for p, n in g.stopped if n == "x0"]
        self.assertEqual(len(attempts), pool.produced_by["x0"] + len(dropped))

    def test_bad_input_is_refused(self):
        with self.assertRaises(ValueError):
            RolloutPool([], Generator())
        with self.assertRaises(ValueError):
            RolloutPool(["r0"], Generator()).run([1, 1])


if __name__ == "__main__":
    unittest.main()
