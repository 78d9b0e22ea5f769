"""Exercise 10, task 2: the check that finds the leaking models among five (chapter 5's prefix test)."""

from __future__ import annotations

import torch

from ...causality import eval_mode
from ...grader import Case, Contract, Problem, Task, compare_outputs, note, watched_models
from .models import ATOL, EXERCISE, POOL, VOCAB, build

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


LINEUPS = [  # five models per case, the leaking ones in other places each time; (models, T, atol)
    (["llama", "own_mask", "gpt2_dropout", "small_leak", "gemma3"], 6, ATOL),
    (["small_leak", "gpt2_dropout", "peeks_mid", "peeks_far", "own_mask"], 8, ATOL),
    (["gpt2_dropout", "drops_mask", "own_mask", "gemma3", "small_leak"], 7, 1e-3),  # the small leak is below atol
    (["own_mask", "small_leak", "peeks_late", "peeks_once", "gpt2_dropout"], 5, ATOL),
    (["llama_large", "medium_leak_large", "gpt2_dropout_large", "drops_mask_large", "gemma3_large"], 6, ATOL),
    # atol between the small leak's largest change (about 8e-5) and its mean over the vocabulary (about 3e-5):
    # a test that averages |change| over the logits calls it causal
    (["small_leak", "gemma3", "own_mask", "llama", "gpt2_dropout"], 7, 5e-5),
]


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
    """The learner's function on fresh models; the list handed over must come back as it was (not emptied,
    reordered or refilled: it is the caller's)."""
    models = [build(spec) for spec in specs]
    given = list(models)
    with watched_models(*models):
        out = fn(models, ids, atol=atol)
    if len(models) != len(given) or any(a is not b for a, b in zip(models, given)):
        note(Problem("grader.changed_input", {"name": "models"}))
    return out


def _lineup_mutant(positions="before", atol_used=None, train_mode=False, padding=0, new_token="next", reduce="max"):
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
            change = (run(changed) - run(ids)).abs()  # [s, t, V]
            change = change.amax(dim=-1) if reduce == "max" else change.mean(dim=-1)  # [s, t]
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
    """Correct: chapter 5's dependence_map through a one-line adapter (in eval_mode: a lambda has no mode)."""
    from ...causality import dependence_map

    flags = []
    for m in models:
        with eval_mode(m):
            flags.append(bool((dependence_map(lambda x: m(input_ids=x).logits, ids) > atol).triu(diagonal=1).any()))
    return flags


def _lineup_one_at_a_time(models, ids, atol=ATOL):
    """Correct: one changed sequence per forward pass, the earlier outputs compared with allclose."""
    flags = []
    for model in models:
        with eval_mode(model):
            base = model(input_ids=ids).logits[0]
            leak = False
            for s in range(1, ids.size(1)):
                other = ids.clone()
                other[0, s] = 1 if ids[0, s] != 1 else 2
                out = model(input_ids=other).logits[0]
                leak = leak or not torch.allclose(out[:s], base[:s], rtol=0, atol=atol)
        flags.append(leak)
    return flags


def flags_compare(all_flagged_key: str):
    """As the default comparison of lists of flags; an answer that flags every model, the right ones too, gets
    ``all_flagged_key`` (task 2: every model called leaky; task 3: every model's cache called different)."""
    def compare(expected, got):
        problem = compare_outputs(expected, got)
        if (problem is not None and isinstance(got, (list, tuple)) and len(got) == len(expected) and not all(expected)
                and all(flag is True or (isinstance(flag, torch.Tensor) and flag.numel() == 1 and bool(flag))
                        for flag in got)):
            return Problem(all_flagged_key, {"n": len(got)}, detail=problem)
        return problem

    return compare


_compare_flags = flags_compare("grader.ch10.leaky_models.all_leaky")


SMALL_POOL = ("llama", "gemma3", "mistral", "gpt2_dropout", "own_mask", "small_leak", "drops_mask", "peeks_once",
              "peeks_mid", "peeks_late", "peeks_far")
LARGE_POOL = ("llama_large", "gemma3_large", "medium_leak_large", "drops_mask_large", "gpt2_dropout_large")


def lineup_draw(d):
    """Three models of the pool in any order (causal ones, leaky ones, one with dropout in training mode; or
    three float64 models with logits near 1e4), T from 4 to 9, token ids that include 0 and V - 1, an atol of
    1e-5 or 1e-3 (far from the small leak's change, which depends on the new token a test writes; the lineup at
    5e-5 of the cases is vetted for the task's own new token)."""
    pool = d.choice("pool", ("small", "large"))
    names = SMALL_POOL if pool == "small" else LARGE_POOL
    picked = [d.choice(f"model{n}", names) for n in range(3)]
    T, atol = d.size("T", 4, 7, edges=(4, 9)), d.choice("atol", (ATOL, 1e-3))
    generator = d.generator("ids")
    ids = torch.randint(1, VOCAB, (1, T), generator=generator)
    ids[0, 1], ids[0, -2] = 0, VOCAB - 1
    specs = tuple((*POOL[label][:2], 20, POOL[label][2]) for label in picked)
    return Case((specs, ids), {"atol": atol}, label=f"{', '.join(picked)}; T={T}, atol={atol:g}")


LEAKY_MODELS = Task(
    id="ch10.leaky_models", exercise=EXERCISE, reference=leaky_models, cases=lineup_cases, call=_call_lineup,
    contract=Contract(draw=lineup_draw, examples=3, neighbours=False), input_names=("models", "ids"),
    compare=_compare_flags,
    mutants={
        "compares_after_change": _lineup_mutant(positions="after"),
        "mean_over_vocab": _lineup_mutant(reduce="mean"),  # before loose_tolerance: both miss the small leak there
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
