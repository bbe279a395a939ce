"""Several LoRA GRPO jobs on one base model (the ``lora`` extra: transformers + peft), run two
ways on the same cores:

- ``shared``: one rollout process holds the base once with every job's adapter and samples for
  several jobs in one mixed-adapter batch (each job's rows through its own adapter, in
  contiguous runs: ``lora_task._segment_lora_layers``); one trainer process holds the base once
  and trains each job's adapter in turn, with the job's own optimizer state, and sends the
  adapter (kilobytes, not the model) back;
- ``separate``: one rollout and one trainer process per job, the way frameworks run LoRA jobs
  today.

Rollout processes are pinned to the rollout node's core and trainers to the training node's
(cores 0 and 1 here; both on core 0 on a one-core machine), one torch thread each. Every job is
on-policy: its rollout ``k`` uses its adapter after its own training ``k - 1``. The shared engine
starts a batch once at least ``min_batch`` jobs are ready (by default half of them): members
whose trainings end together roll out together, so the pack settles into two halves that
alternate, one rolling out while the trainer trains the other (the co-execution of two packs).

The base, the task (job ``j`` shifts each digit by ``j + 1``) and the adapters are in
``lora_task``.

    python -m weave_client.runtime.lora_jobs --jobs 4 --iterations 600 --mode both

prints one JSON object: per mode the wall time, iterations per node-hour (two nodes), each job's
reward curve (mean per 10 iterations) and the first iteration its 10-iteration mean reached 0.9,
the phase times measured alone (one job's batch, a mixed batch, one training) and the
prediction from them; with ``--mode both``, ``--repeat`` pairs of runs (a short calibration
run of each way, then shared, then separate, back to back), each pair's throughputs, ratio and
the ratio its calibration predicted (``lora_predict``), and the medians. Reported, never
asserted on: the machine is shared.
"""

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time

from .lora_bench import timed
from .lora_predict import predict, predict_in_situ
from .lora_procs import _process_start, engine_main, trainer_main
from .lora_task import Setup, pretrain_base, sample, train_step


def _receive(control, procs):
    """A child's next message; if any child died, every child is stopped and this raises."""
    try:
        return control.recv()
    except EOFError:
        for p in procs:
            p.terminate()
        dead = [(p.name, p.exitcode) for p in procs if p.exitcode not in (None, 0, -15)]
        raise RuntimeError(f"a LoRA job process died: {dead}") from None


def run_mode(s: Setup, base_path: str, mode: str, nodes=None):
    """Runs every job to ``s.iterations`` in ``mode``; returns its measurements. With ``nodes``
    (a running ``minicluster.MiniCluster``) the processes run on its nodes (``lora_nodes``)."""
    jobs = list(range(s.jobs))
    groups = [jobs] if mode == "shared" else [[j] for j in jobs]
    cores = (0, 1) if len(os.sched_getaffinity(0)) > 1 else (0, 0)
    if nodes is not None:
        from . import lora_nodes

        procs, controls = lora_nodes.start(s, base_path, groups, cores, nodes)
        return _measure(s, procs, controls, [])
    return _measure(s, *_start_here(s, base_path, groups, cores))


