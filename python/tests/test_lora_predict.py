"""The shared way's pipeline replay (``lora_predict.replay_shared``): with constant phase costs
it is the round formula; a spread in the phases' costs (the same means) makes the balanced pack
stall, so the replay takes longer than the formula; an unbalanced pack has slack to absorb it;
a seed gives one answer. Handoffs as measured: a receiver busy pays its cost to take each
message; one that waits pays the transit."""

import time
import unittest

from weave_client.runtime.lora_predict import predict_in_situ, replay_shared
from weave_client.runtime.lora_procs import _handoff
from weave_client.runtime.lora_task import Setup


def formula(jobs, floor, batch, train):
    return max(jobs / floor * batch, jobs * train, batch + floor * train)


class ReplayTest(unittest.TestCase):
    def test_constant_costs_give_the_round_formula(self):
        for batch, train in [(2.0, 1.0), (1.0, 1.0), (1.0, 0.5), (3.0, 1.0), (0.5, 1.0)]:
            wall = replay_shared(4, 600, 2, [(2, batch)], [train], seed=1)
            round_s = formula(4, 2, batch, train)
            # One round's tail at most: the last batch's trainings.
            self.assertGreaterEqual(wall, 600 * round_s, (batch, train))
            self.assertLessEqual(wall, 600 * round_s + batch + 2 * train, (batch, train))

    def test_a_balanced_pack_stalls_on_its_phases_spread(self):
        steady = replay_shared(4, 600, 2, [(2, 2.0)], [1.0], seed=1)
        spread = replay_shared(4, 600, 2, [(2, 1.6), (2, 2.4)], [0.8, 1.2], seed=1)
        self.assertGreater(spread, 1.05 * steady)

    def test_a_pack_with_slack_absorbs_the_spread(self):
        # The engine needs half the trainer's time: a long batch waits in the trainer's queue.
        steady = replay_shared(4, 600, 2, [(2, 1.0)], [1.0], seed=1)
        spread = replay_shared(4, 600, 2, [(2, 0.8), (2, 1.2)], [0.8, 1.2], seed=1)
        self.assertLess(abs(spread - steady), 0.02 * steady)

    def test_a_size_never_measured_costs_the_measured_cost_per_job(self):
        # Batches of three, only batches of one measured (1 s): 3 s, then three trainings.
        wall = replay_shared(3, 100, 3, [(1, 1.0)], [0.1], seed=1)
        self.assertAlmostEqual(wall, 100 * (3.0 + 3 * 0.1), places=6)

    def test_one_seed_gives_one_answer_and_another_a_different_draw(self):
        args = (4, 300, 2, [(2, 1.6), (2, 2.4), (1, 1.1)], [0.8, 1.2])
        self.assertEqual(replay_shared(*args, seed=5), replay_shared(*args, seed=5))
        self.assertNotEqual(replay_shared(*args, seed=5), replay_shared(*args, seed=6))


class HandoffTest(unittest.TestCase):
    @staticmethod
    def handoffs(transit_to_trainer=0.0, take_to_trainer=0.0, transit_to_engine=0.0, take_to_engine=0.0):
        return {"to_trainer": {"waited": [transit_to_trainer], "queued": [take_to_trainer]},
                "to_engine": {"waited": [transit_to_engine], "queued": [take_to_engine]}}

    def test_a_busy_trainer_pays_its_cost_to_take_each_message(self):
        # Trainer-bound (a batch of two 1 s, a training 1 s): the trainer always finds the next
        # rollout queued, so a round of four trainings costs 4 x (1 + 0.1); transits hide.
        hand = self.handoffs(transit_to_trainer=0.05, take_to_trainer=0.1, transit_to_engine=0.05)
        wall = replay_shared(4, 600, 2, [(2, 1.0)], [1.0], seed=1, handoffs=hand)
        self.assertGreaterEqual(wall, 600 * 4.4)
        self.assertLessEqual(wall, 600 * 4.4 + 4.0)

    def test_a_waiting_pipeline_pays_every_transit(self):
        # One job: its rollout (1 s), the transit (0.2 s), its training (0.5 s), the adapter's
        # transit back (0.3 s) before the next rollout; nothing is ever queued.
        hand = self.handoffs(transit_to_trainer=0.2, take_to_trainer=5.0, transit_to_engine=0.3, take_to_engine=5.0)
        wall = replay_shared(1, 100, 1, [(1, 1.0)], [0.5], seed=1, handoffs=hand)
        self.assertAlmostEqual(wall, 100 * (1.0 + 0.2 + 0.5) + 99 * 0.3, places=6)

    def test_free_handoffs_change_nothing(self):
        for batch, train in [(2.0, 1.0), (1.0, 1.0), (0.5, 1.0)]:
            args = (4, 300, 2, [(2, batch)], [train])
            self.assertEqual(replay_shared(*args, seed=3), replay_shared(*args, seed=3, handoffs=self.handoffs()))

    def test_a_receiver_notes_a_transit_when_it_waited_and_its_own_cost_when_queued(self):
        hand = {"waited": [], "queued": []}
        now = time.perf_counter()
        _handoff(hand, now - 2.0, now - 1.0)  # asked 2 s ago, sent 1 s ago: waited about 1 s
        _handoff(hand, now - 1.0, now - 3.0)  # sent 3 s ago, asked 1 s ago: took about 1 s
        self.assertEqual([len(hand["waited"]), len(hand["queued"])], [1, 1])
        self.assertAlmostEqual(hand["waited"][0], 1.0, delta=0.5)
        self.assertAlmostEqual(hand["queued"][0], 1.0, delta=0.5)


