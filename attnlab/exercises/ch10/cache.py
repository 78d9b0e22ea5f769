"""Exercise 10, task 3: cached against uncached logits, the check of chapter 10 that runs the code only a
cached run runs (the cache layers): it finds the window of one token whose cache keeps every key, which
chapter 5's tests pass, and the leaks of the fast path, whose keys and values differ with the length of the
sequence they were computed in.
"""

from __future__ import annotations

import torch

from ...causality import eval_mode
from ...grader import Case, Contract, Task
from .leaks import _call_lineup, flags_compare
from .models import ATOL, EXERCISE, POOL, VOCAB

# --------------------------------------------------------------------------
# 3. cache_differs(models, ids, atol) -> list of bools: True where the logits of the sequence fed through
#    the KV cache (the first token, then one token at a time) differ by more than atol from one uncached pass


def cache_differs(models, ids, atol=ATOL):
    flags = []
    for model in models:
        with eval_mode(model), torch.no_grad():
            full = model(input_ids=ids).logits  # [1, T, V]: one pass over the whole sequence
            out = model(input_ids=ids[:, :1], use_cache=True)  # the first token
            pieces, past = [out.logits], out.cache
            for t in range(1, ids.size(1)):  # then one token at a time, through the cache
                out = model(input_ids=ids[:, t:t + 1], cache=past, use_cache=True)
                pieces.append(out.logits)
                past = out.cache
        cached = torch.cat(pieces, dim=1)  # [1, T, V]
        flags.append(bool(((cached - full).abs() > atol).any()))
    return flags


CACHE_LINEUPS = [  # five models per case; (models, T, atol)
    (["llama", "window_one", "own_mask", "gpt2_dropout", "small_leak"], 6, ATOL),
    (["window_one_sdpa", "gemma3", "window_two", "own_mask", "llama"], 5, ATOL),
    (["gpt2_dropout", "small_leak", "window_two", "window_one", "mistral"], 7, 1e-4),  # between the small leak's
    # largest change (about 2e-4) and its mean over the vocabulary (about 5e-5)
    (["llama_large", "medium_leak_large", "gpt2_dropout_large", "gemma3_large", "drops_mask_large"], 6, ATOL),
    (["own_mask", "window_one", "llama", "small_leak", "window_two"], 4, 1e-3),  # the small leak below atol
    (["zero_slots", "llama", "gemma3", "window_two", "gpt2_dropout"], 6, ATOL),  # T = ZERO_SLOTS: every cached
    # step but the last reads empty slots, so a prefill of T - 1 tokens and one step would see no difference
]


def cache_cases(generator):
    cases = []
    for n, (labels, T, atol) in enumerate(CACHE_LINEUPS):
        specs = tuple((*POOL[label][:2], 30 + n, POOL[label][2]) for label in labels)
        ids = torch.randint(1, VOCAB, (1, T), generator=generator)
        ids[0, -1] = VOCAB - 1
        cases.append(Case((specs, ids), {"atol": atol}, label=f"{', '.join(labels)}; T={T}, atol={atol:g}"))
    return cases


CACHE_POOL = ("llama", "gemma3", "mistral", "gpt2_dropout", "own_mask", "small_leak", "window_one", "window_two",
              "window_one_sdpa", "peeks_mid")


def cache_draw(d):
    """Three models of the pool in any order, T from 2 to 8, an atol of 1e-5 or 1e-3 (far from the small leak's
    difference, about 1e-4, which depends on how many tokens the first step feeds: the lineups of the cases set
    an atol near it, with the task's one-token start)."""
    picked = [d.choice(f"model{n}", CACHE_POOL) for n in range(3)]
    T, atol = d.size("T", 2, 6, edges=(2, 8)), d.choice("atol", (ATOL, 1e-3))
    ids = torch.randint(0, VOCAB, (1, T), generator=d.generator("ids"))
    specs = tuple((*POOL[label][:2], 40, POOL[label][2]) for label in picked)
    return Case((specs, ids), {"atol": atol}, label=f"{', '.join(picked)}; T={T}, atol={atol:g}")


