"""Exercise 1 (exercises/src/01-causal-mask.md): the causal mask, masked softmax, the
leak of a 0 fill, and the three mask conventions.

Each task: a reference, a case generator (sizes other than the notebook's
worked examples), mutants (known mistakes, named in messages.toml under
``grader.mutant.<task id>.<name>``) and alternative correct solutions (the
tests give each full marks).
"""

from __future__ import annotations

import torch

from ..grader import Case, Contract, Task
from . import case_device, random_allowed

EXERCISE = "01-causal-mask"
NEG_INF = float("-inf")


# --------------------------------------------------------------------------
# 1. build_causal_mask(T) -> [T, T] bool, True = may attend (the SDPA convention)


def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def causal_mask_cases(generator):
    return [Case((T,), label=f"T={T}") for T in (1, 5, 70, 11)]  # T = 70: above any 64 x 64 mask kept around


def causal_mask_draw(d):
    T = d.size("T", 1, 300, edges=(1, 2, 65, 300))  # above any 64 or 256 mask kept and sliced
    return Case((T,))


CAUSAL_MASK = Task(
    id="ch1.causal_mask", exercise=EXERCISE, reference=causal_mask, cases=causal_mask_cases,
    contract=Contract(draw=causal_mask_draw),
    mutants={
        "diagonal": lambda T: torch.ones(T, T, dtype=torch.bool).tril(diagonal=-1),
        "inverted": lambda T: torch.ones(T, T, dtype=torch.bool).triu(diagonal=1),
        "transposed": lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
        "no_mask": lambda T: torch.ones(T, T, dtype=torch.bool),
    },
    course_copies=("attnlab.masks.causal_allowed", "attnlab.masks.causal_allowed_from_indices",
                   "attnlab.mask_builder.build_mask"),
    alternatives=[
        lambda T: torch.arange(T)[None, :] <= torch.arange(T)[:, None],
        lambda T: ~torch.ones(T, T, dtype=torch.bool).triu(diagonal=1),
        lambda T: torch.tril(torch.ones(T, T)).bool(),
        lambda T: torch.tensor([[j <= i for j in range(T)] for i in range(T)], dtype=torch.bool).reshape(T, T),
    ],
)


# --------------------------------------------------------------------------
# 2. masked_softmax(scores, allowed) -> weights, blocked entries exactly 0


def masked_softmax(scores, allowed):
    return scores.masked_fill(~allowed, NEG_INF).softmax(dim=-1)


def score_cases(generator):
    device = case_device()
    cases = []
    for shape, allowed, scale, dtype, label in [
        ((5, 5), torch.ones(5, 5, dtype=torch.bool).tril(), 3.0, torch.float32, "T=5"),
        ((2, 3, 7, 7), torch.ones(7, 7, dtype=torch.bool).tril(), 3.0, torch.float32, "B=2, H=3, T=7"),
        ((4, 6), random_allowed(4, 6, generator), 3.0, torch.float64, "T_q=4, T_kv=6, float64"),
        ((2, 9, 9), torch.ones(9, 9, dtype=torch.bool).tril(), 300.0, torch.float32, "B=2, T=9, scores*300"),
    ]:
        scores = torch.randn(shape, generator=generator) * scale
        if scale > 100:  # scores in the hundreds (float32 exp overflows), the blocked ones far above the rest
            scores = scores.masked_fill(~allowed, 1000.0)
        cases.append(Case((scores.to(dtype).to(device), allowed.to(device)), label=label))
    return cases


FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # the last (the "high" input) float64:
# the gradients are compared there, at the largest scores


def drawn_allowed(d, T_q, T_kv):
    """[T_q, T_kv] bool for a drawn input: causal (lower right), random, or one key per row; every row reads a key."""
    kind = d.choice("mask", ("causal", "random", "one_key"))
    generator = d.generator("allowed")
    if kind == "causal":
        allowed = torch.ones(T_q, T_kv, dtype=torch.bool).tril(diagonal=T_kv - T_q) | (torch.arange(T_kv) == 0)
    elif kind == "random":
        allowed = random_allowed(T_q, T_kv, generator)
    else:
        allowed = torch.zeros(T_q, T_kv, dtype=torch.bool)
        allowed[torch.arange(T_q), torch.randint(T_kv, (T_q,), generator=generator)] = True
    return d.layout("allowed", allowed)


