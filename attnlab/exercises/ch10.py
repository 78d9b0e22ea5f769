"""Exercise 10 (exercises/src/10-auditing-a-real-model.md): the adapter of a Hugging Face model
with left padding, and the check that finds the leaking models among five. The models are tiny
``transformers`` models built from configs (attnlab.audit), nothing is downloaded.
"""

from __future__ import annotations

import copy
from functools import lru_cache

import torch

from ..audit import model_from_config, register_leaky_attention, require_transformers, tiny_config, tiny_model
from ..causality import eval_mode
from ..grader import Case, Problem, Task, compare_outputs, same_output, watched_models

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


def register_small_leak() -> str:
    require_transformers()
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    register_leaky_attention()
    for name, function in (("exercise_small_leak", small_leak_attention), ("exercise_medium_leak", medium_leak_attention),
                           ("exercise_peeks_once", peeks_once_attention),
                           ("exercise_peeks_mid", peeks_mid_attention), ("exercise_peeks_late", peeks_late_attention),
                           ("exercise_peeks_far", peeks_far_attention)):
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
    model.requires_grad_(False)  # gradients on for the learner's code, none needed for the weights (fast)
    return model.train() if training else model.eval()


# --------------------------------------------------------------------------
# 1. padded_logits(model, ids, pad) -> [B, T, V]: ids [B, T] after `pad` padding tokens (token 0)
#    on the LEFT, blocked by an attention_mask; the logits of the real tokens; model in eval mode


def padded_logits(model, ids, pad):
    B, T = ids.shape
    full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)  # [B, pad + T]: padding first
    mask = torch.cat([torch.zeros(B, pad, dtype=torch.long), torch.ones(B, T, dtype=torch.long)], dim=1)
    with eval_mode(model):
        logits = model(input_ids=full, attention_mask=mask).logits  # [B, pad + T, V]
    return logits[:, pad:]  # the real tokens


ADAPTER_CASES = [  # (name, implementation, training, B, T, pad); GPT-2 has learned absolute positions
    ("gpt2", "eager", True, 2, 5, 3), ("gpt2", "sdpa", False, 1, 7, 2), ("llama", "sdpa", False, 2, 6, 4),
    ("mistral", "eager", True, 1, 8, 1), ("gpt2", "sdpa", True, 3, 4, 2),
]


def adapter_cases(generator):
    cases = []
    for seed, (name, impl, training, B, T, pad) in enumerate(ADAPTER_CASES):
        ids = torch.randint(1, 128, (B, T), generator=generator)
        cases.append(Case(((name, impl, seed, training), ids, pad),
                          label=f"{name} {impl}{', train()' if training else ''}, B={B}, T={T}, pad={pad}"))
    return cases


def generate_positions(mask):
    """The position ids generate() passes with a padded batch: the real tokens counted from 0."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


def _call_adapter(fn, spec, ids, pad):
    """The learner's adapter on a fresh model. Position ids passed as generate() passes them (the real
    tokens counted from 0) are right too: logits that match that reading count as the reference's."""
    model = build(spec)
    passed = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: passed.append(kwargs.get("position_ids") is not None), with_kwargs=True)
    try:
        with watched_models(model):
            got = fn(model, ids, pad)
    finally:
        hook.remove()
    if any(passed) and isinstance(got, torch.Tensor) and got.shape == (*ids.shape, model.config.vocab_size):
        B, T = ids.shape
        full = torch.cat([torch.zeros(B, pad, dtype=ids.dtype), ids], dim=1)
        mask = torch.cat([torch.zeros(B, pad, dtype=torch.long), torch.ones(B, T, dtype=torch.long)], dim=1)
        with eval_mode(model), torch.no_grad():
            counted = model(input_ids=full, attention_mask=mask, position_ids=generate_positions(mask)).logits[:, pad:]
            if same_output(got.detach().to(counted.device), counted, atol=ATOL):
                return padded_logits(model, ids, pad)  # the same answer, read with the positions the task's reference uses
    return got


def _adapter_mutant(side="left", mask="right", keep="real", train_mode=False):
    def adapter(model, ids, pad):
        B, T = ids.shape
        pads = torch.zeros(B, pad, dtype=ids.dtype)
        full = torch.cat([pads, ids] if side == "left" else [ids, pads], dim=1)
        ones, zeros = torch.ones(B, T, dtype=torch.long), torch.zeros(B, pad, dtype=torch.long)
        attention = {"right": torch.cat([zeros, ones] if side == "left" else [ones, zeros], dim=1),
                     "none": None, "inverted": torch.cat([1 - zeros, 1 - ones], dim=1)}[mask]
        if not train_mode:
            model.eval()
        logits = model(input_ids=full, attention_mask=attention).logits
        return logits[:, pad:] if keep == "real" else logits[:, :T]

    return adapter


def _adapter_with_pad_function(model, ids, pad):
    """Correct: torch.nn.functional.pad for the ids and the mask."""
    model.eval()
    full = torch.nn.functional.pad(ids, (pad, 0), value=0)
    mask = torch.nn.functional.pad(torch.ones_like(ids), (pad, 0), value=0)
    return model(input_ids=full, attention_mask=mask).logits[:, -ids.size(1):]


