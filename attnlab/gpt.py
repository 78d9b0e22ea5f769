"""The course's small GPT: one model for chapters 4 to 9, the exercises and the benchmarks.

nanoGPT style (a config dataclass, one screen per idea, shapes in comments):

    tokens [B, T] -> token + position embeddings [B, T, D]
                  -> n_layer x Block: x + attn(norm(x)), x + mlp(norm(x))
                  -> final norm -> tied output head -> logits [B, T, V]

B = batch, T = time (tokens), D = n_embd, H = n_head, d = D / H, V = vocab size.

The attention is chapter 2's multi-head attention (``split_heads`` /
``merge_heads``) and runs either through SDPA or through chapter 1's explicit
masked softmax (``attention="explicit"``); both give the same numbers (with
``dropout > 0`` in training both drop attention weights, each with its own
random draws, so only their expected values agree). A
:class:`KVCache` turns the same model into an incremental decoder (chapter 6).
``causal=False`` removes the mask: the leaky model of chapter 4, and the
bidirectional encoder of chapter 7. Chapter 8 adds what real models do
differently, each off by default: fewer key/value heads than query heads
(``n_kv_head``: grouped-query and multi-query attention), rotary positions
(``positions="rope"``) and a sliding window (``window``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention, attention_scores, masked_softmax
from .mask_builder import build_mask
from .i18n import tr
from .inputs import describe, whole_number
from .masks import causal_allowed_from_indices
from .multihead import merge_heads, split_heads
from .rope import apply_rope


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 128  # longest sequence the position embeddings cover
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64  # D; d = D / H = 16
    norm: str = "layer"  # "layer" (LayerNorm) or "rms" (RMSNorm), over the feature axis
    attention: str = "sdpa"  # "sdpa" or "explicit" (chapter 1's masked softmax, same result; dropout on its weights too)
    causal: bool = True  # False: no mask at all (the leak of chapter 4, BERT's encoder in chapter 7)
    dropout: float = 0.0
    bias: bool = False
    n_kv_head: int | None = None  # key/value heads: None = n_head (MHA), 1 = MQA, in between = GQA (chapter 8)
    positions: str = "learned"  # "learned" (added position embeddings) or "rope" (rotary, chapter 8)
    window: int | None = None  # sliding window: each query reads its last `window` keys (chapter 8)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            whole_number(name, getattr(self, name), low=1)
        for name in ("causal", "bias"):  # causal="False" would be a causal model: a non-empty string is true
            if not isinstance(getattr(self, name), bool):
                raise TypeError(tr("error.flag", name=name, got=describe(getattr(self, name))))
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, numbers.Real) or not 0 <= self.dropout <= 1:
            raise ValueError(tr("error.config_dropout", got=describe(self.dropout)))
        if self.n_embd % self.n_head:
            raise ValueError(tr("error.config_heads", n_embd=self.n_embd, n_head=self.n_head))
        if self.n_kv_head is not None and (whole_number("n_kv_head", self.n_kv_head, low=1) > self.n_head
                                           or self.n_head % self.n_kv_head):
            raise ValueError(tr("error.config_kv_heads", n_head=self.n_head, n_kv_head=self.n_kv_head))
        for name, options in (("positions", ("learned", "rope")), ("norm", ("layer", "rms")),
                              ("attention", ("sdpa", "explicit"))):
            if getattr(self, name) not in options:
                raise ValueError(tr("error.config_choice", name=name, options=", ".join(map(repr, options)),
                                    got=describe(getattr(self, name))))
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(tr("ch8.err_rope_odd", d=self.head_dim))
        if self.window is not None:
            whole_number("window", self.window, low=1)
            if not self.causal:
                raise ValueError(tr("error.config_window", window=self.window))

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """H_kv: heads that keys and values have (the KV cache stores these)."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head


def make_norm(config: GPTConfig) -> nn.Module:
    """Normalizes each position over its D features (never over time: chapter 5)."""
    if config.norm == "rms":
        return nn.RMSNorm(config.n_embd)
    return nn.LayerNorm(config.n_embd, bias=config.bias)


