"""The two processes of ``lora_jobs``: the rollout engine (a mixed-adapter batch of every ready
job) and the trainer (each job's adapter in turn), each pinned to its node's core with one
torch thread. Their queues are anything with ``put``, ``get`` and ``empty`` (``multiprocessing``
queues on one machine, ``lora_nodes.Channel`` across the mini cluster's link) and their control
anything with ``send`` and ``recv``.
"""

import os
import time

from .lora_task import (Setup, adapter_params, adapter_vector, build_base, job_name, load_adapter, sample, train_step,
                        with_adapters)


def _process_start(core: int, base_path: str, s: Setup, jobs):
    # Pinned before torch starts any thread: a thread started earlier keeps the old set.
    if hasattr(os, "sched_setaffinity"):
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {core} if core in cores else cores)
    import torch

    torch.set_num_threads(1)
    base = build_base(s)
    base.load_state_dict(torch.load(base_path))
    return with_adapters(base.eval(), s, jobs)


def engine_main(core, base_path, s: Setup, jobs, to_trainer, from_trainer, control):
    """The rollout process: a batch of every ready job once ``floor`` of them are ready."""
    model = _process_start(core, base_path, s, jobs).eval()
    control.send("ready")
    control.recv()
    floor = min(s.batch_floor(), len(jobs))
    ready, done, busy, busy_cpu, samples = {}, set(), 0.0, 0.0, []
    while len(done) < len(jobs):
        # Wait for enough jobs ready (each one's adapter after its last training has arrived),
        # then take whatever else has arrived too.
        while len(ready) < min(floor, len(jobs) - len(done)) or not from_trainer.empty():
            j, k, state = from_trainer.get()
            if k >= s.iterations:
                done.add(j)
                continue
            if state is not None:
                load_adapter(model, j, state)
            ready[j] = k
        if not ready:
            continue
        start, cpu = time.perf_counter(), time.process_time()
        for j, seq in sample(model, s, sorted(ready.items())):
            to_trainer.put((j, ready[j], seq))
        busy += time.perf_counter() - start
        samples.append((len(ready), time.process_time() - cpu))
        busy_cpu += samples[-1][1]
        ready = {}
    control.send({"rollout_busy_s": busy, "rollout_cpu_s": busy_cpu, "batches": len(samples),
                  "rollout_cpu_samples": samples})


def trainer_main(core, base_path, s: Setup, jobs, from_engine, to_engine, control):
    """The training process: each job's adapter trained in turn, sent back once trained."""
    import torch

    model = _process_start(core, base_path, s, jobs)
    opts = {}
    for j in jobs:
        model.set_adapter(job_name(j))
        opts[j] = torch.optim.Adam(adapter_params(model, j), lr=s.lr)
    control.send("ready")
    control.recv()
    for j in jobs:
        to_engine.put((j, 0, None))  # the engine's copy starts equal (same seeds)
    rewards = {j: [] for j in jobs}
    busy, busy_cpu, samples, left = 0.0, 0.0, [], len(jobs)
    while left:
        j, k, seq = from_engine.get()
        start, cpu = time.perf_counter(), time.process_time()
        rewards[j].append(train_step(model, opts[j], s, j, seq))
        state = adapter_vector(model, j) if k + 1 < s.iterations else None
        busy += time.perf_counter() - start
        samples.append(time.process_time() - cpu)
        busy_cpu += samples[-1]
        to_engine.put((j, k + 1, state))
        left -= k + 1 >= s.iterations
    control.send({"train_busy_s": busy, "train_cpu_s": busy_cpu, "train_cpu_samples": samples, "rewards": rewards})
