"""Multi-head causal self-attention, nanoGPT style: one module, shapes in comments.

D = d_model (the model dimension), H = n_heads, d = D // H (the head dimension).
Chapter 2 shows ``split_heads``, ``merge_heads`` and ``MultiHeadAttention`` in
the notebook; a test keeps that code and this module equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention_scores, masked_softmax
from .i18n import tr
from .masks import causal_allowed


@dataclass
class AttentionConfig:
    d_model: int = 128  # D
    n_heads: int = 4  # H; d = D / H = 32
    bias: bool = False

    def __post_init__(self):
        if self.n_heads < 1 or self.d_model < 1 or self.d_model % self.n_heads != 0:
            raise ValueError(tr("error.heads_divide", D=self.d_model, H=self.n_heads))


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)  # [B, T, D] -> [B, T, H, d] -> [B, H, T, d]


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, d = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * d)  # [B, H, T, d] -> [B, T, H, d] -> [B, T, D]


def split_heads_without_transpose(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The classic bug: ``view(B, H, T, d)`` straight from [B, T, D]. The shape is
    right, but slot s of head h holds features of token (h * T + s) // H."""
    B, T, D = x.shape
    return x.view(B, n_heads, T, D // n_heads)


def merge_heads_without_transpose(x: torch.Tensor) -> torch.Tensor:
    """The same bug on the way back: ``reshape(B, T, D)`` straight from [B, H, T, d].
    Row t is glued from the rows t * H ... t * H + H - 1 of the flattened (head, time) grid."""
    B, H, T, d = x.shape
    return x.reshape(B, T, H * d)


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention: [B, T, D] -> [B, T, D]."""

    def __init__(self, config: AttentionConfig):
        super().__init__()
        D = config.d_model
        self.n_heads = config.n_heads
        self.q_proj = nn.Linear(D, D, bias=config.bias)  # all H query projections in one matrix
        self.k_proj = nn.Linear(D, D, bias=config.bias)
        self.v_proj = nn.Linear(D, D, bias=config.bias)
        self.out_proj = nn.Linear(D, D, bias=config.bias)

    def heads(self, x):
        """Queries, keys and values per head, each [B, H, T, d]."""
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        return q, k, v

    def weights(self, x):
        """Causal attention weights of every head: [B, H, T, T] (for figures)."""
        q, k, _ = self.heads(x)
        scores = attention_scores(q, k)  # [B, H, T, T]
        return masked_softmax(scores, causal_allowed(x.size(1), device=x.device))

    def forward(self, x):
        q, k, v = self.heads(x)  # [B, H, T, d] each
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)  # [B, H, T, d]
        return self.out_proj(merge_heads(out))  # [B, T, D]


def to_torch_mha(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (batch_first) holding the same weights."""
    D = module.q_proj.in_features
    bias = module.q_proj.bias is not None
    mha = nn.MultiheadAttention(D, module.n_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([module.q_proj.weight, module.k_proj.weight, module.v_proj.weight]))
        mha.out_proj.weight.copy_(module.out_proj.weight)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([module.q_proj.bias, module.k_proj.bias, module.v_proj.bias]))
            mha.out_proj.bias.copy_(module.out_proj.bias)
    return mha.eval()


def hand_built_heads(T: int, config: AttentionConfig | None = None, sharpness: float = 8.0
                     ) -> tuple[MultiHeadAttention, torch.Tensor]:
    """Four heads with weights set by hand, so that each looks somewhere else.

    The input ``x`` [1, T, D] carries a one-hot encoding of the position in its
    first T features. Head 0 attends to the previous token, head 1 to the token
    itself, head 2 to the first token, head 3 spreads evenly over the allowed
    prefix. Without a ``config`` the head dimension is max(32, T). Returns the
    module and ``x``.
    """
    if config is None:
        config = AttentionConfig(d_model=4 * max(32, T), n_heads=4)
    if config.n_heads != 4:
        raise ValueError(tr("error.hand_built_heads_n_heads", H=config.n_heads))
    D, d = config.d_model, config.d_model // config.n_heads
    if not 1 <= T <= d:
        raise ValueError(tr("error.hand_built_heads_length", T=T, d=d))
    module = MultiHeadAttention(config)
    x = torch.zeros(1, T, D)
    x[0, :, :T] = torch.eye(T)  # position t -> feature t
    Wq, Wk = torch.zeros(D, D), torch.zeros(D, D)  # nn.Linear weight: [out, in]
    scale = sharpness * d ** 0.5
    for t in range(T):
        Wq[0 * d + t, t] = scale  # head 0: query t looks for key t-1
        if t + 1 < T:
            Wk[0 * d + t + 1, t] = 1.0
        Wq[1 * d + t, t] = scale  # head 1: query t looks for key t
        Wk[1 * d + t, t] = 1.0
        Wq[2 * d, t] = scale  # head 2: every query looks for position 0 ...
    Wk[2 * d, 0] = 1.0  # ... whose key is the only one with feature 0
    # head 3 (rows 3d ... 4d-1) keeps zero query weights: equal scores -> uniform over the prefix
    with torch.no_grad():
        module.q_proj.weight.copy_(Wq)
        module.k_proj.weight.copy_(Wk)
        module.v_proj.weight.copy_(torch.eye(D))
        module.out_proj.weight.copy_(torch.eye(D))
    return module.eval(), x
