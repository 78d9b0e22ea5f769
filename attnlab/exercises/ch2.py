"""Exercise 2 (exercises/src/02-multi-head-attention.md): split and merge heads, and the
forward pass of a small causal multi-head attention module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..grader import LAYOUTS, VIEWABLE, Case, Contract, Problem, Refusal, Task, note, same_output, watched_models
from . import case_device

EXERCISE = "02-multi-head-attention"
SIZES = [(2, 5, 12, 3), (1, 7, 16, 4), (3, 4, 10, 2), (2, 6, 24, 6)]  # (B, T, D, H); the notebook shows (1, 3, 8, 2)


# --------------------------------------------------------------------------
# 1. split_heads(x, n_heads): [B, T, D] -> [B, H, T, d]


def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def split_cases(generator):
    return [Case((torch.randn(B, T, D, generator=generator).to(case_device()), H), label=f"B={B}, T={T}, D={D}, H={H}")
            for B, T, D, H in SIZES]


def _heads_sizes(d):
    B, T = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 30, edges=(1, 130))
    H, head = d.size("H", 1, 8, edges=(1, 16)), d.size("d", 1, 16, edges=(1, 32))
    dtype = d.choice("dtype", (torch.float32, torch.float16, torch.bfloat16, torch.float64))
    return B, T, H, head, dtype


def split_draw(d):
    """x [B, T, H * d] in any float dtype; laid out as a slice, every other row, or contiguous: ``view`` on the
    last axis works on each, code that assumes a contiguous input does not."""
    B, T, H, head, dtype = _heads_sizes(d)
    return Case((d.normal("x", (B, T, H * head), dtype, layouts=VIEWABLE), H))


def merge_draw(d):
    B, T, H, head, dtype = _heads_sizes(d)
    return Case((d.normal("x", (B, H, T, head), dtype, layouts=LAYOUTS),))


SPLIT_HEADS = Task(
    id="ch2.split_heads", exercise=EXERCISE, reference=split_heads, cases=split_cases,
    contract=Contract(draw=split_draw, grads=("x",)),
    course_copies=("attnlab.multihead.split_heads", "attnlab.multihead.split_heads_without_transpose"),
    mutants={
        "no_transpose": lambda x, H: x.view(x.shape[0], H, x.shape[1], x.shape[2] // H),
        "interleaved": lambda x, H: x.view(x.shape[0], x.shape[1], x.shape[2] // H, H).permute(0, 3, 1, 2),
        "heads_after_time": lambda x, H: x.view(x.shape[0], x.shape[1], H, x.shape[2] // H),
    },
    alternatives=[
        lambda x, H: x.unflatten(-1, (H, -1)).transpose(1, 2),
        lambda x, H: torch.stack(x.chunk(H, dim=-1), dim=1),
        lambda x, H: x.reshape(x.size(0), x.size(1), H, -1).permute(0, 2, 1, 3).contiguous(),
    ],
)


# --------------------------------------------------------------------------
# 2. merge_heads(x): [B, H, T, d] -> [B, T, D]


def merge_heads(x):
    B, H, T, d = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * d)


def merge_cases(generator):
    return [Case((torch.randn(B, H, T, D // H, generator=generator).to(case_device()),),
                 label=f"B={B}, H={H}, T={T}, d={D // H}") for B, T, D, H in SIZES]


MERGE_HEADS = Task(
    id="ch2.merge_heads", exercise=EXERCISE, reference=merge_heads, cases=merge_cases,
    contract=Contract(draw=merge_draw, grads=("x",)),
    course_copies=("attnlab.multihead.merge_heads", "attnlab.multihead.merge_heads_without_transpose"),
    mutants={
        "no_transpose": lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
        "interleaved": lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
        "summed": lambda x: x.sum(dim=1),
    },
    alternatives=[
        lambda x: torch.cat(x.unbind(dim=1), dim=-1),
        lambda x: x.permute(0, 2, 1, 3).flatten(2),
        lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1),
    ],
)


# --------------------------------------------------------------------------
# 3. CausalSelfAttention(d_model, n_heads).forward(x): [B, T, D] -> [B, T, D]
#    The learner's class is built, given the case's weights, and called in eval mode.


class CausalSelfAttention(nn.Module):
    """The reference: projections, split, causal SDPA per head, merge, output projection."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def heads(self, x):
        return [split_heads(proj(x), self.n_heads) for proj in (self.q_proj, self.k_proj, self.v_proj)]

    def forward(self, x):
        q, k, v = self.heads(x)  # [B, H, T, d]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(merge_heads(out))


