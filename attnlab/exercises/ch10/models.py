"""Exercise 10's models: tiny ``transformers`` models built from configs (attnlab.audit), nothing downloaded;
leaky attention functions registered under names of their own (a small and a medium leak, one leaking pair),
float64 copies with every logit offset by 1e4, a Mistral whose sliding window is one token (the cache bug of
chapter 10), each built once and reset for every call.
"""

from __future__ import annotations

import copy
from functools import lru_cache

import torch

from ...audit import model_from_config, register_leaky_attention, require_transformers, tiny_config, tiny_model

EXERCISE = "10-auditing-a-real-model"
ATOL = 1e-5
SMALL = 1e-3  # the small leak: a thousandth of the unmasked attention mixed in (a change of about 1e-4 in the logits)
MEDIUM = 0.1  # the medium leak: a tenth mixed in (a change of about 5e-3 in the logits)
LOGIT_OFFSET = 1e4  # the large-logit models: float64, every logit offset by 1e4


def _mixed_attention(share):
    def attention(module, query, key, value, attention_mask, **kwargs):
        """SDPA with the mask, plus ``share`` of SDPA without it: a leak well above rounding noise."""
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        causal, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        kwargs.pop("is_causal", None)
        ahead, _ = sdpa_attention_forward(module, query, key, value, None, is_causal=False, **kwargs)
        return causal + share * (ahead - causal), weights

    return attention


small_leak_attention, medium_leak_attention = _mixed_attention(SMALL), _mixed_attention(MEDIUM)


def _peeks(t, s):
    """Causal, except that query t also reads key s (negative: counted from the end): one leaking pair."""
    def attention(module, query, key, value, attention_mask, **kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        q_len, kv_len = query.shape[2], key.shape[2]
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)  # [q, kv]
        if q_len == kv_len > 3:
            allowed[t % q_len, s % kv_len] = True
        kwargs.pop("is_causal", None)
        return sdpa_attention_forward(module, query, key, value, allowed[None, None], is_causal=False, **kwargs)

    return attention


# query 0 reads key 1: far from the last position, so a prefix test that changes only the last token
# cannot see it (the exercise runs unpadded); query 1 reads key 2: not output 0; query T-3 reads key
# T-1: neither output 0 nor the position just before the change
# T-1: neither output 0 nor the position just before the change; in a one-layer model, query 0 reads
# key 3: a leak that is not at t = s - 1
peeks_once_attention, peeks_mid_attention, peeks_late_attention, peeks_far_attention = (
    _peeks(0, 1), _peeks(1, 2), _peeks(-3, -1), _peeks(0, 3))


ZERO_SLOTS = 6  # the static cache's length in the zero-slots model


