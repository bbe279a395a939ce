"""A TRL GRPO job under Weave's gate, with a model and tokenizer built in code (nothing is
downloaded): a two-layer Qwen2-style model over a ten-word vocabulary learns to answer the
prompt ``say go`` with the word ``a`` (the reward: the share of ``a`` in its completion, at
most 1). Each TRL step is one Weave iteration (``weave_client.integrations.trl``).

    python examples/trl_grpo.py --server URL --token T --job trl-a --iterations 120 --dir /tmp/trl-a
    python examples/trl_grpo.py --no-weave --iterations 120 --dir /tmp/trl-plain   # the same job, plain TRL

Prints what it measured as JSON on its last line: seconds per step (step end to step end), the
gate's cost, the mean reward by iteration, where Weave resumed it.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from weave_client import WeaveClient  # noqa: E402
from weave_client.integrations.trl import Gate, train, weave_grpo_trainer  # noqa: E402

WORDS = ["<pad>", "<eos>", "a", "b", "c", "d", "e", "f", "say", "go"]


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def model(seed):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, pad_token_id=0,
                      eos_token_id=1, bos_token_id=1, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def share_of_a(completions, **_):
    """The reward: the share of the word ``a`` among the completion's (at most) 8 words."""
    return [sum(1.0 for w in c.split() if w == "a") / 8 for c in completions]


def config(a):
    from trl import GRPOConfig

    return GRPOConfig(output_dir=a.dir, per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
                      learning_rate=a.lr, lr_scheduler_type="constant", max_steps=a.iterations, logging_steps=1,
                      report_to=[], save_strategy="no" if a.no_save else "steps", save_steps=1, save_total_limit=2,
                      use_cpu=True,
                      seed=a.seed, beta=0.0, num_iterations=1, bf16=False, disable_tqdm=True)


def step_clock(a):
    """A callback noting when each step ended (its checkpoint written), into ``a.step_ends``."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            a.step_ends.append((state.global_step, time.monotonic()))

    return StepClock()


def hold(a):
    """A callback that holds the training phase of iteration ``a.hold_at`` open (its optimizer
    step done, its checkpoint not yet reported) until the file ``a.hold_file`` exists, once; it
    writes ``<hold_file>.held`` when it starts holding. A test preempts the job there, so the
    preemption lands inside a phase every time, not at the race's whim."""
    from transformers import TrainerCallback

    class Hold(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            # Step k's end has global_step k + 1: iteration k's training is still open.
            if a.hold_file is None or a.held or state.global_step != a.hold_at + 1:
                return
            a.held = True
            open(a.hold_file + ".held", "w").close()
            while not os.path.exists(a.hold_file):
                time.sleep(0.05)

    return Hold()


def make(a, gate):
    """A trainer for this job: gated when ``gate`` is given, plain TRL otherwise."""
    from datasets import Dataset
    from trl import GRPOTrainer

    data = Dataset.from_dict({"prompt": ["say go"] * (16 * a.iterations)})
    kwargs = dict(model=model(a.seed), processing_class=tokenizer(), reward_funcs=share_of_a, args=config(a),
                  train_dataset=data)
    trainer = GRPOTrainer(**kwargs) if gate is None else weave_grpo_trainer()(weave=gate, **kwargs)
    trainer.add_callback(step_clock(a))
    trainer.add_callback(hold(a))
    return trainer


def step_seconds(a):
    """Seconds between consecutive step ends, in steady state (from the fifth step on, and never
    across a resume): the job's iteration time, gate and checkpoint included."""
    ends = a.step_ends
    return [round(t2 - t1, 5) for (k1, t1), (k2, t2) in zip(ends, ends[1:]) if k2 == k1 + 1 and k1 >= 5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server")
    ap.add_argument("--token", default=os.environ.get("WEAVE_TOKEN"))
    ap.add_argument("--job", default="trl-grpo")
    ap.add_argument("--iterations", type=int, default=120)
    ap.add_argument("--dir", required=True, help="TRL's output directory (its checkpoints)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--submit", action="store_true", help="submit the job to Weave first")
    ap.add_argument("--priority", default="normal")
    ap.add_argument("--no-weave", action="store_true", help="plain TRL, no gate: the baseline")
    ap.add_argument("--no-save", action="store_true", help="with --no-weave: no checkpoint every step")
    ap.add_argument("--hold-at", type=int, default=0, help="with --hold-file: the iteration whose training to hold")
    ap.add_argument("--hold-file", help="hold iteration --hold-at's training open until this file exists (tests)")
    a = ap.parse_args()
    a.step_ends, a.held = [], False
    t0 = time.monotonic()
    if a.no_weave:
        trainer = make(a, None)
        trainer.train()
        rewards = [[h["step"] - 1, h["reward"]] for h in trainer.state.log_history if "reward" in h]
        out = {"resumed_from": [], "costs": {}, "iterations": a.iterations, "rewards": rewards}
    else:
        # Kept alive: the gate's four requests a step follow each other within milliseconds.
        client = WeaveClient(a.server, a.token, keep_alive=True)
        if a.submit:
            client.submit({"id": a.job, "type": "3B_4k", "iterations": a.iterations, "slo": 3.0, "rollout_s": 30,
                           "train_s": 30, "priority": a.priority})
        gate = Gate(client, a.job)
        with client.keepalive(a.job):
            out = train(lambda: make(a, gate), gate, a.dir)
    out["wall_s"] = round(time.monotonic() - t0, 3)
    out["step_s"] = step_seconds(a)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
