"""A KV cache for sliding-window attention that keeps only the last ``window`` positions.

With a sliding window of W keys, a new token never reads a key older than
W - 1 steps, so the cache needs W slots per layer, not one per position:
position p goes to slot ``p % W`` and overwrites position p - W, which no
later query may read any more (a ring buffer; Mistral 7B calls it a rolling
buffer cache, https://arxiv.org/abs/2310.06825). Its memory stays constant
however long the text grows.

The slots are not in time order once the ring has wrapped around. For one new
query that does not matter as long as the ring is exactly as wide as the model's
window: the query may read all W keys, no mask is applied, and attention does not
care in which order the keys come (positions are already inside them: added to the
input, or rotated into the keys by RoPE). Whenever a mask is applied, it assumes
time order: for several new tokens at once (the prompt), and for one new token in
a ring wider than the model's window (the window mask then hides the oldest keys).
In both cases :meth:`WindowKVCache.update` returns the keys in time order, so the
lower-right window mask of :class:`attnlab.gpt.SelfAttention` hides the right ones.
"""

from __future__ import annotations

import torch

from .gpt import GPT, GPTConfig, pick_next
from .i18n import tr
from .inputs import describe, whole_number


class WindowKVCache:
    """Keys and values of every layer in a ring of ``window`` slots: [L, B, H_kv, W, d].

    The same interface as :class:`attnlab.gpt.KVCache` (``update``, ``advance``,
    ``pos``, ``nbytes``), so the small GPT uses either without knowing which.
    """

    def __init__(self, config: GPTConfig, batch_size: int, window: int | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32):
        if not isinstance(config, GPTConfig):
            raise TypeError(tr("ch8.err_window_config", got=describe(config)))
        batch_size = whole_number("batch_size", batch_size, low=1)
        window = window if window is None else whole_number("window", window, low=1)
        window = window or config.window
        if window is None or window < 1:
            raise ValueError(tr("ch8.err_window_cache"))
        if config.window is not None and window < config.window:
            raise ValueError(tr("ch8.err_window_small", window=window, model_window=config.window))
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:  # "float32" or torch.long
            raise TypeError(tr("error.cache_dtype_arg", got=describe(dtype)))
        shape = (config.n_layer, batch_size, config.kv_heads, window, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H_kv, W, d]
        self.v = torch.zeros(shape, device=device, dtype=dtype)  # [L, B, H_kv, W, d]
        self.window = window
        self.model_window = config.window  # the window the mask uses; check_fits updates it
        self.pos = 0  # how many positions have been seen (not stored: at most W are)

    def slots(self, start: int, end: int) -> torch.Tensor:
        """Ring slots of positions start .. end-1: position p lives in slot p % W."""
        return torch.arange(start, end, device=self.k.device) % self.window

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [B, H_kv, T_new, d] keys and values of positions pos .. pos+T_new-1; return the keys
        and values the new queries attend over."""
        T_new, W = k_new.size(-2), self.window
        if T_new == 1:  # decoding: overwrite the oldest slot
            slot = self.pos % W
            self.k[layer, :, :, slot] = k_new[:, :, 0]
            self.v[layer, :, :, slot] = v_new[:, :, 0]
            filled = min(self.pos + 1, W)
            if filled <= (self.model_window or W):  # no mask is applied: the whole ring, in slot order
                return self.k[layer, :, :, :filled], self.v[layer, :, :, :filled]  # [B, H_kv, <= W, d]
            order = self.slots(self.pos + 1 - filled, self.pos + 1)  # a mask follows: time order
            return self.k[layer, :, :, order], self.v[layer, :, :, order]  # [B, H_kv, W, d]
        kept = self.slots(max(0, self.pos - W), self.pos)  # the stored past, oldest first
        k_all = torch.cat([self.k[layer, :, :, kept], k_new], dim=-2)  # [B, H_kv, T_past + T_new, d]
        v_all = torch.cat([self.v[layer, :, :, kept], v_new], dim=-2)
        end, last = self.pos + T_new, min(W, k_all.size(-2))
        self.k[layer, :, :, self.slots(end - last, end)] = k_all[:, :, -last:]  # keep the last W
        self.v[layer, :, :, self.slots(end - last, end)] = v_all[:, :, -last:]
        return k_all, v_all

    def advance(self, n: int) -> None:
        self.pos += n

    def check_fits(self, config: GPTConfig, batch_size: int, T_new: int) -> None:
        """Clear errors before a forward pass: a cache of another model or batch, or a model whose
        window is wider than the ring (it would read keys the ring has already overwritten)."""
        if not config.causal:
            raise ValueError(tr("error.cache_bidirectional"))
        if config.window is None or config.window > self.window:
            raise ValueError(tr("ch8.err_window_model", window=self.window, model_window=str(config.window)))
        self.model_window = config.window
        L, B, H, _, d = self.k.shape
        if (L, H, d) != (config.n_layer, config.kv_heads, config.head_dim):
            raise ValueError(tr("error.cache_model", L=L, H=H, d=d, model_L=config.n_layer,
                                model_H=config.kv_heads, model_d=config.head_dim))
        if B != batch_size:
            raise ValueError(tr("error.cache_batch", cache_B=B, B=batch_size))

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache tensors: 2 x L x B x H_kv x W x d x bytes per number."""
        return self.k.nbytes + self.v.nbytes


@torch.no_grad()
def decode_greedy(model: GPT, prompt: torch.Tensor, steps: int, cache=None) -> torch.Tensor:
    """Greedy decoding of ``steps`` tokens after ``prompt`` [B, T0] with the given cache
    (a :class:`WindowKVCache` or :class:`attnlab.gpt.KVCache`), or, with ``cache=None``, by
    recomputing the whole sequence at every step. Returns [B, T0 + steps]."""
    steps = whole_number("steps", steps, low=0)
    model.check_idx(prompt)
    if prompt.size(1) == 0:
        raise ValueError(tr("error.empty_prompt"))
    idx = prompt
    logits, _ = model(idx, cache=cache)  # prefill
    for _ in range(steps):
        next_id = pick_next(logits[:, -1])  # [B, 1]
        idx = torch.cat([idx, next_id], dim=1)
        logits, _ = model(next_id, cache=cache) if cache is not None else model(idx)
    return idx


def lead(logits: torch.Tensor) -> torch.Tensor:
    """[..., V] -> [...]: how far the best logit is ahead of the runner-up (0 for a tie)."""
    best_two = logits.topk(2, dim=-1).values
    return best_two[..., 0] - best_two[..., 1]


@torch.no_grad()
def greedy_lead(model: GPT, tokens: torch.Tensor, prompt_len: int) -> float:
    """Chapter 6's lead check for greedy tokens: the smallest lead of the chosen token's logit over the
    runner-up, over every token of ``tokens`` [B, T] after the first ``prompt_len``, from one full pass.
    Two decodings that differ only by rounding (another shape, a cache) pick the same tokens when this
    lead is larger than their rounding; compare it with a tolerance, never print its digits."""
    model.check_idx(tokens)
    prompt_len = whole_number("prompt_len", prompt_len, low=1, high=tokens.size(1) - 1)
    logits = model(tokens)[0][:, prompt_len - 1:-1]  # [B, new, V]: the logits that chose each new token
    return lead(logits).min().item()