def _start_here(s: Setup, base_path: str, groups, cores):
    """Each group's engine and trainer as children of this process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs, controls, queues = [], [], []
    for members in groups:
        # Queues, not pipes: a put never waits for the reader (an adapter is larger than a
        # pipe's buffer, and the engine reads only between batches).
        to_trainer, to_engine = ctx.Queue(), ctx.Queue()
        queues.append((to_trainer, to_engine))  # alive until the children have them
        for fn, core, args in ((engine_main, cores[0], (to_trainer, to_engine)),
                               (trainer_main, cores[1], (to_trainer, to_engine))):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=fn, args=(core, base_path, s, members, *args, theirs), daemon=True)
            p.start()
            theirs.close()  # so a child that dies is an EOF here, not a wait forever
            procs.append(p)
            controls.append(mine)
    return procs, controls, queues


def _measure(s: Setup, procs, controls, queues):
    """Starts the processes at once and collects what each measured (``queues`` stay alive
    until then)."""
    for c in controls:
        if _receive(c, procs) != "ready":
            raise RuntimeError("a LoRA job process failed to start")
    start = time.perf_counter()
    for c in controls:
        c.send("go")
    results = [_receive(c, procs) for c in controls]
    wall = time.perf_counter() - start
    for p in procs:
        p.join(timeout=30)
    rewards = {}
    for r in results:
        rewards.update({int(j): v for j, v in r.get("rewards", {}).items()})
    return {
        "wall_s": wall,
        "iterations": s.jobs * s.iterations,
        "iterations_per_node_hour": s.jobs * s.iterations / (2 * wall / 3600.0),
        "rollout_busy_s": sum(r.get("rollout_busy_s", 0.0) for r in results),
        "train_busy_s": sum(r.get("train_busy_s", 0.0) for r in results),
        "rollout_cpu_s": sum(r.get("rollout_cpu_s", 0.0) for r in results),
        "train_cpu_s": sum(r.get("train_cpu_s", 0.0) for r in results),
        "rollout_batches": sum(r.get("batches", 0) for r in results),
        "rollout_cpu_samples": [x for r in results for x in r.get("rollout_cpu_samples", [])],
        "train_cpu_samples": [x for r in results for x in r.get("train_cpu_samples", [])],
        "handoffs": {to: {kind: [x for r in results for x in r.get("handoffs", {}).get(to, {}).get(kind, [])]
                          for kind in ("waited", "queued")} for to in ("to_engine", "to_trainer")},
        "jobs": [learning(rewards[j]) for j in sorted(rewards)],
    }


def learning(curve):
    """A job's reward curve, means of 10 iterations, and when that mean first reached 0.9."""
    tens = [sum(curve[i:i + 10]) / len(curve[i:i + 10]) for i in range(0, len(curve), 10)]
    reached = next((i + 10 for i in range(len(curve) - 9) if sum(curve[i:i + 10]) / 10 >= 0.9), None)
    return {"rewards": curve, "reward_per_10": [round(x, 3) for x in tens], "reached_0_9_at": reached}


def phase_times(s: Setup, base_path: str):
    """One job's rollout batch, a mixed batch of the engine's usual size and of every job, and
    one job's training, each timed alone in this process (one thread): the model's inputs."""
    import torch

    cores = os.sched_getaffinity(0)
    try:
        return _phase_times(s, base_path, torch)
    finally:
        os.sched_setaffinity(0, cores)  # the processes started next inherit it


def _phase_times(s: Setup, base_path: str, torch):
    model = _process_start(0, base_path, s, list(range(s.jobs)))
    batch = [(j, 0) for j in range(s.jobs)]
    floor = min(s.batch_floor(), s.jobs)
    model.eval()
    one = timed(lambda: sample(model, s, batch[:1]), 5)
    part = timed(lambda: sample(model, s, batch[:floor]), 5)
    full = timed(lambda: sample(model, s, batch), 5)
    seq = sample(model, s, batch[:1])[0][1]
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.0)
    model.train()
    train = timed(lambda: train_step(model, opt, s, 0, seq), 5)
    return {"rollout_one_s": one, f"rollout_mixed_{floor}_s": part, f"rollout_mixed_{s.jobs}_s": full,
            "train_one_s": train, "batch_floor": floor}


def in_situ(s: Setup, base_path: str, iterations: int = 60, nodes=None):
    """The phase costs under the contention each way runs in, from a short calibration run of
    it (``iterations`` per job, apart from the measured run): CPU seconds per mixed batch (its
    mean size) and per training in the shared way, per rollout and per training in the
    separate way (four working sets sharing a core's caches). What the server's re-estimation
    does with a job's first measured phases."""
    short = dataclasses.replace(s, iterations=iterations)
    shared, separate = run_mode(short, base_path, "shared", nodes), run_mode(short, base_path, "separate", nodes)
    return {"calibration_iterations": iterations, **phase_costs(shared, separate)}


def phase_costs(shared, separate):
    """The phase costs two runs measured (``run_mode``'s), as ``predict_in_situ`` takes them."""
    n = shared["iterations"]
    return {
        "shared": {"rollout_batch_s": shared["rollout_cpu_s"] / shared["rollout_batches"],
                   "jobs_per_batch": n / shared["rollout_batches"], "train_one_s": shared["train_cpu_s"] / n,
                   "handoff_s": handoff_means(shared["handoffs"]),
                   "samples": {"rollout": shared["rollout_cpu_samples"], "train": shared["train_cpu_samples"],
                               "handoffs": shared["handoffs"]}},
        "separate": {"rollout_one_s": separate["rollout_cpu_s"] / n, "train_one_s": separate["train_cpu_s"] / n,
                     "handoff_s": handoff_means(separate["handoffs"])},
    }


def handoff_means(handoffs):
    """The mean handoff each way, of those the receiver waited for and of those it found queued
    (0 where there were none)."""
    return {f"{to}_{kind}": statistics.fmean(xs) if xs else 0.0
            for to, kinds in handoffs.items() for kind, xs in kinds.items()}


