"""Leaky variants of the course's small GPT (chapter 5): each one lets the future in somewhere else.

Every variant is the causal :class:`~attnlab.gpt.GPT` with ONE part changed,
and keeps its call: tokens [B, T] -> (logits [B, T, V], loss). Built from a
causal model, a variant copies its weights, so the two differ only in the bug.

=========================  ===================================================
``no_mask``                attention without the causal mask (chapter 4)
``time_norm``              LayerNorm over the time axis instead of the features
``label_in_input``         preprocessing writes each position's label (the next
                           token) into its input: an off-by-one in the shift
``lookahead_conv``         a token-mixing convolution whose kernel is centred,
                           so position t reads t+1 (``padding="same"``)
``merge_without_transpose``  chapter 2's bug: heads merged without transpose(1, 2)
``positions_from_end``     position ids counted from the end of the sequence:
                           position t learns how many tokens follow it
=========================  ===================================================

``leaky_gpt(name, model)`` builds one; ``VARIANTS`` lists the names.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from .gpt import GPT, GPTConfig, KVCache, SelfAttention
from .i18n import tr
from .inputs import describe

VARIANTS = ("no_mask", "time_norm", "label_in_input", "lookahead_conv", "merge_without_transpose",
            "positions_from_end")


class TimeNorm(nn.Module):
    """The bug: LayerNorm statistics over the T positions of each feature, not over
    the D features of each position. Every position's mean and variance then
    include the later positions. Same parameter (``weight`` [D]) as LayerNorm."""

    def __init__(self, n_embd: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_embd))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D]
        mean = x.mean(dim=1, keepdim=True)  # [B, 1, D]: over time (correct: dim=-1, over features)
        var = x.var(dim=1, keepdim=True, unbiased=False)  # [B, 1, D]
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight


class MergeWithoutTranspose(SelfAttention):
    """Chapter 2's bug in the whole model: [B, H, T, d] reshaped straight to [B, T, D].
    Every head still applies its causal mask; the rows are glued together wrongly."""

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        start = cache.pos if cache is not None else 0
        q, k, v = self.project(x, torch.arange(start, start + x.size(1), device=x.device))
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        out = self.attend(q, k, v)  # [B, H, T, d], causal
        return self.out_proj(out.reshape(x.shape))  # BUG: no transpose(1, 2) before merging


class TokenConv(nn.Module):
    """A depthwise convolution over time that mixes each token with its neighbours
    (as short convolutions in some hybrid models do): [B, T, D] -> [B, T, D].

    ``look_ahead=True`` pads both sides (``padding="same"``): the kernel is
    centred and position t reads t-1, t and t+1. ``look_ahead=False`` pads only
    on the left, so position t reads t-2, t-1 and t: the causal version.
    """

    def __init__(self, n_embd: int, kernel_size: int = 3, look_ahead: bool = True):
        super().__init__()
        self.conv = nn.Conv1d(n_embd, n_embd, kernel_size, groups=n_embd, bias=False)
        k = kernel_size
        self.padding = (k // 2, k - 1 - k // 2) if look_ahead else (k - 1, 0)  # (left, right)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.pad(x.transpose(1, 2), self.padding)  # [B, D, T + k - 1]
        return self.conv(h).transpose(1, 2)  # [B, T, D]


class ConvBeforeBlock(nn.Module):
    """``block(x + conv(x))``: a token-mixing convolution in front of a transformer block."""

    def __init__(self, conv: TokenConv, block: nn.Module):
        super().__init__()
        self.conv, self.block = conv, block

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.block(x + self.conv(x), cache)


class PositionsFromEnd(nn.Embedding):
    """Position embeddings looked up with positions counted from the END: the last
    token is always "position 0". Position t's vector now says how many tokens
    follow it, a leak no change of later *tokens* can reveal, only a change of length."""

    def forward(self, positions: torch.Tensor) -> torch.Tensor:  # [T]
        return super().forward(positions.flip(-1))


class LabelInInput(nn.Module):
    """A causal model behind a buggy preprocessing step (an off-by-one when the
    windows are cut: ``x = window[1:]`` instead of ``window[:-1]``). The input at
    position t is the token at t+1, which is exactly position t's label; the
    last position, which has no next token, keeps its own."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model
        self.config = model.config

    @staticmethod
    def preprocess(idx: torch.Tensor) -> torch.Tensor:
        """[B, T] -> [B, T]: the bug, outside the model."""
        return torch.cat([idx[:, 1:], idx[:, -1:]], dim=1)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.model(self.preprocess(idx), targets)


def leaky_gpt(name: str, model: GPT | GPTConfig) -> nn.Module:
    """The variant ``name`` of ``model`` (weights copied; ``model`` is not changed).

    Pass a :class:`GPTConfig` instead of a model to start from fresh weights.
    """
    if name not in VARIANTS:
        raise ValueError(tr("ch5.unknown_variant", got=repr(name), variants=", ".join(VARIANTS)))
    if not isinstance(model, (GPT, GPTConfig)):
        raise TypeError(tr("ch5.variant_model", got=describe(model)))
    model = GPT(model) if isinstance(model, GPTConfig) else copy.deepcopy(model)
    config = model.config
    if name == "no_mask":
        leaky = GPT(dataclasses.replace(config, causal=False))
        leaky.load_state_dict(model.state_dict())
        return leaky.train(model.training)
    if name == "time_norm":
        for block in model.blocks:
            block.norm_1 = _time_norm_like(block.norm_1, config)
            block.norm_2 = _time_norm_like(block.norm_2, config)
        model.norm_f = _time_norm_like(model.norm_f, config)
        return model
    if name == "label_in_input":
        return LabelInInput(model)
    if name == "lookahead_conv":
        conv = TokenConv(config.n_embd, look_ahead=True)
        with torch.no_grad():  # a fixed, visible kernel: 0.25 x previous + 0.5 x own + 0.25 x next token
            conv.conv.weight.copy_(torch.tensor([0.25, 0.5, 0.25]).expand_as(conv.conv.weight))
        model.blocks[0] = ConvBeforeBlock(conv, model.blocks[0])
        return model
    if name == "merge_without_transpose":
        for layer, block in enumerate(model.blocks):
            buggy = MergeWithoutTranspose(config, layer)
            buggy.load_state_dict(block.attn.state_dict())
            block.attn = buggy
        return model
    # positions_from_end
    if model.position_embedding is None:
        raise ValueError(tr("ch5.variant_rope"))
    positions = PositionsFromEnd(config.block_size, config.n_embd)
    positions.weight = model.position_embedding.weight
    model.position_embedding = positions
    return model


def _time_norm_like(norm: nn.Module, config: GPTConfig) -> TimeNorm:
    time_norm = TimeNorm(config.n_embd)
    with torch.no_grad():
        time_norm.weight.copy_(norm.weight)
    return time_norm