def scores_draw(d):
    """Scores [*lead, T_q, T_kv] in any float dtype and layout, up to a thousand (float32 exp overflows at 89,
    float16's at 11), the blocked entries sometimes far above the rest; the mask [T_q, T_kv]."""
    lead = d.choice("lead", ((), (2,), (2, 3)))
    T_q, T_kv = d.size("T_q", 1, 40, edges=(1, 300)), d.size("T_kv", 1, 40, edges=(1, 300))
    dtype = d.choice("dtype", FLOATS)
    scale = d.choice("scale", (1.0, 30.0, 1000.0))
    if dtype in (torch.float16, torch.bfloat16):  # their steps near 1000 are 0.5 to 8: any arithmetic on the scores
        scale = 1.0  # but softmax's own (float32 inside) would be off; float16 is here for its range and fills
    allowed = drawn_allowed(d, T_q, T_kv)
    scores = torch.randn(*lead, T_q, T_kv, generator=d.generator("scores"), dtype=torch.float64) * scale
    if d.flag("blocked_high"):
        scores = scores.masked_fill(~allowed.cpu(), 3 * scale)
    return Case((d.layout("scores", scores.to(dtype)), allowed))


def _manual_softmax(scores, allowed):
    """Right values, but not a right answer since issue 50: exp of a blocked score far above the allowed ones
    overflows before the mask, and its gradient is 0 * inf = NaN (tests/grader_answers.py)."""
    top = scores.masked_fill(~allowed, NEG_INF).amax(dim=-1, keepdim=True)  # the maximum over the allowed keys
    e = (scores - top).exp().masked_fill(~allowed, 0.0)
    return e / e.sum(dim=-1, keepdim=True)


def _no_max_shift(s, a):  # exp of the raw scores: overflows to inf above about 88 in float32
    e = s.exp().masked_fill(~a, 0.0)
    return e / e.sum(dim=-1, keepdim=True)


def _max_over_blocked(s, a):  # the maximum taken over the blocked keys too: the allowed ones underflow to 0
    e = (s - s.amax(dim=-1, keepdim=True)).exp().masked_fill(~a, 0.0)
    return e / e.sum(dim=-1, keepdim=True)


MASKED_SOFTMAX = Task(
    id="ch1.masked_softmax", exercise=EXERCISE, reference=masked_softmax, cases=score_cases,
    contract=Contract(draw=scores_draw, grads=("scores",)),
    mutants={
        "zero_fill": lambda s, a: s.masked_fill(~a, 0.0).softmax(dim=-1),
        "inverted": lambda s, a: s.masked_fill(a, NEG_INF).softmax(dim=-1),
        "after_softmax": lambda s, a: s.softmax(dim=-1) * a,
        "wrong_axis": lambda s, a: s.masked_fill(~a, NEG_INF).softmax(dim=-2),
        "no_mask": lambda s, a: s.softmax(dim=-1),
        "no_max_shift": _no_max_shift,
        "max_over_blocked": _max_over_blocked,
    },
    course_copies=("attnlab.attention.masked_softmax", "attnlab.attention.mask_scores"),
    alternatives=[
        lambda s, a: torch.where(a, s, NEG_INF).softmax(dim=-1),
        lambda s, a: (s + torch.zeros_like(s).masked_fill(~a, NEG_INF)).softmax(dim=-1),
        lambda s, a: s.masked_fill(~a, torch.finfo(s.dtype).min).softmax(dim=-1),
        lambda s, a: torch.nn.functional.softmax(s.masked_fill(~a, NEG_INF), dim=-1),
    ],
)


# --------------------------------------------------------------------------
# 3. future_weight(weights, allowed) -> [..., T_q]: the weight each query row puts on
#    blocked keys (what a 0 fill leaks; exactly 0 with -inf)


def future_weight(weights, allowed):
    return (weights * ~allowed).sum(dim=-1)