class KVCache:
    """Keys and values of every layer, pre-allocated for ``max_len`` positions.

    ``k`` and ``v`` are [L, B, H_kv, max_len, d]; positions ``0 .. pos-1`` are
    filled. A forward pass over T new tokens writes their keys and values at
    ``pos .. pos+T-1`` in every layer, then :meth:`advance` moves ``pos`` on.
    Valid only for a causal model: the keys and values of earlier positions
    never change when later tokens arrive (chapter 6).
    """

    def __init__(self, config: GPTConfig, batch_size: int, max_len: int | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        if not isinstance(config, GPTConfig):
            raise TypeError(tr("error.cache_config", got=describe(config)))
        batch_size = whole_number("batch_size", batch_size, low=1)
        if max_len is None:
            max_len = config.block_size
        else:
            max_len = whole_number("max_len", max_len)
            if not 1 <= max_len <= config.block_size:
                raise ValueError(tr("error.cache_max_len", block_size=config.block_size, got=max_len))
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:  # "float32" or torch.long
            raise TypeError(tr("error.cache_dtype_arg", got=describe(dtype)))
        shape = (config.n_layer, batch_size, config.kv_heads, max_len, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H_kv, max_len, d]
        self.v = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H_kv, max_len, d]
        self.pos = 0  # how many positions are filled
        self.max_len = max_len

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [B, H, T_new, d] keys and values at ``pos``; return all of them, [B, H, pos+T_new, d]."""
        self.check_new(layer, k_new, v_new)
        end = self.pos + k_new.size(-2)
        self.k[layer, :, :, self.pos:end] = k_new
        self.v[layer, :, :, self.pos:end] = v_new
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, n: int) -> None:
        """Mark ``n`` more positions as filled (after every layer has stored them)."""
        n = whole_number("n", n, low=0)
        self.check_room(n)
        self.pos += n

    def check_new(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        L, B, H, _, d = self.k.shape
        whole_number("layer", layer, 0, L - 1)
        if (k_new.dim() != 4 or k_new.shape != v_new.shape
                or (k_new.size(0), k_new.size(1), k_new.size(3)) != (B, H, d)):
            raise ValueError(tr("error.cache_shape", B=B, H=H, d=d, k=tuple(k_new.shape), v=tuple(v_new.shape)))
        self.check_room(k_new.size(-2))

    def check_room(self, n: int) -> None:
        if self.pos + n > self.max_len:
            raise ValueError(tr("error.cache_full", max_len=self.max_len, pos=self.pos, n=n, need=self.pos + n))

    def check_fits(self, config: GPTConfig, batch_size: int, T_new: int) -> None:
        """Clear errors before a forward pass: a cache of another model or batch, or one that is full."""
        if not config.causal:
            raise ValueError(tr("error.cache_bidirectional"))
        L, B, H, _, d = self.k.shape
        if (L, H, d) != (config.n_layer, config.kv_heads, config.head_dim):  # H: key/value heads (chapter 8)
            raise ValueError(tr("error.cache_model", L=L, H=H, d=d, model_L=config.n_layer,
                                model_H=config.kv_heads, model_d=config.head_dim))
        if B != batch_size:
            raise ValueError(tr("error.cache_batch", cache_B=B, B=batch_size))
        self.check_room(T_new)

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache tensors: 2 x L x B x H_kv x max_len x d x bytes per number."""
        return self.k.nbytes + self.v.nbytes


