"""The LoRA jobs' model, task and adapters (the ``lora`` extra: transformers + peft), shared by
the rollout and training processes of ``lora_jobs``.

The base: a small Qwen2 config built in code and pre-trained here, seeded, to copy a string of
digits (nothing is downloaded). Job ``j`` learns, in its adapter alone, to answer each digit
shifted by ``j + 1`` (mod 10); a position right earns ``1 / digits`` of the reward, so the
base's copying earns 0 and a random answer about 0.1. Every adapter is LoRA on all linear
layers, seeded by its job; it moves from the trainer to the engine as one flat vector
(``adapter_vector``, ``load_adapter``; an array on the way, see ``lora_procs``): an adapter's
own bytes, never the base.
"""

import dataclasses
import math

SEP = 10
VOCAB = 12  # ten digits, the separator, padding


@dataclasses.dataclass(frozen=True)
class Setup:
    jobs: int = 4
    iterations: int = 600
    digits: int = 4
    prompts: int = 16
    group: int = 8
    rank: int = 8
    lr: float = 3e-3
    hidden: int = 64
    layers: int = 2
    pretrain_steps: int = 60
    seed: int = 0
    min_batch: int = 0  # 0: half of the jobs, rounded up

    def batch_floor(self) -> int:
        return self.min_batch or max(1, math.ceil(self.jobs / 2))


def job_name(j: int) -> str:
    return f"job{j}"


def build_base(s: Setup):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(s.seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=s.hidden, intermediate_size=4 * s.hidden,
                      num_hidden_layers=s.layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2 * s.digits + 2, tie_word_embeddings=True,
                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1)
    return Qwen2ForCausalLM(cfg)


def pretrain_base(s: Setup):
    """The base, taught to copy its prompt (supervised, seeded): what every job adapts."""
    import torch

    base = build_base(s)
    opt = torch.optim.Adam(base.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(s.seed + 7)
    for _ in range(s.pretrain_steps):
        p = torch.randint(0, 10, (128, s.digits), generator=g)
        seq = torch.cat([p, torch.full((128, 1), SEP), p], dim=1)
        logits = base(input_ids=seq[:, :-1]).logits[:, s.digits:, :]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), seq[:, s.digits + 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return base.eval()


def with_adapters(base, s: Setup, jobs):
    """The base with one LoRA adapter per job on every linear layer, each seeded by its job."""
    import torch
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=s.rank, lora_alpha=2 * s.rank, target_modules="all-linear", lora_dropout=0.0)
    model = None
    for j in jobs:
        torch.manual_seed(s.seed + 1000 + j)
        if model is None:
            model = get_peft_model(base, cfg, adapter_name=job_name(j))
        else:
            model.add_adapter(job_name(j), cfg)
    _segment_lora_layers(model)
    return model


class _Segments:
    """The adapter of each contiguous run of a batch's rows, while a mixed batch runs."""

    def __init__(self) -> None:
        self.runs = None  # [(adapter name, rows)], or None: peft's own forward


def _segment_lora_layers(model) -> None:
    """Gives each LoRA layer a mixed-batch forward over contiguous runs of rows, one adapter a
    run (what Punica's SGMV kernel does on a GPU): a slice and two small products per run.
    peft's own mixed batch (``adapter_names``) gathers every adapter's rows by a list of
    indices, per layer and per decoding step; measured here it doubled a batch's time, even for
    one adapter alone. Outside a mixed batch each layer runs peft's forward (its active
    adapter: what the trainer uses)."""
    import torch
    from peft.tuners.lora import Linear

    segments = _Segments()
    for layer in model.modules():
        if not isinstance(layer, Linear):
            continue
        peft_forward = layer.forward

        def forward(x, *args, _layer=layer, _peft=peft_forward, **kwargs):
            if segments.runs is None:
                return _peft(x, *args, **kwargs)
            out, parts, start = _layer.base_layer(x, *args, **kwargs), [], 0
            for name, rows in segments.runs:
                part = _layer.lora_dropout[name](x[start:start + rows])
                parts.append(_layer.lora_B[name](_layer.lora_A[name](part)) * _layer.scaling[name])
                start += rows
            return out + torch.cat(parts)

        layer.forward = forward
    model.weave_segments = segments


def target(j: int, prompt):
    return (prompt + j + 1) % 10


def prompts_for(s: Setup, j: int, iteration: int):
    import torch

    g = torch.Generator().manual_seed((s.seed * 1_000_003 + j) * 100_003 + iteration)
    return torch.randint(0, 10, (s.prompts, s.digits), generator=g).repeat_interleave(s.group, dim=0)


def _cache_keyword() -> str:
    """transformers 5 names the KV cache `cache` (in and out); earlier, `past_key_values`."""
    import inspect

    from transformers import Qwen2ForCausalLM

    return "cache" if "cache" in inspect.signature(Qwen2ForCausalLM.forward).parameters else "past_key_values"


def sample(model, s: Setup, batch):
    """Samples responses for every job of ``batch`` (a list of (job, iteration)) in one batch,
    each job's rows through its own adapter (``_segment_lora_layers``), decoding with a KV cache. Each job's prompts and
    draws come from its own (job, iteration) stream, so what it samples does not depend on
    who shares its batch. Returns (job, prompt and response) per job."""
    import torch

    prompts = [prompts_for(s, j, k) for j, k in batch]
    rngs = [torch.Generator().manual_seed((s.seed * 7_919 + j) * 1_000_003 + k + 17) for j, k in batch]
    sizes = [p.shape[0] for p in prompts]
    seq = torch.cat([torch.cat(prompts), torch.full((sum(sizes), 1), SEP)], dim=1)
    step, cache, key = seq, None, _cache_keyword()
    model.weave_segments.runs = [(job_name(j), n) for (j, _), n in zip(batch, sizes)]
    try:
        with torch.no_grad():
            for _ in range(s.digits):
                out = model(input_ids=step, use_cache=True, **{key: cache})
                cache = out[key]
                probs = torch.softmax(out.logits[:, -1, :10].float(), dim=-1)
                step = torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs.split(sizes), rngs)])
                seq = torch.cat([seq, step], dim=1)
    finally:
        model.weave_segments.runs = None
    return list(zip([j for j, _ in batch], seq.split(sizes)))


def reward(s: Setup, j: int, seq):
    return (seq[:, s.digits + 1:] == target(j, seq[:, :s.digits])).float().mean(dim=1)


def train_step(model, opt, s: Setup, j: int, seq) -> float:
    """One GRPO step of job ``j``'s adapter on its own samples; returns their mean reward."""
    import torch

    from .policy import advantages

    model.set_adapter(job_name(j))
    r = reward(s, j, seq)
    adv = advantages(r, s.group)
    logits = model(input_ids=seq[:, :-1]).logits[:, s.digits:, :10]
    lp = torch.log_softmax(logits.float(), dim=-1).gather(2, seq[:, s.digits + 1:].unsqueeze(-1)).squeeze(-1)
    loss = -(adv * lp.sum(dim=1)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return r.mean().item()


def adapter_params(model, j: int):
    """Job ``j``'s adapter parameters, in name order (the same order in every process)."""
    marker = f".{job_name(j)}."
    return [p for name, p in sorted(model.named_parameters()) if marker in name]


def adapter_vector(model, j: int):
    """Job ``j``'s adapter as one flat tensor: what moves from the trainer to the engine."""
    import torch

    return torch.nn.utils.parameters_to_vector(adapter_params(model, j)).detach().clone()


def load_adapter(model, j: int, vector) -> None:
    import torch

    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(vector, adapter_params(model, j))
