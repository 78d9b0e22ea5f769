"""The tests' small GPT: seeded, in eval mode, any config field overridable."""

import torch

from attnlab.gpt import GPT, GPTConfig


def small_gpt(**overrides) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_embd=32)
    config.update(overrides)
    return GPT(GPTConfig(**config)).eval()
