"""The course's small GPT: one model for chapters 4 to 9, the exercises and the benchmarks.

nanoGPT style (a config dataclass, one screen per idea, shapes in comments):

    tokens [B, T] -> token + position embeddings [B, T, D]
                  -> n_layer x Block: x + attn(norm(x)), x + mlp(norm(x))
                  -> final norm -> tied output head -> logits [B, T, V]

B = batch, T = time (tokens), D = n_embd, H = n_head, d = D / H, V = vocab size.

The attention is chapter 2's multi-head attention (``split_heads`` /
``merge_heads``) and runs either through SDPA or through chapter 1's explicit
masked softmax (``attention="explicit"``); both give the same numbers. A
:class:`KVCache` turns the same model into an incremental decoder (chapter 6).
``causal=False`` removes the mask: the leaky model of chapter 4, and the
bidirectional encoder of chapter 7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention
from .masks import causal_allowed_from_indices
from .multihead import merge_heads, split_heads


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 128  # longest sequence the position embeddings cover
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64  # D; d = D / H = 16
    norm: str = "layer"  # "layer" (LayerNorm) or "rms" (RMSNorm), over the feature axis
    attention: str = "sdpa"  # "sdpa" or "explicit" (chapter 1's masked softmax, same result)
    causal: bool = True  # False: no mask at all (the leak of chapter 4, BERT's encoder in chapter 7)
    dropout: float = 0.0
    bias: bool = False

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.norm not in ("layer", "rms"):
            raise ValueError(f"norm must be 'layer' or 'rms', not {self.norm!r}")
        if self.attention not in ("sdpa", "explicit"):
            raise ValueError(f"attention must be 'sdpa' or 'explicit', not {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def make_norm(config: GPTConfig) -> nn.Module:
    """Normalizes each position over its D features (never over time: chapter 5)."""
    if config.norm == "rms":
        return nn.RMSNorm(config.n_embd)
    return nn.LayerNorm(config.n_embd, bias=config.bias)


class KVCache:
    """Keys and values of every layer, pre-allocated for ``max_len`` positions.

    ``k`` and ``v`` are [L, B, H, max_len, d]; positions ``0 .. pos-1`` are
    filled. A forward pass over T new tokens writes their keys and values at
    ``pos .. pos+T-1`` in every layer, then :meth:`advance` moves ``pos`` on.
    Valid only for a causal model: the keys and values of earlier positions
    never change when later tokens arrive (chapter 6).
    """

    def __init__(self, config: GPTConfig, batch_size: int, max_len: int | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        max_len = max_len or config.block_size
        if max_len > config.block_size:
            raise ValueError(f"max_len={max_len} exceeds the model's block_size={config.block_size}")
        shape = (config.n_layer, batch_size, config.n_head, max_len, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H, max_len, d]
        self.v = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H, max_len, d]
        self.pos = 0  # how many positions are filled
        self.max_len = max_len

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [B, H, T_new, d] keys and values at ``pos``; return all of them, [B, H, pos+T_new, d]."""
        end = self.pos + k_new.size(-2)
        if end > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} positions; {end} were asked for")
        self.k[layer, :, :, self.pos:end] = k_new
        self.v[layer, :, :, self.pos:end] = v_new
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, n: int) -> None:
        self.pos += n

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache tensors: 2 x L x B x H x max_len x d x bytes per number."""
        return self.k.nbytes + self.v.nbytes


class SelfAttention(nn.Module):
    """Multi-head self-attention of chapter 2, with an optional KV cache: [B, T, D] -> [B, T, D]."""

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        D = config.n_embd
        self.config, self.layer, self.n_head = config, layer, config.n_head
        self.q_proj = nn.Linear(D, D, bias=config.bias)
        self.k_proj = nn.Linear(D, D, bias=config.bias)
        self.v_proj = nn.Linear(D, D, bias=config.bias)
        self.out_proj = nn.Linear(D, D, bias=config.bias)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        q, k, v = (split_heads(proj(x), self.n_head) for proj in (self.q_proj, self.k_proj, self.v_proj))
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # [B, H, T_past + T, d]
        out = self.attend(q, k, v)  # [B, H, T, d]
        return self.out_proj(merge_heads(out))  # [B, T, D]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """[B, H, T_q, d] queries over [B, H, T_kv, d] keys; the queries are the LAST T_q positions."""
        T_q, T_kv = q.size(-2), k.size(-2)
        dropout = self.config.dropout if self.training else 0.0
        if not self.config.causal or T_q == 1:
            allowed = None  # no mask, or one new query that may read every cached key
        else:
            allowed = causal_allowed_from_indices(T_q, T_kv, device=q.device)  # kv <= q, lower-right
        if self.config.attention == "explicit":
            return attention(q, k, v, allowed)
        if allowed is not None and T_q == T_kv:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout)


class MLP(nn.Module):
    """Position-wise feed-forward network: [B, T, D] -> [B, T, 4D] -> [B, T, D]."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.up = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.down = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        self.norm_1 = make_norm(config)
        self.attn = SelfAttention(config, layer)
        self.norm_2 = make_norm(config)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x), cache)
        return x + self.mlp(self.norm_2(x))


