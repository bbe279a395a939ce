"""What ``lora_jobs`` predicts for its two ways, from phase times measured alone (``predict``)
or from the phase costs of a short calibration run of each way (``predict_in_situ``).

The shared way's round formula takes the maximum of its phases' means. Where the pack's two
halves are balanced (a mixed batch about as long as the trainings it feeds), every phase that
runs long stalls the other side, and the run pays nearer the mean of the maxima.
``replay_shared`` plays the pack's pipeline phase by phase instead, each phase's cost drawn from
the calibration run's own per-phase costs in a seeded stream; ``predict_in_situ`` reports both.

The shared way's replay counts the handoffs between its two processes as the calibration
measured them (``lora_procs``): a message its receiver waited for arrives a transit after it
was sent, and one it found queued costs the receiver the time to take it. Separate pairs pay no
handoff in their round: four pairs share each core, so a pair's transit is time the core spends
on the other pairs' phases. Their convoy, ``n (r1 + t)``, is an upper bound on a separate round:
the measured separate runs took 2.6-9.9% less (part of one pair's training overlaps another's
rollout), so the predicted ratio leans high by about that much (docs/experiments/lora.md).
"""

import math
import random
import statistics

from .lora_task import Setup

REPLAY_SEEDS = range(1, 10)


def predict(s: Setup, alone):
    """Each way's round (every job one iteration) and iterations per node-hour, from the phase
    times measured alone.

    Shared: the engine runs h = ceil(n / f) mixed batches of f jobs per round and the trainer n
    trainings; a batch's jobs roll out again once the last of them is trained:
    max(h r_f, n t, r_f + f t). Separate: n pairs, every rollout on one core and every training
    on the other, each pair on-policy. The cores share time fairly, so pairs started together
    finish their rollouts together and then their trainings together (a convoy: each node idles
    while the other works): n (r1 + t). Were the pairs perfectly interleaved instead, a round
    would take max(n r1, n t, r1 + t): the best separate pairs could do, reported beside it."""
    n, f = s.jobs, alone["batch_floor"]
    h = math.ceil(n / f)
    r1, rf, t = alone["rollout_one_s"], alone[f"rollout_mixed_{f}_s"], alone["train_one_s"]
    rounds = {"shared": max(h * rf, n * t, rf + f * t), "separate": n * (r1 + t),
              "separate_interleaved": max(n * r1, n * t, r1 + t)}
    out = {f"{k}_round_s": v for k, v in rounds.items()}
    out.update({f"{k}_iterations_per_node_hour": n / (2 * v / 3600.0) for k, v in rounds.items()})
    out["shared_over_separate"] = rounds["separate"] / rounds["shared"]
    out["shared_over_separate_interleaved"] = rounds["separate_interleaved"] / rounds["shared"]
    return out


def predict_in_situ(s: Setup, costs):
    """``predict``'s rounds with the phase costs ``in_situ`` measured. Separate pairs convoy:
    n (r1 + t). Shared: the round formula, max(n / f r_f, n t, r_f + f t) with f the measured
    mean batch, and the pipeline replayed with the calibration's per-phase costs (the median of
    ``REPLAY_SEEDS``' runs), which is the prediction."""
    n, sh, sep = s.jobs, costs["shared"], costs["separate"]
    f, rf, t = sh["jobs_per_batch"], sh["rollout_batch_s"], sh["train_one_s"]
    samples = sh["samples"]
    replayed = statistics.median(
        replay_shared(n, s.iterations, min(s.batch_floor(), n), samples["rollout"], samples["train"], seed,
                      samples.get("handoffs"))
        for seed in REPLAY_SEEDS) / s.iterations
    rounds = {"shared": replayed, "shared_formula": max(n / f * rf, n * t, rf + f * t),
              "separate": n * (sep["rollout_one_s"] + sep["train_one_s"])}
    out = {f"{k}_iterations_per_node_hour": n / (2 * v / 3600.0) for k, v in rounds.items()}
    out["shared_over_separate"] = rounds["separate"] / rounds["shared"]
    out["shared_formula_over_separate"] = rounds["separate"] / rounds["shared_formula"]
    return out


def replay_shared(jobs: int, iterations: int, floor: int, batches, trainings, seed: int, handoffs=None) -> float:
    """The shared way's wall time, played phase by phase as ``lora_procs`` runs it: the engine
    starts a batch of every ready job once ``floor`` of them (or all that are left) are ready;
    the trainer trains the batch's jobs in order once the batch ends, after what it was already
    given; a job is ready again when its adapter reaches the engine after its training. Each
    batch's cost is drawn from ``batches`` ((jobs in the batch, seconds) as measured) of its
    size, or, for a size never measured, the measured cost per job times its size; each
    training's from ``trainings``. ``handoffs`` (``lora_jobs._measure``'s) gives each handoff's
    cost: drawn from the transits measured where the receiver waits, from the costs of taking a
    queued message where it is busy; without them handing work over costs nothing."""
    rng = random.Random(seed)
    hand = _Handoffs(rng, handoffs)
    by_size = {}
    for size, cost in batches:
        by_size.setdefault(int(size), []).append(cost)
    per_job = sum(c for _, c in batches) / sum(k for k, _ in batches)
    door = {j: 0.0 for j in range(jobs)}  # when each ready job's adapter reaches the engine
    left = {j: iterations for j in range(jobs)}
    engine = trainer = 0.0
    while door:
        # Adapters that arrived while the engine sampled are taken one by one once it is free.
        queued = [j for j, at in door.items() if at < engine]
        free = engine + sum(hand.take("to_engine") for _ in queued)
        in_hand = {j: free if at < engine else at for j, at in door.items()}
        times = sorted(in_hand.values())
        start = max(free, times[min(floor, len(times)) - 1])
        batch = sorted(j for j, at in in_hand.items() if at <= start)
        costs = by_size.get(len(batch))
        engine = start + (rng.choice(costs) if costs else per_job * len(batch))
        for j in batch:
            arrives = engine + hand.transit("to_trainer")
            start_j = arrives if arrives > trainer else trainer + hand.take("to_trainer")
            trainer = start_j + rng.choice(trainings)
            left[j] -= 1
            door[j] = trainer + hand.transit("to_engine")
            if not left[j]:
                del door[j]
    return max(engine, trainer)


class _Handoffs:
    """Draws a handoff's costs from those measured: a message's ``transit`` (as its receiver
    measured it waiting: sent to in hand) and a receiver's cost to ``take`` one it found
    queued. Both are 0, drawing nothing, without measured handoffs."""

    def __init__(self, rng, handoffs):
        self.rng, self.handoffs = rng, handoffs or {}

    def _draw(self, to: str, kind: str) -> float:
        drawn = self.handoffs.get(to, {}).get(kind)
        return self.rng.choice(drawn) if drawn else 0.0

    def transit(self, to: str) -> float:
        return self._draw(to, "waited")

    def take(self, to: str) -> float:
        return self._draw(to, "queued")
