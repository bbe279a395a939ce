"""Several adapters on one base (the `lora` extra): a mixed-adapter batch generates, for each
adapter's rows, exactly what that adapter generates alone, and differently from the base and
from the other adapters, so the bench's mixed batch is real mixing; the bench runs end to end."""

import unittest

try:
    import peft  # noqa: F401
    import torch
    import transformers  # noqa: F401
except ImportError:  # the lora extra is installed on CI: a skip fails the run there
    torch = None

from weave_client.runtime import lora_bench


@unittest.skipIf(torch is None, "the lora extra (torch, transformers, peft) is not installed")
class MixedBatchTest(unittest.TestCase):
    def test_each_adapters_rows_of_a_mixed_batch_are_what_it_generates_alone(self):
        model = lora_bench.build(adapters=3, rank=4, hidden=64, layers=2)
        prompts = torch.randint(1, 512, (2, 6), generator=torch.Generator().manual_seed(1))
        alone = [lora_bench.generate(model, prompts, 5, [f"a{i}"] * 2) for i in range(3)]
        mixed = lora_bench.generate(model, prompts.repeat(3, 1), 5, [f"a{i}" for i in range(3) for _ in range(2)])
        for i in range(3):
            self.assertTrue(torch.equal(mixed[2 * i:2 * i + 2], alone[i]), f"adapter a{i}")
        with model.disable_adapter():
            base = lora_bench.generate(model, prompts, 5)
        self.assertFalse(torch.equal(alone[0], base), "an adapter changes what the base generates")
        self.assertFalse(torch.equal(alone[0], alone[1]), "adapters differ")

    def test_the_bench_reports_each_figure(self):
        r = lora_bench.measure(adapters=2, batch=1, tokens=2, rank=2, hidden=64, layers=1, repeats=1)
        for key in ("base_s", "one_adapter_s", "one_after_another_s", "mixed_batch_s", "mixing_overhead", "mixed_gain"):
            self.assertGreater(r[key], 0.0, key)


if __name__ == "__main__":
    unittest.main()
