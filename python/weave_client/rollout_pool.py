"""A rollout's prompts on one worker per rollout node, moved off a node that is about to be
taken (a preemption notice) so the rollout finishes on the others.

Each node's worker takes the prompts dealt to it, one at a time (a stand-in for an inference
engine's request queue). ``notice(node)`` moves that node's queued prompts to the other
workers at once, and the prompt it is generating is dropped there (its partial output thrown
away, as no KV cache moves) and started over on another worker. Every prompt's result is
produced exactly once, whichever worker produced it; a prompt's result must depend only on the
prompt (its seed), not on the worker, so a moved prompt gives the same trajectory.

A node lent to the rollout (``lend(node)``: another group's idle rollout node, with
``weave serve --lending``) gets a worker of its own mid-run and takes its share of the queued
prompts; at the loan's deadline ``notice(node)`` moves what it still has back.

A notice on the pool's only remaining node cannot move anything: the rollout goes on there
(and is lost if the node goes first; the job then resumes from its checkpoint). Standard
library only.
"""

import collections
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

# generate(prompt, node, stopped) -> result, or None if it stopped because stopped() said so.
Generate = Callable[[Any, str, Callable[[], bool]], Optional[Any]]


class RolloutPool:
    def __init__(self, nodes: Sequence[str], generate: Generate) -> None:
        if not nodes:
            raise ValueError("a rollout pool needs at least one node")
        self.nodes = list(nodes)
        self._generate = generate
        self._cond = threading.Condition()
        self._queues: Dict[str, collections.deque] = {n: collections.deque() for n in self.nodes}
        self._leaving: List[str] = []
        self._results: Dict[Any, Any] = {}
        self._total = 0
        self.moved = 0
        self.restarted = 0
        self.produced_by: Dict[str, int] = {n: 0 for n in self.nodes}
        self._workers: List[threading.Thread] = []

    def _staying(self) -> List[str]:
        return [n for n in self.nodes if n not in self._leaving]

    def _deal(self, prompts: Iterable[Any], front: bool = False) -> int:
        """Gives each prompt to the staying worker with the fewest queued (caller holds the lock)."""
        count = 0
        for p in prompts:
            dest = min(self._staying(), key=lambda n: (len(self._queues[n]), self.nodes.index(n)))
            if front:
                self._queues[dest].appendleft(p)
            else:
                self._queues[dest].append(p)
            count += 1
        return count

    def notice(self, node: str) -> bool:
        """``node`` is about to be taken: its prompts move to the other workers. False if it is
        not one of the pool's, already leaving, or the last one staying (nothing moves)."""
        with self._cond:
            if node not in self.nodes or node in self._leaving or len(self._staying()) <= 1:
                return False
            self._leaving.append(node)
            queued = list(self._queues[node])
            self._queues[node].clear()
            self.moved += self._deal(queued)
            self._cond.notify_all()
            return True

    def lend(self, node: str) -> bool:
        """``node`` joins the running rollout (lent to it): its worker starts and takes an even
        share of the prompts still queued. False if the pool has it already or has no rollout
        running."""
        with self._cond:
            if node in self.nodes or self._total == 0 or len(self._results) >= self._total:
                return False
            self.nodes.append(node)
            self._queues[node] = collections.deque()
            self.produced_by[node] = 0
            queued = [p for n in self._staying() if n != node for p in self._queues[n]]
            share = len(queued) // len(self._staying())
            # The newcomer takes from the back of the longest queues, so prompts already
            # next in line stay where they are.
            for _ in range(share):
                longest = max((n for n in self._staying() if n != node), key=lambda n: len(self._queues[n]))
                self._queues[node].appendleft(self._queues[longest].pop())
            self.moved += share
            worker = threading.Thread(target=self._work, args=(node,), daemon=True)
            self._workers.append(worker)
            self._cond.notify_all()
        worker.start()
        return True

    def leaving(self) -> List[str]:
        with self._cond:
            return list(self._leaving)

    def run(self, prompts: Sequence[Any]) -> Dict[Any, Any]:
        """Generates every prompt once; returns the results by prompt."""
        if len(set(prompts)) != len(prompts):
            raise ValueError("prompts must be distinct")
        with self._cond:
            self._results, self._total = {}, len(prompts)
            self._deal(prompts)
        with self._cond:
            self._workers = [threading.Thread(target=self._work, args=(n,), daemon=True) for n in self.nodes]
            workers = list(self._workers)
        for w in workers:
            w.start()
        # A worker lent mid-run is joined too.
        while True:
            with self._cond:
                pending = [w for w in self._workers if w.is_alive() or w.ident is None]
            if not pending:
                break
            for w in pending:
                if w.ident is None:
                    time.sleep(0.01)  # lent a moment ago; started just after the lock
                else:
                    w.join(0.05)
        with self._cond:
            if len(self._results) != self._total:
                raise RuntimeError(f"{self._total - len(self._results)} prompts were not generated")
            return dict(self._results)

    def _work(self, node: str) -> None:
        stopped = lambda: node in self._leaving  # noqa: E731  (read without the lock: a list check)
        while True:
            with self._cond:
                while not self._queues[node] and node not in self._leaving and len(self._results) < self._total:
                    # Prompts may still be moved here from a node that is being taken.
                    self._cond.wait(0.05)
                if node in self._leaving or len(self._results) >= self._total:
                    return
                prompt = self._queues[node].popleft()
            result = self._generate(prompt, node, stopped)
            with self._cond:
                if result is None:
                    # Dropped mid-generation: started over on a staying worker, first in line.
                    self._deal([prompt], front=True)
                    self.moved += 1
                    self.restarted += 1
                else:
                    if prompt in self._results:
                        raise RuntimeError(f"prompt {prompt!r} generated twice")
                    self._results[prompt] = result
                    self.produced_by[node] += 1
                self._cond.notify_all()
