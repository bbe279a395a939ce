"""Several LoRA adapters on one base, measured on this machine (the `lora` extra: transformers +
peft): what a mixed-adapter batch costs against one adapter's, and against the same adapters
generating one after another (what separate engines sharing these cores would do).

A small Qwen2-style model is built from a config in code (nothing is downloaded), with `k`
adapters on all linear layers; each generation is greedy decoding of `--tokens` new tokens for
`--batch` prompts per adapter, timed as the median of `--repeats` runs after one warm-up.

    python -m weave_client.runtime.lora_bench --adapters 4 --batch 8 --tokens 32

prints one JSON object: seconds for the base alone at one adapter's batch and at the mixed
batch, one adapter alone, the adapters one after another, the mixed batch, and the ratios
`mixing_overhead` (mixed batch over the base at the same batch) and `mixed_gain` (one after
another over the mixed batch). Reported, never asserted on: the machine is shared.
"""

import argparse
import json
import statistics
import time


def build(adapters, rank, hidden, layers, seed=0):
    """The base with `adapters` LoRA adapters named a0.. (peft's mixed-batch inference)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=512, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 128),
                      max_position_embeddings=1024, tie_word_embeddings=True)
    base = Qwen2ForCausalLM(cfg).eval()
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(base, lora, adapter_name="a0")
    for i in range(1, adapters):
        model.add_adapter(f"a{i}", lora)
    return model.eval()


def generate(model, prompts, tokens, adapter_names=None):
    import torch

    with torch.no_grad():
        kwargs = {"adapter_names": adapter_names} if adapter_names is not None else {}
        return model.generate(prompts, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                              pad_token_id=0, **kwargs)


def timed(fn, repeats):
    fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def measure(adapters, batch, tokens, rank=8, hidden=256, layers=4, prompt_len=16, repeats=3, threads=None):
    import torch

    if threads:
        torch.set_num_threads(threads)
    model = build(adapters, rank, hidden, layers)
    one = torch.randint(1, 512, (batch, prompt_len))
    mixed = torch.randint(1, 512, (batch * adapters, prompt_len))
    names = [f"a{i}" for i in range(adapters) for _ in range(batch)]

    def each_in_turn():
        for i in range(adapters):
            generate(model, one, tokens, [f"a{i}"] * batch)

    with model.disable_adapter():
        base_one = timed(lambda: generate(model, one, tokens), repeats)
        base_mixed = timed(lambda: generate(model, mixed, tokens), repeats)
    alone = timed(lambda: generate(model, one, tokens, ["a0"] * batch), repeats)
    in_turn = timed(each_in_turn, repeats)
    together = timed(lambda: generate(model, mixed, tokens, names), repeats)
    return {
        "adapters": adapters, "batch_per_adapter": batch, "tokens": tokens, "rank": rank,
        "hidden": hidden, "layers": layers, "threads": torch.get_num_threads(),
        "base_s": base_one, "base_mixed_batch_s": base_mixed, "one_adapter_s": alone,
        "one_after_another_s": in_turn, "mixed_batch_s": together,
        "mixing_overhead": together / base_mixed, "mixed_gain": in_turn / together,
        "batch_scaling": base_mixed / base_one,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adapters", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="prompts per adapter")
    p.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a = p.parse_args(argv)
    if a.adapters < 1 or a.batch < 1 or a.tokens < 1 or a.repeats < 1:
        p.error("--adapters, --batch, --tokens and --repeats must be at least 1")
    print(json.dumps(measure(a.adapters, a.batch, a.tokens, a.rank, a.hidden, a.layers, repeats=a.repeats,
                             threads=a.threads), indent=1))


if __name__ == "__main__":
    main()
