"""TRL's ``GRPOTrainer`` under Weave's phase gate (the ``trl`` extra).

TRL runs generation and optimisation in one process, so a TRL job is a co-located job: both
phases on its training nodes, taking turns with its group's other members. Iteration k is
TRL's optimizer step k (``num_iterations=1``: one generation per step): its rollout phase is
the generation and scoring of the step's completions (``_generate_and_score_completions``),
its training phase the forward, backward and optimizer step up to the step's checkpoint, which
is written (``save_steps=1``) before Weave is told the training finished, so Weave's count is
always a checkpoint on disk. Between phases, while the job waits for the gate, its warm state
may leave the accelerator (``offload`` / ``restore``; on a CPU they do nothing).

``train(make_trainer, gate)`` runs a trainer to its end; when Weave re-queues the job
(preempted, moved, its node lost) the gate raises ``Requeued``: ``train`` waits until Weave
runs the job again and resumes a new trainer from the checkpoint of exactly Weave's count.

    gate = Gate(WeaveClient(server, token), "my-job")
    train(lambda: weave_grpo_trainer()(model=..., args=..., weave=gate, ...), gate, output_dir)
"""

import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import Requeued, WeaveClient


class Gate:
    """A TRL job's phases through Weave's gate, with what the gate cost: ``costs['gate_s']``
    (time in the gate's requests: for a job alone the gate's overhead; in a group it includes
    the waits for partners) and ``costs['offload_s']`` (moving the warm state away and back)."""

    def __init__(self, client: WeaveClient, job: str, offload: Optional[Callable[[], None]] = None,
                 restore: Optional[Callable[[], None]] = None) -> None:
        self.client, self.job = client, job
        self.offload, self.restore = offload, restore
        self.training: Optional[Tuple[int, float]] = None
        self.costs: Dict[str, float] = {"gate_s": 0.0, "offload_s": 0.0}
        self.rewards: List[Tuple[int, float]] = []
        self.iterations = 0

    def _start(self, phase: str, iteration: int) -> Dict[str, Any]:
        """Asks for a phase; the warm state is away while the job waits for it."""
        t0 = time.monotonic()
        if self.offload is not None:
            self.offload()
        t1 = time.monotonic()
        grant = self.client.start(self.job, phase, iteration)
        t2 = time.monotonic()
        if self.restore is not None:
            self.restore()
        t3 = time.monotonic()
        self.costs["offload_s"] += (t1 - t0) + (t3 - t2)
        self.costs["gate_s"] += t2 - t1
        return grant

    def _finish(self, phase: str, iteration: int, seconds: float, meta: Dict[str, Any]) -> None:
        t0 = time.monotonic()
        self.client.finish(self.job, phase, iteration, seconds, meta)
        self.costs["gate_s"] += time.monotonic() - t0

    def rollout(self, iteration: int, generate: Callable[[], Any], reward: Callable[[Any], float]) -> Any:
        """Generation for ``iteration`` as its rollout phase; then waits for its training."""
        self._start("rollout", iteration)
        t0 = time.monotonic()
        out = generate()
        seconds = time.monotonic() - t0
        mean = reward(out)
        self.rewards.append((iteration, mean))
        self._finish("rollout", iteration, seconds, {"weights_version": iteration, "mean_reward": round(mean, 6)})
        self._start("train", iteration)
        self.training = (iteration, time.monotonic())
        return out

    def trained(self) -> None:
        """The open training phase ends (its checkpoint written): Weave counts the iteration."""
        if self.training is None:
            return
        iteration, t0 = self.training
        self.training = None
        meta = {"trajectory_version": iteration, "new_weights_version": iteration + 1}
        self._finish("train", iteration, time.monotonic() - t0, meta)
        self.iterations += 1

    def wait_to_run(self, timeout_s: float = 3600.0) -> int:
        """After ``Requeued``: waits until Weave runs the job again; the iteration it resumes
        from (Weave's count)."""
        self.training = None
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.client.job(self.job)["job"]
            if view["state"] == "running":
                return int(view["completed_iterations"])
            if view["state"] not in ("queued", "preempted") or time.monotonic() > deadline:
                raise RuntimeError(f"{self.job}: not running again ({view['state']})")
            time.sleep(0.5)


def weave_grpo_trainer(base: Any = None) -> Any:
    """``GRPOTrainer`` (or ``base``, a subclass of it) with its steps gated: the class takes a
    ``weave=Gate`` keyword. Imported here, so the client runs without TRL."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class _Trained(TrainerCallback):
        def __init__(self, gate: Gate) -> None:
            self.gate = gate

        def on_save(self, args, state, control, **kwargs):  # noqa: ANN001 (TRL's signature)
            self.gate.trained()

    class WeaveGRPOTrainer(base or GRPOTrainer):
        def __init__(self, *args: Any, weave: Gate, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self.args.save_strategy != "steps" or self.args.save_steps != 1 or self.num_iterations != 1:
                raise ValueError("under Weave a GRPOTrainer saves every step (save_strategy='steps', save_steps=1) "
                                 "and generates once per step (num_iterations=1): Weave's count must be a checkpoint")
            self.weave = weave
            self.add_callback(_Trained(weave))

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            parent = super()._generate_and_score_completions
            if not self.model.training:
                return parent(inputs)
            # The step this generation feeds; the mean reward as TRL just logged it.
            step = self.state.global_step
            return self.weave.rollout(step, lambda: parent(inputs), lambda _: self._last_reward())

        def _last_reward(self) -> float:
            rewards = self._metrics["train"].get("reward") or [float("nan")]
            return float(rewards[-1])

    return WeaveGRPOTrainer


def checkpoint(output_dir: str, iteration: int) -> Optional[str]:
    """The trainer's checkpoint of ``iteration`` (``None`` for 0: a new trainer starts there)."""
    if iteration == 0:
        return None
    path = os.path.join(output_dir, f"checkpoint-{iteration}")
    if not os.path.isdir(path):
        raise RuntimeError(f"Weave counts {iteration} iterations but {path} does not exist")
    return path


def train(make_trainer: Callable[[], Any], gate: Gate, output_dir: str, resume_from: int = 0) -> Dict[str, Any]:
    """Runs a gated trainer (``make_trainer()`` builds one) to its end, resuming from exactly
    Weave's count each time Weave re-queues the job. Returns what happened: the iterations it
    resumed from, the gate's costs, the rewards by iteration."""
    resumed: List[int] = []
    while True:
        trainer = make_trainer()
        try:
            trainer.train(resume_from_checkpoint=checkpoint(output_dir, resume_from))
            break
        except Requeued:
            resume_from = gate.wait_to_run()
            resumed.append(resume_from)
    return {"resumed_from": resumed, "costs": dict(gate.costs), "iterations": gate.iterations,
            "rewards": [[k, r] for k, r in gate.rewards]}
