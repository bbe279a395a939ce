"""The agentic reference task: the policy must call a tool to answer, over several turns.

Each prompt is ``n`` keys (digits) and a separator. A sandbox (a process on the environment
node, :mod:`sandbox_host`) holds a table from keys to values that is drawn for the prompt and
never shown to the policy. Turn ``i`` (of ``n``): the policy emits a key, the sandbox looks it up
(a real round trip to its process, with an injected step latency) and the value is appended to
the context. Last turn: the policy emits ``n`` digits, and the sandbox scores them (the reward
runs in the sandbox, on CPU): ``1 / n`` for each position holding the value of the prompt's key
at that position. The values are random per prompt, so a policy that does not look up the right
keys, or does not copy what came back, earns about 0.1; one that does earns 1.

The ``group`` samples of a prompt share its table (GRPO compares responses to the same task),
each in a sandbox of its own. The interaction is batch-level (every turn waits for the slowest
sandbox), the way this CPU engine generates: one forward pass for the whole batch per token.

Layout of a trajectory (length ``4n + 1``)::

    k_1 .. k_n SEP | a_1 v_1 | .. | a_n v_n | y_1 .. y_n

where the ``a`` (keys looked up) and ``y`` (the answer) are the policy's tokens, the ``v`` the
environment's. Only the policy's tokens carry log-probabilities.
"""

from typing import Dict, List

import torch

SEP = 10


def length(n: int) -> int:
    return 4 * n + 1


def policy_positions(n: int) -> List[int]:
    """Where the policy's tokens sit: each turn's key, then the answer."""
    return [n + 1 + 2 * i for i in range(n)] + list(range(3 * n + 1, 4 * n + 1))


def _sample_next(policy, seq: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
    logits = policy(seq)[:, -1, :10]
    return torch.multinomial(torch.softmax(logits.float(), dim=-1), 1, generator=rng)


class Prepared:
    """A rollout's prompts, drawn, and their sandboxes, started: before the rollout's phase
    (during the previous training), as the plan of an agentic job assumes (a sandbox's start
    needs no new weights)."""

    def __init__(self, rng: torch.Generator, grpo, n: int, env) -> None:
        keys = torch.randint(0, 10, (grpo.prompts, n), generator=rng)
        tables = torch.randint(0, 2 ** 31 - 1, (grpo.prompts,), generator=rng)
        self.keys = keys.repeat_interleave(grpo.group, dim=0)
        self.tables = tables.repeat_interleave(grpo.group, dim=0)
        self.boxes = env.open(_specs(self.keys, self.tables))

    def close(self) -> None:
        self.boxes.close()


def _specs(keys: torch.Tensor, tables: torch.Tensor):
    return [(int(t), [int(k) for k in row]) for t, row in zip(tables, keys)]


@torch.no_grad()
def rollout(policy, rng: torch.Generator, grpo, env, prepared: "Prepared | None" = None) -> Dict[str, torch.Tensor]:
    """``group`` trajectories for each of ``prompts`` fresh prompts, each in its own sandbox of
    ``env`` (a :class:`sandbox_host.Environment`), started now or ``prepared`` ahead (from the
    same ``rng``). A trajectory whose sandbox was lost is run again from its start in a new
    sandbox (on another environment node), so the batch holds every trajectory exactly once;
    ``env_stats`` says how many were re-run."""
    n = policy.cfg.digits
    prepared = prepared or Prepared(rng, grpo, n, env)
    keys, tables, boxes = prepared.keys, prepared.tables, prepared.boxes
    todo = list(range(keys.shape[0]))
    seq = torch.zeros((keys.shape[0], length(n)), dtype=torch.long)
    reward = torch.zeros(keys.shape[0])
    stats = {"trajectories": keys.shape[0], "turns": 0, "env_s": 0.0, "startup_s": 0.0, "rerun": 0}
    while todo:
        idx = torch.tensor(todo)
        s, r, ok, st = _play(policy, rng, keys[idx], boxes)
        for key in ("turns", "env_s", "startup_s"):
            stats[key] += st[key]
        kept = [i for i, good in enumerate(ok) if good]
        seq[idx[kept]] = s[kept]
        reward[idx[kept]] = r[kept]
        todo = [t for t, good in zip(todo, ok) if not good]
        stats["rerun"] += len(todo)
        if todo:
            boxes = env.open(_specs(keys[todo], tables[todo]))
    return {"seq": seq, "reward": reward, "old_logprob": response_logprobs(policy, seq), "env_stats": stats}


def _play(policy, rng, keys: torch.Tensor, boxes):
    """One pass of every trajectory in ``keys``, each in its sandbox of ``boxes``: their
    sequences, rewards, which of them kept their sandbox to the end, and what the environment
    did."""
    n = keys.shape[1]
    try:
        seq = torch.cat([keys, torch.full((keys.shape[0], 1), SEP, dtype=torch.long)], dim=1)
        for _ in range(n):
            act = _sample_next(policy, seq, rng)
            obs = boxes.lookup([int(a) for a in act[:, 0]])
            seq = torch.cat([seq, act, torch.tensor(obs, dtype=torch.long).unsqueeze(1)], dim=1)
        for _ in range(n):
            seq = torch.cat([seq, _sample_next(policy, seq, rng)], dim=1)
        reward = torch.tensor(boxes.score([[int(y) for y in row] for row in seq[:, 3 * n + 1:]]))
    finally:
        boxes.close()
    return seq, reward, boxes.alive(), boxes.stats()


def response_logprobs(policy, seq: torch.Tensor) -> torch.Tensor:
    """The summed log-probability of the policy's own tokens (the environment's are context)."""
    pos = torch.tensor(policy_positions(policy.cfg.digits))
    logits = policy(seq[:, :-1])[:, pos - 1, :10]
    lp = torch.log_softmax(logits.float(), dim=-1)
    return lp.gather(2, seq[:, pos].unsqueeze(-1)).squeeze(-1).sum(dim=1)