def weight_cases(generator):
    device = case_device()
    cases = []
    for shape, allowed, fill, label in [
        ((5, 5), torch.ones(5, 5, dtype=torch.bool).tril(), 0.0, "T=5, fill=0"),
        ((2, 7, 7), torch.ones(7, 7, dtype=torch.bool).tril(), NEG_INF, "B=2, T=7, fill=-inf"),
        ((3, 4, 8), random_allowed(4, 8, generator), None, "B=3, T_q=4, T_kv=8"),
        ((2, 3, 9, 9), torch.ones(9, 9, dtype=torch.bool).tril(), 0.0, "B=2, H=3, T=9, fill=0"),
    ]:
        scores = torch.randn(shape, generator=generator) * 2
        if fill is not None:
            scores = scores.masked_fill(~allowed, fill)
        cases.append(Case((scores.softmax(dim=-1).to(device), allowed.to(device)), label=label))
    return cases


def weights_draw(d):
    """Attention weights [*lead, T_q, T_kv] (rows sum to 1), the mask [T_q, T_kv], up to 4097 keys."""
    lead = d.choice("lead", ((), (3,), (2, 2)))
    T_q, T_kv = d.size("T_q", 1, 40, edges=(1, 7)), d.size("T_kv", 1, 60, edges=(1, 4097))
    dtype = d.choice("dtype", (torch.float32, torch.float64, torch.float16))
    allowed = drawn_allowed(d, T_q, T_kv)
    scores = torch.randn(*lead, T_q, T_kv, generator=d.generator("scores"), dtype=torch.float64) * 3
    if d.flag("zero_fill"):  # the leak of a 0 fill: weight on the future
        scores = scores.masked_fill(~allowed.cpu(), 0.0)
    return Case((d.layout("weights", scores.softmax(dim=-1).to(dtype)), allowed))


FUTURE_WEIGHT = Task(
    id="ch1.future_weight", exercise=EXERCISE, reference=future_weight, cases=weight_cases,
    contract=Contract(draw=weights_draw),
    mutants={
        "allowed_weight": lambda w, a: (w * a).sum(dim=-1),
        "wrong_axis": lambda w, a: (w * ~a).sum(dim=-2),
        "whole_matrix": lambda w, a: (w * ~a).sum(dim=(-2, -1)),
    },
    alternatives=[
        lambda w, a: w.masked_fill(a, 0.0).sum(dim=-1),
        lambda w, a: 1 - (w * a).sum(dim=-1),
        lambda w, a: torch.einsum("...qk,qk->...q", w, (~a).to(w.dtype)),
        lambda w, a: torch.where(a, torch.zeros_like(w), w).sum(-1),
    ],
)


# --------------------------------------------------------------------------
# 4. convert_mask(mask, source, target, dtype=torch.float32) between
#    "sdpa" (bool, True = may attend), "mha" (bool, True = blocked) and
#    "additive" (float, 0 = may attend, -inf or a very negative number = blocked)

BLOCKED_AT_MOST = -1e4  # an additive entry this low is as good as -inf (its weight underflows to 0)


def _allowed(mask, source):
    if source == "sdpa":
        return mask
    if source == "mha":
        return ~mask
    return mask == 0


def _from_allowed(allowed, target, dtype):
    if target == "sdpa":
        return allowed
    if target == "mha":
        return ~allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, NEG_INF)


def convert_mask(mask, source, target, dtype=torch.float32):
    return _from_allowed(_allowed(mask, source), target, dtype)


def convert_cases(generator):
    device = case_device()
    causal5 = torch.ones(5, 5, dtype=torch.bool).tril()
    specs = [
        ("sdpa", "mha", causal5, torch.float32, None, "sdpa -> mha, T=5"),
        ("mha", "sdpa", ~random_allowed(4, 6, generator), torch.float32, None, "mha -> sdpa, 4x6"),
        ("sdpa", "additive", random_allowed(6, 6, generator), torch.float32, None, "sdpa -> additive, 6x6"),
        ("mha", "additive", ~causal5, torch.float16, None, "mha -> additive, T=5, float16"),
        ("additive", "sdpa", random_allowed(3, 7, generator), torch.float32, NEG_INF,
         "additive (fill=-inf) -> sdpa, 3x7"),
        ("additive", "mha", random_allowed(6, 6, generator), torch.float32, torch.finfo(torch.float32).min,
         "additive (fill=finfo.min) -> mha, 6x6"),
    ]
    cases = []
    for source, target, mask, dtype, fill, label in specs:
        if fill is not None:  # an additive source mask, built from the allowed pattern
            mask = torch.zeros(mask.shape).masked_fill(~mask, fill)
        cases.append(Case((mask.to(device), source, target), {"dtype": dtype}, label=label))
    return cases