class GPT(nn.Module):
    """tokens [B, T] -> logits [B, T, V] (and the mean cross-entropy if targets are given)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)  # [V, D]
        self.position_embedding = nn.Embedding(config.block_size, config.n_embd)  # [block_size, D]
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.norm_f = make_norm(config)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight  # tied: one [V, D] matrix reads and writes tokens
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # nanoGPT: scaled init of the residual projections
            if name.endswith(("out_proj.weight", "down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Trainable numbers, the tied head counted once."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.head(self.hidden_states(idx, cache))  # [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss

    def hidden_states(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """tokens [B, T] -> the final normalized hidden states [B, T, D] (what the head reads)."""
        if idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx must be a [B, T] tensor of token ids (torch.long), got "
                             f"{tuple(idx.shape)} {idx.dtype}")
        B, T = idx.shape
        start = cache.pos if cache is not None else 0  # a decoded token keeps its place in the sequence
        if start + T > self.config.block_size:
            raise ValueError(f"positions {start}..{start + T - 1} exceed block_size={self.config.block_size}")
        positions = torch.arange(start, start + T, device=idx.device)  # [T]
        x = self.dropout(self.token_embedding(idx) + self.position_embedding(positions))  # [B, T, D]
        for block in self.blocks:
            x = block(x, cache)
        if cache is not None:
            cache.advance(T)
        return self.norm_f(x)  # [B, T, D]

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
        """Append ``max_new_tokens`` tokens to ``idx`` [B, T0], one at a time.

        ``temperature=0`` picks the most likely token (greedy, deterministic);
        otherwise samples with ``generator``. With ``use_cache`` the prompt is
        prefilled once and every step feeds only the newest token; without it
        every step recomputes the whole sequence. Both give the same tokens.
        """
        if not self.config.causal and use_cache:
            raise ValueError("a KV cache is only valid for a causal model (chapter 7)")
        T_total = idx.size(1) + max_new_tokens
        if T_total > self.config.block_size:
            raise ValueError(f"{idx.size(1)} + {max_new_tokens} tokens exceed block_size={self.config.block_size}")
        cache = KVCache(self.config, idx.size(0), T_total, device=idx.device,
                        dtype=self.token_embedding.weight.dtype) if use_cache else None
        logits, _ = self(idx, cache=cache)  # prefill: [B, T0, V]
        for _ in range(max_new_tokens):
            next_id = pick_next(logits[:, -1], temperature, generator)  # [B, 1]
            idx = torch.cat([idx, next_id], dim=1)
            logits, _ = self(next_id, cache=cache) if use_cache else self(idx)
        return idx


def pick_next(logits: torch.Tensor, temperature: float = 0.0,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, V] logits of the last position -> [B, 1] next token ids."""
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