def _cache_mutant(steps=True, train_mode=False, atol_used=None, reduce="max", compare="values"):
    def differs(models, ids, atol=ATOL):
        flags = []
        for model in models:
            if not train_mode:
                model.eval()
            full = model(input_ids=ids).logits
            if steps:
                out = model(input_ids=ids[:, :1], use_cache=True)
                pieces, past = [out.logits], out.cache
                for t in range(1, ids.size(1)):
                    out = model(input_ids=ids[:, t:t + 1], cache=past, use_cache=True)
                    pieces.append(out.logits)
                    past = out.cache
                cached = torch.cat(pieces, dim=1)
            else:  # use_cache=True on the whole sequence: the cache is filled, never read
                cached = model(input_ids=ids, use_cache=True).logits
            if compare == "tokens":
                flags.append(not torch.equal(cached.argmax(dim=-1), full.argmax(dim=-1)))
            elif compare == "allclose":
                flags.append(not torch.allclose(cached, full, atol=atol))
            else:
                change = (cached - full).abs()
                change = change.amax(dim=-1) if reduce == "max" else change.mean(dim=-1)
                flags.append(bool((change > (atol if atol_used is None else atol_used)).any()))
        return flags

    return differs


def _prefill_half(models, ids, atol=ATOL):
    """Correct: the first half of the sequence as one prefill, then one token at a time; torch.allclose with
    rtol=0, the models' modes restored."""
    flags = []
    for model in models:
        with eval_mode(model), torch.no_grad():
            T = ids.size(1)
            full = model(input_ids=ids).logits
            first = max(1, T // 2)
            out = model(input_ids=ids[:, :first], use_cache=True)
            logits, past = [out.logits], out.cache
            for t in range(first, T):
                out = model(input_ids=ids[:, t:t + 1], cache=past, use_cache=True)
                logits.append(out.logits)
                past = out.cache
            flags.append(not torch.allclose(torch.cat(logits, dim=1), full, rtol=0, atol=atol))
    return flags


def _explicit_cache(models, ids, atol=ATOL):
    """Correct: a DynamicCache made by hand and filled one token at a time from the start, compared position by
    position."""
    from transformers import DynamicCache

    flags = []
    for model in models:
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                full = model(input_ids=ids).logits[0]  # [T, V]
                cache = DynamicCache(config=model.config)
                differs = False
                for t in range(ids.size(1)):
                    step = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True).logits[0, -1]
                    differs = differs or bool((step - full[t]).abs().max() > atol)
        finally:
            model.train(was)
        flags.append(differs)
    return flags


_compare_flags = flags_compare("grader.ch10.cache_differs.all_differ")


CACHE_DIFFERS = Task(
    id="ch10.cache_differs", exercise=EXERCISE, reference=cache_differs, cases=cache_cases, call=_call_lineup,
    compare=_compare_flags, contract=Contract(draw=cache_draw, examples=3, neighbours=False),
    input_names=("models", "ids"),
    mutants={
        "default_rtol": _cache_mutant(compare="allclose"),  # first: only the float64 lineup tells it from the next two
        "no_decode_step": _cache_mutant(steps=False),
        "no_eval": _cache_mutant(train_mode=True),
        "mean_over_vocab": _cache_mutant(reduce="mean"),  # before loose_tolerance: both miss the small leak there
        "loose_tolerance": _cache_mutant(atol_used=1e-2),
        "tokens_only": _cache_mutant(compare="tokens"),
    },
    course_copies=("attnlab.audit.comparisons.cached_matches", "attnlab.audit.comparisons.generate_matches",
                   "attnlab.audit.adapter.Adapter.forward"),
    alternatives=[_prefill_half, _explicit_cache],
)