def _call_converter(fn, mask, source, target, dtype=torch.float32):
    """Additive outputs: entries at or below -1e4 count as -inf (a large finite fill is fine)."""
    out = fn(mask, source, target, dtype=dtype)
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        out = out.masked_fill(out <= BLOCKED_AT_MOST, NEG_INF)
    return out


def _mutant_converter(to_allowed=_allowed, from_allowed=_from_allowed):
    return lambda mask, source, target, dtype=torch.float32: from_allowed(to_allowed(mask, source), target, dtype)


def _copied(mask, source, target, dtype=torch.float32):
    if {source, target} == {"sdpa", "mha"}:
        return mask
    return convert_mask(mask, source, target, dtype)


def _where_converter(mask, source, target, dtype=torch.float32):
    if source == "additive":
        allowed = mask > BLOCKED_AT_MOST
    else:
        allowed = mask if source == "sdpa" else mask.logical_not()
    if target == "additive":
        return torch.where(allowed, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)
    return allowed if target == "sdpa" else allowed.logical_not()


def convert_draw(d):
    """Any source and target (the same one too, with a dtype), any shape, an additive source filled with
    -inf, finfo.min or -1e4, a target dtype of float16 or bfloat16 as well."""
    source, target = d.choice("source", ("sdpa", "mha", "additive")), d.choice("target", ("sdpa", "mha", "additive"))
    shape = d.choice("shape", ((5, 5), (1, 1), (3, 7), (2, 1, 4, 4), (70, 70)))
    dtype = d.choice("dtype", (torch.float32, torch.float16, torch.bfloat16, torch.float64))
    allowed = torch.rand(shape, generator=d.generator("mask")) < 0.6
    if source == "additive":
        fill = d.choice("fill", (float("-inf"), "finfo.min", -1e4))
        source_dtype = d.choice("source_dtype", (torch.float32, torch.float64, torch.float16))  # "high": not dtype=
        fill = torch.finfo(source_dtype).min if fill == "finfo.min" else fill
        mask = torch.zeros(shape, dtype=source_dtype).masked_fill(~allowed, fill)
    else:
        mask = allowed if source == "sdpa" else ~allowed
    return Case((d.layout("mask", mask), source, target), {"dtype": dtype})


CONVERT_MASK = Task(
    id="ch1.convert_mask", exercise=EXERCISE, reference=convert_mask, cases=convert_cases, call=_call_converter,
    contract=Contract(draw=convert_draw), input_names=("mask", "source", "target"),
    course_copies=("attnlab.masks.additive_mask", "attnlab.masks.to_blocked", "attnlab.masks.to_allowed"),
    mutants={
        "copied": _copied,
        "additive_inverted": _mutant_converter(
            from_allowed=lambda a, t, d: _from_allowed(~a if t == "additive" else a, t, d)),
        "float_cast": _mutant_converter(
            from_allowed=lambda a, t, d: a.to(d) if t == "additive" else _from_allowed(a, t, d)),
        "zero_is_blocked": _mutant_converter(
            to_allowed=lambda m, s: m != 0 if s == "additive" else _allowed(m, s)),
        "isinf_only": _mutant_converter(
            to_allowed=lambda m, s: ~torch.isinf(m) if s == "additive" else _allowed(m, s)),
    },
    alternatives=[
        _where_converter,
        lambda mask, source, target, dtype=torch.float32: (
            torch.full(mask.shape, NEG_INF, dtype=dtype, device=mask.device).masked_fill(
                mask if source == "sdpa" else ~mask if source == "mha" else mask == 0, 0.0)
            if target == "additive" else
            (mask if source == "sdpa" else ~mask if source == "mha" else mask == 0) ^ (target == "mha")),
    ],
)

TASKS = [CAUSAL_MASK, MASKED_SOFTMAX, FUTURE_WEIGHT, CONVERT_MASK]