def paired(s: Setup, base_path: str, nodes, repeat: int):
    """``repeat`` pairs of runs back to back, each after its own calibration: (phase costs in
    situ, the shared run, the separate run) per pair. A ratio of two runs a minute apart holds
    where either alone does not, and a calibration a minute before its runs predicts them where
    one long before does not: this machine's phase costs drift by a fifth within minutes."""
    return [(in_situ(s, base_path, nodes=nodes), run_mode(s, base_path, "shared", nodes),
             run_mode(s, base_path, "separate", nodes)) for _ in range(repeat)]


def pair_summary(s: Setup, costs, shared, separate):
    """One pair's throughputs, their ratio, and the ratio its calibration predicted (and the
    round formula's, with the same costs)."""
    measured = shared["iterations_per_node_hour"] / separate["iterations_per_node_hour"]
    predicted = predict_in_situ(s, costs)
    run = phase_costs(shared, separate)
    return {"shared": shared["iterations_per_node_hour"], "separate": separate["iterations_per_node_hour"],
            "shared_over_separate": measured, "predicted_shared_over_separate": predicted["shared_over_separate"],
            "formula_shared_over_separate": predicted["shared_formula_over_separate"],
            # The model fed the measured runs' own costs: what is left of the error without the
            # drift between a calibration and the runs after it.
            "hindsight_shared_over_separate": predict_in_situ(s, run)["shared_over_separate"],
            "phase_costs_ms": {"calibration": _means_ms(costs), "run": _means_ms(run)}}


def _means_ms(costs):
    """Mean phase and handoff costs (``phase_costs``'), milliseconds."""
    out = {}
    for way in ("shared", "separate"):
        for k, v in costs[way].items():
            for name, x in (v.items() if k == "handoff_s" else [(k, v)] if k.endswith("_s") else []):
                out[f"{way}_{name}"] = round(x * 1e3, 2)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--iterations", type=int, default=600)
    p.add_argument("--mode", choices=["shared", "separate", "both"], default="both")
    p.add_argument("--min-batch", type=int, default=0, help="jobs a shared batch waits for (0: half)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="pairs of runs (shared, then separate) for --mode both")
    p.add_argument("--nodes-mbit", type=float, default=0.0,
                   help="run the processes on a mini cluster whose link between the nodes has this rate (needs root)")
    a = p.parse_args(argv)
    if a.jobs < 1 or a.iterations < 1 or a.repeat < 1 or a.min_batch < 0 or a.nodes_mbit < 0:
        p.error("--jobs, --iterations and --repeat must be at least 1, --min-batch and --nodes-mbit at least 0")
    if a.nodes_mbit:
        from . import minicluster

        if minicluster.available():
            p.error(f"--nodes-mbit: {minicluster.available()}")
        with minicluster.MiniCluster(a.nodes_mbit) as mc:
            return _run(a, mc)
    return _run(a, None)


def _run(a, nodes):
    """``main`` after its flags: every measurement, printed as one JSON object."""
    import torch

    s = Setup(jobs=a.jobs, iterations=a.iterations, min_batch=a.min_batch, seed=a.seed)
    torch.set_num_threads(1)
    out = {"setup": dataclasses.asdict(s), "nodes_mbit": nodes.slow_mbit if nodes else None}
    with tempfile.TemporaryDirectory() as d:
        base_path = os.path.join(d, "base.pt")
        torch.save(pretrain_base(s).state_dict(), base_path)
        out["alone"] = phase_times(s, base_path)
        if a.mode == "both":
            pairs = paired(s, base_path, nodes, a.repeat)
            out["in_situ"], out["shared"], out["separate"] = pairs[0]
            out["pairs"] = [pair_summary(s, *pair) for pair in pairs]
        else:
            out[a.mode] = run_mode(s, base_path, a.mode, nodes)
    for mode in ("shared", "separate"):
        for job in out.get(mode, {}).get("jobs", []):
            del job["rewards"]  # the curve per 10 iterations is printed
        for key in ("rollout_cpu_samples", "train_cpu_samples"):
            out.get(mode, {}).pop(key, None)  # thousands of numbers; their use is printed
        if mode in out:
            out[mode]["handoff_s"] = handoff_means(out[mode].pop("handoffs"))
    out["predicted"] = predict(s, out["alone"])
    if "pairs" in out:
        out["predicted_in_situ"] = predict_in_situ(s, out["in_situ"])  # the first pair's
        del out["in_situ"]["shared"]["samples"]
        for key in ("shared_over_separate", "predicted_shared_over_separate"):
            out[key] = statistics.median(p[key] for p in out["pairs"])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
