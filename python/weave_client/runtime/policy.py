"""A small causal transformer policy, a verifiable task and GRPO, built from a config in code
(no weights or data are downloaded).

The task: sort a string of digits. The prompt is ``n`` digits and a separator; the response is
``n`` digits, and each position that holds the right digit of the sorted string earns
``1 / n`` of the reward (exact, checkable, dense enough to learn from). A random policy earns
about 0.1.

GRPO: every prompt is sampled ``group`` times; a response's advantage is its reward minus the
mean of its group, over the group's standard deviation. The update is the clipped surrogate
of PPO on those advantages (no critic, no KL term); with ``epochs = 1`` it is exactly on-policy.
"""

import dataclasses
from typing import Callable, Dict, Optional

import torch
from torch import nn

SEP = 10
VOCAB = 11


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    digits: int = 4
    width: int = 64
    layers: int = 2
    heads: int = 4
    seed: int = 0
    # "sort" (this module's task) or "tool" (``tool_task``: look values up in a sandbox).
    task: str = "sort"

    def length(self) -> int:
        return 4 * self.digits + 1 if self.task == "tool" else 2 * self.digits + 1


@dataclasses.dataclass(frozen=True)
class GrpoConfig:
    prompts: int = 32
    group: int = 8
    lr: float = 3e-4
    epochs: int = 1
    clip: float = 0.2


class Policy(nn.Module):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        length = cfg.length()
        self.tok = nn.Embedding(VOCAB, cfg.width)
        self.pos = nn.Embedding(length, cfg.width)
        layer = nn.TransformerEncoderLayer(
            cfg.width, cfg.heads, 2 * cfg.width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.head = nn.Linear(cfg.width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        n = seq.shape[1]
        x = self.tok(seq) + self.pos(torch.arange(n, device=seq.device))
        return self.head(self.body(x, mask=self.mask[:n, :n], is_causal=True))


def build_policy(cfg: PolicyConfig) -> Policy:
    """The same initial weights for the same config, whatever else drew random numbers."""
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(cfg.seed)
        return Policy(cfg)


def prompts(rng: torch.Generator, n: int, digits: int) -> torch.Tensor:
    return torch.randint(0, 10, (n, digits), generator=rng)


def reward(prompt: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """Fraction of positions holding the right digit of the sorted prompt."""
    return (response == prompt.sort(dim=1).values).float().mean(dim=1)


@torch.no_grad()
def rollout(policy: Policy, rng: torch.Generator, grpo: GrpoConfig) -> Dict[str, torch.Tensor]:
    """Samples ``group`` responses to each of ``prompts`` fresh prompts."""
    d = policy.cfg.digits
    p = prompts(rng, grpo.prompts, d).repeat_interleave(grpo.group, dim=0)
    seq = torch.cat([p, torch.full((p.shape[0], 1), SEP, dtype=torch.long)], dim=1)
    for _ in range(d):
        logits = policy(seq)[:, -1, :10]
        probs = torch.softmax(logits.float(), dim=-1)
        nxt = torch.multinomial(probs, 1, generator=rng)
        seq = torch.cat([seq, nxt], dim=1)
    old = response_logprobs(policy, seq)
    return {"seq": seq, "reward": reward(p, seq[:, d + 1 :]), "old_logprob": old}


def response_logprobs(policy: Policy, seq: torch.Tensor) -> torch.Tensor:
    if policy.cfg.task == "tool":
        from .tool_task import response_logprobs as tool_logprobs

        return tool_logprobs(policy, seq)
    d = policy.cfg.digits
    logits = policy(seq[:, :-1])[:, d:, :10]
    lp = torch.log_softmax(logits.float(), dim=-1)
    return lp.gather(2, seq[:, d + 1 :].unsqueeze(-1)).squeeze(-1).sum(dim=1)


def advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    r = rewards.view(-1, group)
    a = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4)
    return a.reshape(-1)


def train_step(policy: Policy, opt: torch.optim.Optimizer, batch: Dict[str, torch.Tensor], grpo: GrpoConfig,
               grad_sync: Optional[Callable[[nn.Module], None]] = None) -> float:
    """One GRPO update on ``batch``; ``grad_sync(policy)`` runs between the backward pass and the
    optimizer step (data parallelism: the gradients averaged over the trainers' batches)."""
    adv = advantages(batch["reward"], grpo.group)
    loss_value = 0.0
    for _ in range(grpo.epochs):
        lp = response_logprobs(policy, batch["seq"])
        ratio = torch.exp(lp - batch["old_logprob"])
        surrogate = torch.min(ratio * adv, ratio.clamp(1 - grpo.clip, 1 + grpo.clip) * adv)
        loss = -surrogate.mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if grad_sync is not None:
            grad_sync(policy)
        opt.step()
        loss_value = loss.item()
    return loss_value


def make_optimizer(policy: Policy, grpo: GrpoConfig) -> torch.optim.Optimizer:
    opt = torch.optim.Adam(policy.parameters(), lr=grpo.lr)
    # Materialise Adam's state now, so the state kept resident has its full size from the
    # start (a step with zero gradients leaves the weights unchanged).
    for p in policy.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in policy.parameters():
        p.grad.zero_()
    return opt


__all__ = [
    "GrpoConfig",
    "Policy",
    "PolicyConfig",
    "advantages",
    "build_policy",
    "make_optimizer",
    "reward",
    "rollout",
    "train_step",
]