def _adapter_bool_mask(model, ids, pad):
    """Correct: a bool keep-mask from the positions, turned into the long 0/1 mask."""
    with eval_mode(model):
        B, T = ids.shape
        full = torch.zeros(B, pad + T, dtype=torch.long)
        full[:, pad:] = ids
        keep = torch.arange(pad + T)[None, :].expand(B, -1) >= pad
        return model(input_ids=full, attention_mask=keep.long()).logits[:, pad:]


def _compare_logits(expected, got):
    """As the default comparison; more positions than real tokens are named: padding positions kept."""
    if (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor) and got.dim() == expected.dim() == 3
            and got.shape[::2] == expected.shape[::2] and got.size(1) > expected.size(1)):
        return Problem("grader.ch10.padded_logits.padding_rows", {"got": got.size(1), "expected": expected.size(1)},
                       detail=compare_outputs(expected, got))
    return compare_outputs(expected, got)


PADDED_LOGITS = Task(
    id="ch10.padded_logits", exercise=EXERCISE, reference=padded_logits, cases=adapter_cases, call=_call_adapter,
    compare=_compare_logits,
    mutants={
        "wrong_side": _adapter_mutant(side="right"),
        "right_side_first_rows": _adapter_mutant(side="right", keep="first"),  # right padding, its real rows
        "no_attention_mask": _adapter_mutant(mask="none"),
        "mask_inverted": _adapter_mutant(mask="inverted"),
        "keeps_padding": _adapter_mutant(keep="first"),
        "no_eval": _adapter_mutant(train_mode=True),
    },
    alternatives=[_adapter_with_pad_function, _adapter_bool_mask],
)


# --------------------------------------------------------------------------
# 2. leaky_models(models, ids, atol) -> list of five bools: True where changing one later
#    token moves an earlier output by more than atol (prefix test, models in eval mode)


def leaky_models(models, ids, atol=ATOL):
    T = ids.size(1)
    earlier = torch.ones(T, T, dtype=torch.bool).tril(diagonal=-1)  # [s, t]: outputs t before the change at s
    flags = []
    for model in models:
        changed = ids.repeat(T, 1)  # [T, T]: sequence s has a new token at position s
        changed[torch.arange(T), torch.arange(T)] = (ids[0] + 1) % model.config.vocab_size
        with eval_mode(model), torch.no_grad():
            base = model(input_ids=ids).logits  # [1, T, V]
            moved = model(input_ids=changed).logits  # [T (changed s), T (output t), V]
        change = (moved - base).abs().amax(dim=-1)  # [s, t]
        flags.append(bool((change[earlier] > atol).any()))
    return flags


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
    # float64, logits near 1e4: torch.allclose's default rtol = 1e-5 allows a change of 0.1 there
    "llama_large": ("llama_large", "sdpa", False), "gemma3_large": ("gemma3_large", "eager", False),
    "medium_leak_large": ("mistral_large", "exercise_medium_leak", False),  # a leak of about 1e-2
    "drops_mask_large": ("gpt2_large", "audit_drops_mask", False),  # a leak of about 1e-2
    "gpt2_dropout_large": ("gpt2_large", "eager", True),
}
LINEUPS = [  # five models per case, the leaking ones in other places each time; (models, T, atol)
    (["llama", "own_mask", "gpt2_dropout", "small_leak", "gemma3"], 6, ATOL),
    (["small_leak", "gpt2_dropout", "peeks_mid", "peeks_far", "own_mask"], 8, ATOL),
    (["gpt2_dropout", "drops_mask", "own_mask", "gemma3", "small_leak"], 7, 1e-3),  # the small leak is below atol
    (["own_mask", "small_leak", "peeks_late", "peeks_once", "gpt2_dropout"], 5, ATOL),
    (["llama_large", "medium_leak_large", "gpt2_dropout_large", "drops_mask_large", "gemma3_large"], 6, ATOL),
]
VOCAB = 128  # the tiny models' vocabulary


def lineup_cases(generator):
    cases = []
    for n, (labels, T, atol) in enumerate(LINEUPS):
        specs = tuple((*POOL[label][:2], 10 + n, POOL[label][2]) for label in labels)
        ids = torch.randint(1, VOCAB, (1, T), generator=generator)
        ids[0, 1] = 0  # token 0 where peeks_once leaks: a test that writes token 0 as the change misses it
        ids[0, -2] = VOCAB - 1  # the last token of the vocabulary: (id + 1) % V wraps round
        if "peeks_late" in labels:  # token 0 last too: writing token 0 misses peeks_late, changing the last one does not
            ids[0, -1] = 0
        cases.append(Case((specs, ids), {"atol": atol}, label=f"{', '.join(labels)}; T={T}, atol={atol:g}"))
    return cases


def _call_lineup(fn, specs, ids, atol):
    models = [build(spec) for spec in specs]
    with watched_models(*models):
        return fn(models, ids, atol=atol)


