"""The two processes of ``lora_jobs``: the rollout engine (a mixed-adapter batch of every ready
job) and the trainer (each job's adapter in turn), each pinned to its node's core with one
torch thread. Their queues are anything with ``put``, ``get`` and ``empty`` (``multiprocessing``
queues on one machine, ``lora_nodes.Channel`` across the mini cluster's link) and their control
anything with ``send`` and ``recv``.

Sequences and adapters cross as NumPy arrays, pickled as bytes: a torch tensor in a
``multiprocessing`` queue goes through torch's shared-memory reduction (its file descriptor
fetched from the sender per message), which cost the shared trainer 2.4 ms for each rollout it
took, 7% of a training; as an array it costs 0.25 ms.

Every message carries the sender's ``perf_counter`` at the put (one clock for every process of
this machine, network namespaces included), so each receiver measures its handoffs: from the
message sent and the receiver free to the message in hand (an adapter loaded, for the engine).
A receiver that waited for the message measures the transit (``waited``); one that found it
queued, only its own cost of taking it (``queued``).
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


def _handoff(handoffs, called: float, sent: float):
    """Notes one handoff: from the message sent and its receiver asking (``called``) to now."""
    now = time.perf_counter()
    handoffs["waited" if called < sent else "queued"].append(now - max(called, sent))


def engine_main(core, base_path, s: Setup, jobs, to_trainer, from_trainer, control):
    """The rollout process: a batch of every ready job once ``floor`` of them are ready."""
    model = _process_start(core, base_path, s, jobs).eval()
    import torch

    control.send("ready")
    control.recv()
    floor = min(s.batch_floor(), len(jobs))
    ready, done, busy, busy_cpu, samples = {}, set(), 0.0, 0.0, []
    handoffs = {"waited": [], "queued": []}
    while len(done) < len(jobs):
        # Wait for enough jobs ready (each one's adapter after its last training has arrived),
        # then take whatever else has arrived too.
        while len(ready) < min(floor, len(jobs) - len(done)) or not from_trainer.empty():
            called = time.perf_counter()
            j, k, state, sent = from_trainer.get()
            if k >= s.iterations:
                done.add(j)
                continue
            if state is not None:
                load_adapter(model, j, torch.from_numpy(state))
                _handoff(handoffs, called, sent)
            ready[j] = k
        if not ready:
            continue
        start, cpu = time.perf_counter(), time.process_time()
        for j, seq in sample(model, s, sorted(ready.items())):
            to_trainer.put((j, ready[j], seq.numpy(), time.perf_counter()))
        busy += time.perf_counter() - start
        samples.append((len(ready), time.process_time() - cpu))
        busy_cpu += samples[-1][1]
        ready = {}
    control.send({"rollout_busy_s": busy, "rollout_cpu_s": busy_cpu, "batches": len(samples),
                  "rollout_cpu_samples": samples, "handoffs": {"to_engine": handoffs}})


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
        to_engine.put((j, 0, None, time.perf_counter()))  # the engine's copy starts equal (same seeds)
    rewards = {j: [] for j in jobs}
    busy, busy_cpu, samples, left = 0.0, 0.0, [], len(jobs)
    handoffs = {"waited": [], "queued": []}
    while left:
        called = time.perf_counter()
        j, k, seq, sent = from_engine.get()
        seq = torch.from_numpy(seq)
        _handoff(handoffs, called, sent)
        start, cpu = time.perf_counter(), time.process_time()
        rewards[j].append(train_step(model, opts[j], s, j, seq))
        state = adapter_vector(model, j).numpy() if k + 1 < s.iterations else None
        busy += time.perf_counter() - start
        samples.append(time.process_time() - cpu)
        busy_cpu += samples[-1]
        to_engine.put((j, k + 1, state, time.perf_counter()))
        left -= k + 1 >= s.iterations
    control.send({"train_busy_s": busy, "train_cpu_s": busy_cpu, "train_cpu_samples": samples, "rewards": rewards,
                  "handoffs": {"to_trainer": handoffs}})
