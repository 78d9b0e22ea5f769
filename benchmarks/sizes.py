"""The sizes of a benchmark run (``--smoke``, the default, ``--full``, and ``gpu`` on a CUDA GPU):
sequence lengths, heads, tile size, decode contexts, repetitions and the decode model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Sizes:
    attention_T: tuple[int, ...]  # sequence lengths for the attention rows
    heads: int  # H, with d = 64 and batch 1
    block: int  # tile size of the blocked attention
    decode_contexts: tuple[int, ...]  # context lengths for the decode rows
    decode_tokens: int  # new tokens per decode measurement
    repeats: int  # timed repetitions of a single measurement (the median is reported)
    pair_repeats: int  # rounds of a side-by-side pair (causal and full, cache and none)
    model: dict  # GPTConfig fields of the decode model
    backward_T: tuple[int, ...] = (64, 128)  # sequence lengths for the backward rows (chapter 11)
    gpu_T: tuple[int, ...] = ()  # sequence lengths of the bfloat16 rows (flash, FlexAttention; GPU only)
    gpu_heads: int = 16  # H of the bfloat16 rows, with d = 128 and batch 1
    window: int = 1024  # sliding window of the FlexAttention rows (chapter 8)
    naive_max_T: int = 16384  # the bfloat16 rows time the naive [T, T] version up to this T
    prefill_T: int = 512  # chapter 12: the prompt of the chunked-prefill rows
    prefill_chunks: tuple[int, ...] = (512, 256, 128, 64, 32)  # its chunk sizes C
    paged_requests: int = 64  # requests of random length in the paged-cache rows
    paged_block_sizes: tuple[int, ...] = (4, 16, 64)
    spec_tokens: int = 64  # new tokens of the speculative-decoding rows (the trained models' block ends at 128)


SIZES = {
    "smoke": Sizes((64, 128), 2, 32, (16, 32), 4, 2, 3, dict(n_layer=2, n_head=4, n_embd=64),
                   prefill_T=64, prefill_chunks=(64, 16), paged_requests=8, spec_tokens=16),
    "default": Sizes((256, 1024, 4096), 4, 128, (128, 512, 2048), 16, 5, 9, dict(n_layer=4, n_head=4, n_embd=128),
                     (1024, 4096)),
    "full": Sizes((256, 1024, 4096, 8192), 8, 128, (128, 512, 2048, 4096), 32, 7, 11,
                  dict(n_layer=6, n_head=6, n_embd=384), (1024, 4096, 8192), prefill_T=1024,
                  prefill_chunks=(1024, 512, 256, 128, 64, 32)),
    # the default on a CUDA GPU (an H200 in mind): the fp32 rows of the CPU sizes, and the bfloat16
    # sweep from 1k to 32k behind chapters 3 and 8's GPU claims
    "gpu": Sizes((1024, 4096, 8192), 8, 128, (128, 512, 2048, 4096), 32, 7, 11,
                 dict(n_layer=6, n_head=6, n_embd=384), (1024, 4096), (1024, 2048, 4096, 8192, 16384, 32768),
                 prefill_T=2048, prefill_chunks=(2048, 1024, 512, 256, 128)),
}