class SelfAttention(nn.Module):
    """Multi-head self-attention of chapter 2, with an optional KV cache: [B, T, D] -> [B, T, D]."""

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        D, D_kv = config.n_embd, config.kv_heads * config.head_dim
        self.config, self.layer, self.n_head, self.n_kv_head = config, layer, config.n_head, config.kv_heads
        self.q_proj = nn.Linear(D, D, bias=config.bias)
        self.k_proj = nn.Linear(D, D_kv, bias=config.bias)  # D_kv = D unless keys are shared (GQA, MQA)
        self.v_proj = nn.Linear(D, D_kv, bias=config.bias)
        self.out_proj = nn.Linear(D, D, bias=config.bias)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        start = cache.pos if cache is not None else 0
        q, k, v = self.project(x, torch.arange(start, start + x.size(1), device=x.device))
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # [B, H_kv, T_past + T, d]
        out = self.attend(q, k, v)  # [B, H, T, d]
        return self.out_proj(merge_heads(out))  # [B, T, D]

    def project(self, x: torch.Tensor, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T, D] -> q [B, H, T, d], k and v [B, H_kv, T, d]; with RoPE, q and k are
        rotated by their ``positions`` ([T] or [B, T]) before any cache stores them."""
        q = split_heads(self.q_proj(x), self.n_head)
        k = split_heads(self.k_proj(x), self.n_kv_head)
        v = split_heads(self.v_proj(x), self.n_kv_head)
        if self.config.positions == "rope":
            q, k = apply_rope(q, positions), apply_rope(k, positions)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """[B, H, T_q, d] queries over [B, H_kv, T_kv, d] keys; the queries are the LAST T_q positions."""
        T_q, T_kv, window = q.size(-2), k.size(-2), self.config.window
        dropout = self.config.dropout if self.training else 0.0
        if not self.config.causal or (T_q == 1 and (window is None or T_kv <= window)):
            allowed = None  # no mask, or one new query that may read every key it is given
        elif window is not None:
            allowed = build_mask("sliding_window", T_q, T_kv, window=window, device=q.device)  # lower-right
        else:
            allowed = causal_allowed_from_indices(T_q, T_kv, device=q.device)  # kv <= q, lower-right
        gqa = {} if self.n_kv_head == self.n_head else {"enable_gqa": True}  # query head h reads K/V head h // G
        if self.config.attention == "explicit":
            if gqa:  # chapter 1's attention needs one K/V head per query head: repeat each group's
                k, v = (t.repeat_interleave(self.n_head // self.n_kv_head, dim=1) for t in (k, v))
            if dropout:  # as SDPA's dropout_p: drop attention weights (its own random draws)
                return F.dropout(masked_softmax(attention_scores(q, k), allowed), dropout) @ v
            return attention(q, k, v, allowed)
        if allowed is not None and T_q == T_kv and window is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, **gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout, **gqa)


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
    """tokens [B, T] -> logits [B, T, V] (and the mean cross-entropy if targets are given).

    ``block`` is the class of the transformer blocks (chapter 4 passes the ``Block`` its
    notebook shows, so that the model it trains runs that code)."""

    def __init__(self, config: GPTConfig, block: type[nn.Module] = Block):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)  # [V, D]
        self.position_embedding = (nn.Embedding(config.block_size, config.n_embd)  # [block_size, D]
                                   if config.positions == "learned" else None)  # RoPE: no position vectors
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(block(config, layer) for layer in range(config.n_layer))
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
            if (not isinstance(targets, torch.Tensor) or targets.dtype != torch.long
                    or targets.shape != idx.shape):
                got = f"{describe(targets)} {targets.dtype}" if isinstance(targets, torch.Tensor) else describe(targets)
                raise ValueError(tr("error.gpt_targets", shape=tuple(idx.shape), got=got))
            labelled = targets != -100  # -100: no loss at this position (cross_entropy's ignore_index)
            if targets.numel() and not labelled.any():  # the mean over no position: nan
                raise ValueError(tr("error.gpt_targets_ignored"))
            if labelled.any() and not 0 <= int(targets[labelled].min()) <= int(targets[labelled].max()) < self.config.vocab_size:
                raise ValueError(tr("error.gpt_targets_range", high=self.config.vocab_size - 1,
                                    low_got=int(targets[labelled].min()), high_got=int(targets[labelled].max())))
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss

    def hidden_states(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """tokens [B, T] -> the final normalized hidden states [B, T, D] (what the head reads)."""
        self.check_idx(idx)
        B, T = idx.shape
        if cache is not None:
            if not hasattr(cache, "check_fits"):
                raise TypeError(tr("error.gpt_cache_type", got=describe(cache)))
            cache.check_fits(self.config, B, T)
            dtype = self.token_embedding.weight.dtype
            if getattr(cache, "k", None) is not None and cache.k.dtype != dtype:
                raise ValueError(tr("error.cache_dtype", cache=cache.k.dtype, model=dtype))
            device = self.token_embedding.weight.device
            if getattr(cache, "k", None) is not None and cache.k.device != device:
                raise ValueError(tr("error.cache_device", cache=str(cache.k.device), model=str(device)))
        start = cache.pos if cache is not None else 0  # a decoded token keeps its place in the sequence
        if start + T > self.config.block_size and self.position_embedding is not None:  # RoPE: no table that ends
            raise ValueError(tr("error.block_size", first=start, last=start + T - 1,
                                block_size=self.config.block_size))
        positions = torch.arange(start, start + T, device=idx.device)  # [T]
        x = self.token_embedding(idx)  # [B, T, D]
        if self.position_embedding is not None:  # RoPE instead rotates q and k inside attention
            x = x + self.position_embedding(positions)
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, cache)
        if cache is not None:
            cache.advance(T)
        return self.norm_f(x)  # [B, T, D]

    def check_idx(self, idx: torch.Tensor) -> None:
        """A clear error unless ``idx`` is a [B, T] long tensor of ids in 0..V-1."""
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.long:
            got = f"{describe(idx)} {idx.dtype}" if isinstance(idx, torch.Tensor) else describe(idx)
            raise ValueError(tr("error.gpt_idx", got=got))
        device = self.token_embedding.weight.device
        if idx.device != device:  # the embedding lookup would fail inside torch
            raise ValueError(tr("error.input_device", name="idx", got=str(idx.device), model=str(device)))
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.config.vocab_size:
            raise ValueError(tr("error.gpt_token_range", high=self.config.vocab_size - 1,
                                low_got=int(idx.min()), high_got=int(idx.max())))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
        """Append ``max_new_tokens`` tokens to ``idx`` [B, T0], one at a time.

        ``temperature=0`` picks the most likely token (greedy, deterministic);
        otherwise samples with ``generator``. With ``use_cache`` the prompt is
        prefilled once and every step feeds only the newest token; without it
        every step recomputes the whole sequence. Both compute the same logits up to
        rounding (different shapes, chapter 6), so they choose the same tokens wherever
        the best token leads the runner-up by more than rounding can change a logit
        (chapter 6's lead check); a closer race may go either way.
        It runs in eval mode (no dropout), then restores the model's mode.
        """
        training = self.training
        self.eval()
        try:
            return self._generate(idx, max_new_tokens, use_cache, temperature, generator)
        finally:
            self.train(training)

    def _generate(self, idx: torch.Tensor, max_new_tokens: int, use_cache: bool, temperature: float,
                  generator: torch.Generator | None) -> torch.Tensor:
        if not self.config.causal and use_cache:
            raise ValueError(tr("error.cache_bidirectional"))
        if isinstance(idx, torch.Tensor) and idx.dim() <= 2 and idx.size(-1) == 0:  # before the dtype: [[]] is float32
            raise ValueError(tr("error.empty_prompt"))
        self.check_idx(idx)
        max_new_tokens = whole_number("max_new_tokens", max_new_tokens, low=0)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature >= 0:
            raise ValueError(tr("error.temperature", got=describe(temperature)))
        if generator is not None and not isinstance(generator, torch.Generator):  # a seed (an int) given instead
            raise TypeError(tr("error.generator", got=describe(generator)))
        T_total = idx.size(1) + max_new_tokens
        if T_total > self.config.block_size and self.position_embedding is not None:
            if idx.size(1) >= self.config.block_size:  # the prompt alone fills the position table
                raise ValueError(tr("error.block_size", first=0, last=T_total - 1, block_size=self.config.block_size))
            raise ValueError(tr("error.generate_block_size", prompt=idx.size(1), new=max_new_tokens,
                                last=T_total - 1, block_size=self.config.block_size,
                                room=self.config.block_size - idx.size(1)))
        if T_total > self.config.block_size and use_cache:
            raise ValueError(tr("error.block_size_rope", first=0, last=T_total - 1, block_size=self.config.block_size))
        if max_new_tokens == 0:
            return idx
        cache = KVCache(self.config, idx.size(0), T_total - 1, device=idx.device,
                        dtype=self.token_embedding.weight.dtype) if use_cache else None
        logits, _ = self(idx, cache=cache)  # prefill: [B, T0, V]
        for step in range(max_new_tokens):
            next_id = pick_next(logits[:, -1], temperature, generator)  # [B, 1]
            idx = torch.cat([idx, next_id], dim=1)
            if step + 1 < max_new_tokens:  # the last token needs no forward pass: nothing reads its logits
                logits, _ = self(next_id, cache=cache) if use_cache else self(idx)
        return idx


def pick_next(logits: torch.Tensor, temperature: float = 0.0,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, V] logits of the last position -> [B, 1] next token ids."""
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