def _lineup_mutant(positions="before", atol_used=None, train_mode=False, padding=0, new_token="next"):
    def leaky(models, ids, atol=ATOL):
        T = ids.size(1)
        flags = []
        for model in models:
            if not train_mode:
                model.eval()
            changed = ids.repeat(T, 1)
            changed[torch.arange(T), torch.arange(T)] = (ids[0] + 1) % model.config.vocab_size if new_token == "next" else 0
            if padding:  # always with left padding and its mask: the library then always builds the mask
                def run(x):
                    full = torch.cat([torch.zeros(x.size(0), padding, dtype=x.dtype), x], dim=1)
                    mask = (full != 0).long()
                    mask[:, padding:] = 1
                    return model(input_ids=full, attention_mask=mask).logits[:, padding:]
            else:
                def run(x):
                    return model(input_ids=x).logits
            change = (run(changed) - run(ids)).abs().amax(dim=-1)  # [s, t]
            ones = torch.ones(T, T, dtype=torch.bool)
            region = {"before": ones.tril(diagonal=-1), "after": ones.triu(),  # "after": t >= s
                      "output_0": ones.tril(diagonal=-1) & (torch.arange(T)[None, :] == 0),
                      "adjacent": ones.tril(diagonal=-1) & ~ones.tril(diagonal=-2)}[positions]  # [s, t]
            flags.append(bool((change[region] > (atol if atol_used is None else atol_used)).any()))
        return flags

    return leaky


def _lineup_last_token_only(models, ids, atol=ATOL):
    """Changes only the last token: finds every leak that reads the last position, and no other."""
    flags = []
    for model in models:
        model.eval()
        changed = ids.clone()
        changed[0, -1] = (ids[0, -1] + 1) % model.config.vocab_size
        change = (model(input_ids=changed).logits - model(input_ids=ids).logits).abs().amax(dim=-1)  # [1, T]
        flags.append(bool((change[0, :-1] > atol).any()))
    return flags


def _lineup_default_rtol(models, ids, atol=ATOL):
    """torch.allclose(moved, base, atol=atol) over the earlier outputs, its rtol left at 1e-5: at logits near 1e4
    that allows a change of 0.1, and a leak of 1e-2 passes."""
    flags = []
    for model in models:
        model.eval()
        base = model(input_ids=ids).logits[0]  # [T, V]
        leak = False
        for s in range(1, ids.size(1)):
            changed = ids.clone()
            changed[0, s] = (ids[0, s] + 1) % model.config.vocab_size
            leak = leak or not torch.allclose(model(input_ids=changed).logits[0, :s], base[:s], atol=atol)
        flags.append(leak)
    return flags


def _lineup_with_course_map(models, ids, atol=ATOL):
    """Correct: chapter 5's dependence_map through a one-line adapter (eval mode first: a lambda has none)."""
    from ..causality import dependence_map

    return [bool((dependence_map(lambda x, m=m.eval(): m(input_ids=x).logits, ids) > atol).triu(diagonal=1).any())
            for m in models]


def _lineup_one_at_a_time(models, ids, atol=ATOL):
    """Correct: one changed sequence per forward pass, the earlier outputs compared with allclose."""
    flags = []
    for model in models:
        model.eval()
        base = model(input_ids=ids).logits[0]
        leak = False
        for s in range(1, ids.size(1)):
            other = ids.clone()
            other[0, s] = 1 if ids[0, s] != 1 else 2
            out = model(input_ids=other).logits[0]
            leak = leak or not torch.allclose(out[:s], base[:s], rtol=0, atol=atol)
        flags.append(leak)
    return flags


def _compare_flags(expected, got):
    """As the default comparison; every model called leaky, the causal ones too, is named as such."""
    problem = compare_outputs(expected, got)
    if (problem is not None and isinstance(got, (list, tuple)) and len(got) == len(expected) and not all(expected)
            and all(flag is True or (isinstance(flag, torch.Tensor) and flag.numel() == 1 and bool(flag))
                    for flag in got)):
        return Problem("grader.ch10.leaky_models.all_leaky", {"n": len(got)}, detail=problem)
    return problem


LEAKY_MODELS = Task(
    id="ch10.leaky_models", exercise=EXERCISE, reference=leaky_models, cases=lineup_cases, call=_call_lineup,
    compare=_compare_flags,
    mutants={
        "compares_after_change": _lineup_mutant(positions="after"),
        "loose_tolerance": _lineup_mutant(atol_used=1e-2),
        "no_eval": _lineup_mutant(train_mode=True),
        "always_padded": _lineup_mutant(padding=2),
        "last_token_only": _lineup_last_token_only,
        "atol_ignored": _lineup_mutant(atol_used=ATOL),
        "writes_token_0": _lineup_mutant(new_token="zero"),
        "output_0_only": _lineup_mutant(positions="output_0"),
        "adjacent_only": _lineup_mutant(positions="adjacent"),
        "default_rtol": _lineup_default_rtol,
    },
    alternatives=[_lineup_with_course_map, _lineup_one_at_a_time],
)

TASKS = [PADDED_LOGITS, LEAKY_MODELS]