class _NoMask(CausalSelfAttention):
    def forward(self, x):
        q, k, v = self.heads(x)
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v)))


class _SplitWithoutTranspose(CausalSelfAttention):
    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (p(x).view(B, self.n_heads, T, D // self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))


class _MergeWithoutTranspose(CausalSelfAttention):
    def forward(self, x):
        q, k, v = self.heads(x)
        return self.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).reshape(x.shape))


class _NoOutputProjection(CausalSelfAttention):
    def forward(self, x):
        q, k, v = self.heads(x)
        return merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True))


class _ScaledByModelWidth(CausalSelfAttention):
    def forward(self, x):
        q, k, v = self.heads(x)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(x.shape[-1]))
        return self.out_proj(merge_heads(out))


class _Einsum(CausalSelfAttention):
    """Another correct way: no SDPA, no view; einsum and an index mask."""

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = (p(x).reshape(B, T, H, D // H) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // H)
        blocked = torch.arange(T, device=x.device)[None, :] > torch.arange(T, device=x.device)[:, None]
        weights = scores.masked_fill(blocked, float("-inf")).softmax(dim=-1)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, T, D)
        return self.out_proj(out)


class _NanoGPT(CausalSelfAttention):
    """Another correct way: nanoGPT's explicit attention with a tril buffer."""

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.heads(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.tril(torch.ones(T, T, device=x.device)) == 0, float("-inf"))
        y = att.softmax(dim=-1) @ v
        return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, D))


def module_cases(generator):
    cases = []
    for B, T, D, H in SIZES:
        state = {f"{name}.weight": (torch.randn(D, D, generator=generator) / math.sqrt(D)).to(case_device())
                 for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
        x = torch.randn(B, T, D, generator=generator).to(case_device())
        cases.append(Case((state, x, H), label=f"B={B}, T={T}, D={D}, H={H}"))
    return cases


def _call_module(cls, state, x, n_heads):
    """Build the learner's class with the case's width and heads, load the weights, run forward twice on
    the same module: a forward that changes the module (weights rescaled in place, a cache kept) gives
    another answer the second time (``grader.depends_on_calls``), and changed weights are named."""
    module = cls(x.shape[-1], n_heads).to(x.device)
    # The task's four weights are loaded; what else the module registers (nanoGPT's `bias` buffer, a
    # tril mask) stays as the module made it. A weight the module lacks is named, not cut short.
    missing = [name for name in state if name not in module.state_dict()]
    if missing:
        raise Refusal(Problem("grader.ch2.mha_forward.missing_weights", {"names": ", ".join(missing)}))
    module.load_state_dict(state, strict=False)
    module.eval()
    with watched_models(module):
        out = module(x)
        again = module(x)
    if isinstance(out, torch.Tensor) and isinstance(again, torch.Tensor) and not same_output(out, again):
        note(Problem("grader.depends_on_calls"))
    return out


def module_draw(d):
    """The four weights and x [B, T, D] (float32, any layout), D = H * d."""
    B, T = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 24, edges=(1, 130))
    H, head = d.size("H", 1, 6, edges=(1, 8)), d.size("d", 1, 12, edges=(1, 32))
    D = H * head
    generator = d.generator("weights")
    state = {f"{name}.weight": (torch.randn(D, D, generator=generator) / math.sqrt(D)).to(d.device)
             for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
    x = d.normal("x", (B, T, D), torch.float32, scale=d.choice("scale", (1.0, 10.0)))
    return Case((state, x, H))


MHA_FORWARD = Task(
    id="ch2.mha_forward", exercise=EXERCISE, reference=CausalSelfAttention, cases=module_cases, call=_call_module,
    contract=Contract(draw=module_draw, grads=("x",)), input_names=("state", "x", "n_heads"),
    course_copies=("attnlab.multihead.MultiHeadAttention.forward", "attnlab.gpt.SelfAttention.forward",
                   "attnlab.gpt.SelfAttention.attend"),
    mutants={
        "no_mask": _NoMask,
        "split_without_transpose": _SplitWithoutTranspose,
        "merge_without_transpose": _MergeWithoutTranspose,
        "no_out_proj": _NoOutputProjection,
        "scale_by_model_width": _ScaledByModelWidth,
    },
    alternatives=[_Einsum, _NanoGPT],
)

TASKS = [SPLIT_HEADS, MERGE_HEADS, MHA_FORWARD]