class PredictionTest(unittest.TestCase):
    def costs(self, train_s, samples):
        return {"shared": {"rollout_batch_s": 0.06, "jobs_per_batch": 2.0, "train_one_s": train_s,
                           "samples": samples},
                "separate": {"rollout_one_s": 0.04, "train_one_s": 0.035}}

    def test_in_situ_rounds_are_the_pack_halves_and_the_convoy(self):
        s = Setup(jobs=4, iterations=600)
        p = predict_in_situ(s, self.costs(0.03, {"rollout": [(2, 0.06)], "train": [0.03]}))
        # Shared: max(2 x 0.06, 4 x 0.03, 0.06 + 2 x 0.03) = 0.12 s a round of 4 iterations;
        # the replay with these costs as its only samples is that, plus one round's tail.
        self.assertAlmostEqual(p["shared_formula_iterations_per_node_hour"], 4 / (2 * 0.12 / 3600))
        self.assertAlmostEqual(p["shared_iterations_per_node_hour"], 4 / (2 * 0.12 / 3600), delta=0.002 * 60000)
        self.assertLess(p["shared_iterations_per_node_hour"], p["shared_formula_iterations_per_node_hour"])
        # Separate pairs convoy: 4 x (0.04 + 0.035) = 0.3 s.
        self.assertAlmostEqual(p["separate_iterations_per_node_hour"], 4 / (2 * 0.3 / 3600))
        self.assertAlmostEqual(p["shared_formula_over_separate"], 0.3 / 0.12)
        # A trainer-bound pack: its trainings set the round.
        p = predict_in_situ(s, self.costs(0.05, {"rollout": [(2, 0.06)], "train": [0.05]}))
        self.assertAlmostEqual(p["shared_formula_over_separate"], 0.3 / 0.2)

    def test_the_shared_ways_handoffs_lower_its_prediction(self):
        s = Setup(jobs=4, iterations=600)
        free = predict_in_situ(s, self.costs(0.03, {"rollout": [(2, 0.06)], "train": [0.03]}))
        hand = HandoffTest.handoffs(transit_to_trainer=0.002, take_to_trainer=0.003, transit_to_engine=0.002,
                                    take_to_engine=0.003)
        paid = predict_in_situ(s, self.costs(0.03, {"rollout": [(2, 0.06)], "train": [0.03], "handoffs": hand}))
        self.assertLess(paid["shared_over_separate"], 0.99 * free["shared_over_separate"])
        self.assertEqual(paid["separate_iterations_per_node_hour"], free["separate_iterations_per_node_hour"])

    def test_the_phases_spread_lowers_the_prediction_below_the_formula(self):
        s = Setup(jobs=4, iterations=600)
        spread = {"rollout": [(2, 0.045), (2, 0.075)], "train": [0.02, 0.04]}
        p = predict_in_situ(s, self.costs(0.03, spread))
        self.assertLess(p["shared_over_separate"], 0.95 * p["shared_formula_over_separate"])


if __name__ == "__main__":
    unittest.main()