def zero_slots_attention(module, query, key, value, attention_mask, **kwargs):
    """A static cache of ZERO_SLOTS positions read whole, its unfilled slots included (zeros, unmasked):
    a cached step with fewer keys attends to the zeros too (score 0, value 0), so the one-token-at-a-time
    run differs until the cache is full; a prefill and the step that fills the cache are exact."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, kv_len = query.shape[2], key.shape[2]
    if q_len == 1 and kv_len < ZERO_SLOTS:  # [B, H_kv, kv_len, d] -> [B, H_kv, ZERO_SLOTS, d]
        pad = (0, 0, 0, ZERO_SLOTS - kv_len)
        key, value = torch.nn.functional.pad(key, pad), torch.nn.functional.pad(value, pad)
        kwargs.pop("is_causal", None)
        return sdpa_attention_forward(module, query, key, value, None, is_causal=False, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_small_leak() -> str:
    require_transformers()
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    register_leaky_attention()
    for name, function in (("exercise_small_leak", small_leak_attention), ("exercise_medium_leak", medium_leak_attention),
                           ("exercise_peeks_once", peeks_once_attention),
                           ("exercise_peeks_mid", peeks_mid_attention), ("exercise_peeks_late", peeks_late_attention),
                           ("exercise_peeks_far", peeks_far_attention), ("exercise_zero_slots", zero_slots_attention)):
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)
    return "exercise_small_leak"


@lru_cache(maxsize=None)
def _template(name: str, implementation: str, seed: int):
    if implementation.startswith("exercise_"):
        register_small_leak()
    if name.endswith("_large"):  # float64, every logit offset by 1e4
        model, _ = _template(name.removesuffix("_large"), implementation, seed)
        model = with_logit_offset(copy.deepcopy(model).double(), LOGIT_OFFSET)
        return model, copy.deepcopy(model.state_dict())
    if name[-3:-1] == "_w":  # a sliding window of W tokens (mistral_w1: the cache bug of chapter 10)
        config = tiny_config(name[:-3])
        config.sliding_window = int(name[-1])
        model = model_from_config(config, implementation, seed)
        return model, copy.deepcopy(model.state_dict())
    if name.endswith("_1layer"):  # one layer: a leak stays at its one pair (two layers spread it to others)
        config = tiny_config(name.removesuffix("_1layer"))
        config.num_hidden_layers = 1
        model = model_from_config(config, implementation, seed)
    else:
        model = tiny_model(name, implementation, seed)
    return model, copy.deepcopy(model.state_dict())


def with_logit_offset(model, offset):
    """``model`` with ``offset`` added to every logit: its head (tied to the token embedding) read through a
    Linear with a bias."""
    weight = model.lm_head.weight  # [V, D]
    head = torch.nn.Linear(weight.size(1), weight.size(0), bias=True, dtype=weight.dtype, device=weight.device)
    head.weight = weight
    with torch.no_grad():
        head.bias.fill_(offset)
    model.lm_head = head
    return model


def build(spec) -> torch.nn.Module:
    """The model of ``spec`` = (name, implementation, seed, training), built once and reset for
    every call: its weights restored (whatever a learner's function did to them) and its mode set."""
    name, implementation, seed, training = spec
    model, state = _template(name, implementation, seed)
    model.load_state_dict(state)
    for module, settings in zip(model.modules(), _settings(name, implementation, seed)):  # Dropout.p and the like
        vars(module).update(settings)
    model.requires_grad_(False)  # gradients on for the learner's code, none needed for the weights (fast)
    return model.train() if training else model.eval()


@lru_cache(maxsize=None)
def _settings(name: str, implementation: str, seed: int) -> tuple:
    """The plain settings of every module of the template as first built (a learner may set Dropout.p = 0)."""
    model, _ = _template(name, implementation, seed)
    return tuple({k: v for k, v in vars(m).items() if isinstance(v, (bool, int, float, str)) and k != "training"
                  and not k.startswith("_")} for m in model.modules())


POOL = {  # label -> (name, implementation, training)
    "llama": ("llama", "sdpa", False), "gemma3": ("gemma3", "eager", False), "mistral": ("mistral", "sdpa", False),
    "gpt2_dropout": ("gpt2", "eager", True),  # causal, with dropout, handed over in training mode
    "own_mask": ("llama", "audit_own_mask", False),  # leaks on SDPA's fast path only (no padding)
    "small_leak": ("mistral", "exercise_small_leak", False),  # a leak of about 1e-4
    "drops_mask": ("gpt2", "audit_drops_mask", False),
    "peeks_once": ("llama", "exercise_peeks_once", False),  # output 0 reads position 1, nothing else leaks
    "peeks_mid": ("mistral", "exercise_peeks_mid", False),  # output 1 reads position 2
    "peeks_late": ("mistral_1layer", "exercise_peeks_late", False),  # one layer; output T-3 reads position T-1
    "peeks_far": ("llama_1layer", "exercise_peeks_far", False),  # one layer; output 0 reads position 3, nothing else
    "zero_slots": ("llama", "exercise_zero_slots", False),  # cached steps read a static cache's empty slots
    # float64, logits near 1e4: torch.allclose's default rtol = 1e-5 allows a change of 0.1 there
    "llama_large": ("llama_large", "sdpa", False), "gemma3_large": ("gemma3_large", "eager", False),
    "medium_leak_large": ("mistral_large", "exercise_medium_leak", False),  # a leak of about 1e-2
    "drops_mask_large": ("gpt2_large", "audit_drops_mask", False),  # a leak of about 1e-2
    "gpt2_dropout_large": ("gpt2_large", "eager", True),
    # a sliding window of one token: every token reads only itself; the cache of 5.24.0 keeps every key
    # (x[-0:] is all of x), so the cached logits differ from the uncached ones (chapter 10)
    "window_one": ("mistral_w1", "eager", False), "window_one_sdpa": ("mistral_w1", "sdpa", False),
    "window_two": ("mistral_w2", "eager", False),  # W = 2: the cache keeps the one key it must
}
VOCAB = 128  # the tiny models' vocabulary
