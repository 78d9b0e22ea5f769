"""Exercise 5 (exercises/src/05-is-my-model-causal.md): the prefix test and the cut test of a
whole model, each as a [T, T] map of leaks, graded on the causal GPT, on the leaky variants of
``attnlab.leaky`` and on a causal model with dropout that is handed over in training mode.
"""

from __future__ import annotations

import dataclasses

import torch

from ..causality import as_sequence, eval_mode, logits_of, vocab_size_of
from ..gpt import GPTConfig
from ..grader import Case, Contract, Problem, Task, compare_outputs, watched_models
from ..leaky import leaky_gpt
from . import case_device
from .ch4 import build_gpt, random_gpt_state

EXERCISE = "05-is-my-model-causal"
ATOL = 1e-4  # the leaks of the case models are above 1e-2, their rounding noise below 1e-5

MODELS = [  # (variant, T, V, D, H); "dropout": a causal GPT with dropout 0.2, handed over in training mode.
    # The notebook's example uses T=8.
    ("causal", 9, 29, 24, 3), ("no_mask", 7, 17, 16, 2), ("time_norm", 12, 23, 16, 4),
    ("label_in_input", 11, 31, 32, 4), ("lookahead_conv", 10, 19, 16, 2), ("merge_without_transpose", 13, 26, 24, 4),
    ("positions_from_end", 9, 21, 16, 2), ("dropout", 10, 25, 16, 2),
    # "whisper": no mask, but its attention's output scaled by 3e-4, so every later token moves the logits by
    # 1e-4 to 5e-3 (prefix and cut test), graded with atol = 5e-2: not a leak by the task's definition, yet hundreds of float32
    # rounding steps away from 0 on any numeric path. A test that ignores atol (change > 0) is caught here on
    # every machine, not only where a batch of 1 and a batch of T happen to round differently.
    ("whisper", 11, 22, 16, 2),
    # "large_logits": no mask, its attention's output scaled by 6e-3, in float64, and every logit offset by 1e4
    # (a bias on the head): each later token moves the earlier logits by about 1e-3 to 3e-2, graded with
    # atol = 1e-6. torch.allclose(a, b) with its default rtol = 1e-5 allows |a - b| up to 1e-6 + 1e-5 * 1e4 = 0.1
    # there and sees no leak; float64 rounds at 1e4 in steps of about 2e-12, far below atol.
    ("large_logits", 10, 24, 16, 2),
]
WHISPER, WHISPER_ATOL = 3e-4, 5e-2
LARGE_LEAK, LOGIT_OFFSET, LARGE_ATOL = 6e-3, 1e4, 1e-6
ATOLS = {"whisper": WHISPER_ATOL, "large_logits": LARGE_ATOL}


def model_cases(generator):
    device = case_device()
    cases = []
    for variant, T, V, D, H in MODELS:
        config = GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=H, n_embd=D)
        state = {k: v.to(device) for k, v in random_gpt_state(config, generator).items()}
        idx = torch.randint(0, V, (1, T), generator=generator)
        if variant == "no_mask":  # token 0 in the middle: a test that always writes token 0 changes nothing there
            idx[0, T // 2] = 0
        idx = idx.to(device)
        atol = ATOLS.get(variant, ATOL)
        cases.append(Case((variant, config, state, idx), {"atol": atol}, label=f"{variant}, T={T}, V={V}"))
    return cases


VARIANTS = tuple(dict.fromkeys(variant for variant, *_ in MODELS if variant not in ATOLS))
# the drawn models: the quiet leaks (whisper, large_logits) are vetted at their own sizes only: at another width a
# pair's change may fall near atol, where two right tests that write different new tokens disagree


def model_draw(d):
    """Any of the case models (causal, leaky, with dropout in training mode, quiet leaks), T from 2 to 16,
    token ids that include 0 and V - 1."""
    variant = d.choice("model", VARIANTS)
    T, V = d.size("T", 2, 12, edges=(2, 16)), d.size("V", 2, 30, edges=(3,))
    H = d.size("n_head", 1, 4, edges=(1,))
    config = GPTConfig(vocab_size=V, block_size=16, n_layer=d.size("n_layer", 1, 2, edges=(2,)), n_head=H,
                       n_embd=H * d.size("d", 2, 8, edges=(4,)))
    generator = d.generator("weights")
    state = {k: v.to(d.device) for k, v in random_gpt_state(config, generator).items()}
    idx = torch.randint(0, V, (1, T), generator=generator)
    idx[0, torch.randint(T, (2,), generator=generator)] = torch.tensor([0, V - 1])
    atol = d.choice("atol", (ATOL, 1e-3))
    return Case((variant, config, state, idx.to(d.device)), {"atol": atol},
                label=f"{variant}, T={T}, V={V}, atol={atol:g}")


def prefix_draw(d):
    """model_draw, judged by every new token at once: a leak may move an output by more than atol for one new token
    and by less for another (the task lets the learner pick the token), so an entry is fixed only where every
    new token agrees."""
    case = model_draw(d)
    case.judge = _prefix_judge(*case.args, **case.kwargs)
    return case


def _prefix_judge(variant, config, state, idx, atol):
    def judge(run):
        got = run(0)
        expected = prefix_leaks(build_model(variant, config, state, idx.device), idx, atol)
        problem = compare_outputs(expected, got)
        if problem is None or problem.key != "grader.values_exact":
            return problem
        model = build_model(variant, config, state, idx.device)
        T, V = idx.size(1), config.vocab_size
        with eval_mode(model), torch.no_grad():
            base = logits_of(model, idx)[0]  # [T, V]
            changes = []
            for token in range(V):  # every new token at every position s: [V, s, t]
                changed = idx.repeat(T, 1)
                changed[torch.arange(T), torch.arange(T)] = token
                changes.append((logits_of(model, changed) - base).abs().amax(dim=-1))
        change = torch.stack(changes).transpose(1, 2)  # [V, t, s]
        other = change.new_ones(()).bool() & (torch.arange(V, device=idx.device)[:, None, None] != idx[0][None, None, :])
        leak = (change > atol) & other  # a token equal to the one there changes nothing: not a new token
        forced_true = (leak | ~other).all(dim=0) & _future(T, idx.device)
        forced_false = ~(leak.any(dim=0)) | ~_future(T, idx.device)
        wrong = (forced_true & ~got.cpu().to(idx.device)) | (forced_false & got.cpu().to(idx.device))
        return None if not bool(wrong.any()) else problem

    return judge


def build_model(variant, config, state, device):
    """The case's model, fresh for every call (a learner's model.eval() cannot outlive the call)."""
    if variant == "dropout":
        return build_gpt(dataclasses.replace(config, dropout=0.2), state, device).train()
    model = build_gpt(config, state, device)
    if variant == "causal":
        return model
    quiet = variant in ("whisper", "large_logits")  # a mask-free model whose attention speaks softly
    with torch.random.fork_rng(devices=[]):
        model = leaky_gpt("no_mask" if quiet else variant, model).to(device).eval().requires_grad_(False)
    if quiet:
        with torch.no_grad():
            for block in model.blocks:
                block.attn.out_proj.weight.mul_(WHISPER if variant == "whisper" else LARGE_LEAK)
    if variant == "large_logits":
        model = with_logit_offset(model.double(), LOGIT_OFFSET)
    return model


def with_logit_offset(model, offset):
    """``model`` with ``offset`` added to every logit: its tied head read through a Linear with a bias."""
    weight = model.head.weight  # [V, D], the token embedding's
    head = torch.nn.Linear(weight.size(1), weight.size(0), bias=True, dtype=weight.dtype, device=weight.device)
    head.weight = weight
    with torch.no_grad():
        head.bias.fill_(offset)
    model.head = head.requires_grad_(False).train(model.training)  # in the model's mode, as its other modules
    return model


def _call_with_model(fn, variant, config, state, idx, atol):
    model = build_model(variant, config, state, idx.device)
    with watched_models(model):  # handed back in training mode, or with other weights: named
        return fn(model, idx, atol=atol)


def _future(T, device):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(diagonal=1)  # [T, T]: s > t


# --------------------------------------------------------------------------
# 1. prefix_leaks(model, idx, atol) -> [T, T] bool: entry [t, s] is True when s > t and changing
#    ONLY the token at s moves some logit at output t by more than atol (model in eval mode)


def prefix_leaks(model, idx, atol=ATOL):
    idx = as_sequence(idx)
    T, V = idx.size(1), vocab_size_of(model)
    changed = idx.repeat(T, 1)  # [T, T]: sequence s has a new token at position s
    changed[torch.arange(T), torch.arange(T)] = (idx[0] + 1) % V
    with eval_mode(model), torch.no_grad():
        base = logits_of(model, idx)  # [1, T, V]
        moved = logits_of(model, changed)  # [T (changed s), T (output t), V]
    change = (moved - base).abs().amax(dim=-1).T  # [t, s]
    return (change > atol) & _future(T, idx.device)


def _prefix_mutant(train_mode=False, compare="logits", keep="future", transpose=False, new_token="next", use_atol=True):
    def leaks(model, idx, atol=ATOL):
        T, V = idx.size(1), vocab_size_of(model)
        changed = idx.repeat(T, 1)
        changed[torch.arange(T), torch.arange(T)] = (idx[0] + 1) % V if new_token == "next" else 0
        if not train_mode:
            model.eval()
        base, moved = logits_of(model, idx), logits_of(model, changed)  # [1, T, V], [T, T, V]
        if compare == "argmax":
            change = (moved.argmax(dim=-1) != base.argmax(dim=-1)).T.float()  # [t, s]
        else:
            change = (moved - base).abs().amax(dim=-1).T
        if transpose:
            change = change.T
        ones = torch.ones(T, T, dtype=torch.bool, device=idx.device)
        region = {"future": ones.triu(diagonal=1), "with_diagonal": ones.triu(), "past": ones.tril(), "past_strict": ones.tril(diagonal=-1),
                  "previous": ones.triu(diagonal=1) & ~ones.triu(diagonal=2), "all": ones}[keep]
        return (change > (atol if use_atol else 0)) & region

    return leaks


def _prefix_default_rtol(model, idx, atol=ATOL):
    """torch.allclose(moved, base, atol=atol) per pair, its rtol left at 1e-5: at logits near 1e4 that allows a
    change of 0.1, and a leak of 1e-2 passes."""
    model.eval()
    T, V = idx.size(1), vocab_size_of(model)
    base = logits_of(model, idx)[0]  # [T, V]
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    for s in range(1, T):
        changed = idx.clone()
        changed[0, s] = (idx[0, s] + 1) % V
        moved = logits_of(model, changed)[0]
        for t in range(s):
            leaks[t, s] = not torch.allclose(moved[t], base[t], atol=atol)
    return leaks


def _loop_over_positions(model, idx, atol=ATOL):
    """Correct: one changed sequence per forward pass, any new token, a list of pairs turned into a map; the
    model's mode put back by hand."""
    was = model.training
    model.eval()
    T = idx.shape[-1]
    base = model(idx)[0][0]  # [T, V]
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    for s in range(T):
        other = idx.clone()
        other[0, s] = 0 if idx[0, s] != 0 else 1
        diff = (model(other)[0][0] - base).abs().max(dim=-1).values  # [T]
        for t in range(s):
            leaks[t, s] = bool(diff[t] > atol)
    model.train(was)
    return leaks


def _allclose_rows(model, idx, atol=ATOL):
    """Correct: torch.allclose per pair (rtol=0), with a random different token per position."""
    with eval_mode(model), torch.no_grad():
        T, V = idx.size(1), vocab_size_of(model)
        base = logits_of(model, idx)[0]
        shift = torch.randint(1, V, (T,), device=idx.device)
        leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
        for s in range(1, T):
            changed = idx.clone()
            changed[0, s] = (changed[0, s] + shift[s]) % V
            out = logits_of(model, changed)[0]
            for t in range(s):
                leaks[t, s] = not torch.allclose(out[t], base[t], rtol=0, atol=atol)
    return leaks


def _course_map(model, idx, atol=ATOL):
    """Correct: the course's dependence_map, thresholded above the diagonal."""
    from ..causality import dependence_map

    leak_map = dependence_map(model.cpu(), idx.cpu())  # [t, s], computed on the CPU
    return (leak_map > atol).triu(diagonal=1).to(idx.device)


PREFIX_LEAKS = Task(
    id="ch5.prefix_leaks", exercise=EXERCISE, reference=prefix_leaks, cases=model_cases, call=_call_with_model,
    contract=Contract(draw=prefix_draw, examples=4), input_names=("model", "config", "state", "idx"),
    mutants={
        "no_eval": _prefix_mutant(train_mode=True),
        "with_diagonal": _prefix_mutant(keep="with_diagonal"),
        "wrong_triangle": _prefix_mutant(keep="past"),
        "wrong_triangle_strict": _prefix_mutant(keep="past_strict"),
        "same_token": _prefix_mutant(new_token="zero"),
        "atol_ignored": _prefix_mutant(use_atol=False),  # before "transposed": on the cases both match, ties go to the first
        "transposed": _prefix_mutant(transpose=True),
        "previous_position_only": _prefix_mutant(keep="previous"),
        "default_rtol": _prefix_default_rtol,  # before "argmax_only": on large_logits both see nothing, ties go to the first
        "argmax_only": _prefix_mutant(compare="argmax"),
        "no_triangle": _prefix_mutant(keep="all"),
    },
    course_copies=("attnlab.causality.dependence_map", "attnlab.causality.jacobian_map", "attnlab.causality.find_leaks",
                   "attnlab.causality.assert_causal"),
    alternatives=[_loop_over_positions, _allclose_rows],
)


# --------------------------------------------------------------------------
# 2. cut_leaks(model, idx, atol) -> [T, T] bool: entry [t, s] is True when t < s and output t
#    moves by more than atol when the model sees only the tokens 0..s-1 (model in eval mode)


def cut_leaks(model, idx, atol=ATOL):
    idx = as_sequence(idx)
    T = idx.size(1)
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    with eval_mode(model), torch.no_grad():
        full = logits_of(model, idx)  # [1, T, V]
        for s in range(1, T):
            part = logits_of(model, idx[:, :s])  # [1, s, V]: the model sees tokens 0..s-1
            leaks[:s, s] = (part - full[:, :s]).abs().amax(dim=-1)[0] > atol
    return leaks


def _cut_mutant(train_mode=False, cut="before_s", rows="all", transpose=False):
    def leaks(model, idx, atol=ATOL):
        T = idx.size(1)
        out = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
        if not train_mode:
            model.eval()
        full = logits_of(model, idx)
        for s in range(1, T):
            if cut == "pad":  # same length: the tokens from s on replaced by token 0
                part = logits_of(model, torch.cat([idx[:, :s], torch.zeros_like(idx[:, s:])], dim=1))[:, :s]
            elif cut == "after_s":  # keeps the token at s
                part = logits_of(model, idx[:, :s + 1])[:, :s]
            else:
                part = logits_of(model, idx[:, :s])
            moved = (part - full[:, :s]).abs().amax(dim=-1)[0] > atol  # [s]
            if rows == "last":
                out[s - 1, s] = moved[-1]
            elif rows == "column_before":
                out[:s, s - 1] = moved
            else:
                out[:s, s] = moved
        return out.T if transpose else out

    return leaks


def _cut_default_rtol(model, idx, atol=ATOL):
    """torch.allclose(part, full, atol=atol) per cut, its rtol left at 1e-5 (a change of 0.1 allowed at logits
    near 1e4)."""
    model.eval()
    T = idx.size(1)
    full = logits_of(model, idx)[0]  # [T, V]
    leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
    for s in range(1, T):
        part = logits_of(model, idx[:, :s])[0]  # [s, V]
        for t in range(s):
            leaks[t, s] = not torch.allclose(part[t], full[t], atol=atol)
    return leaks


def _cut_list(model, idx, atol=ATOL):
    """Correct: a loop over (t, s) pairs with torch.allclose, one cut run per s, inside eval_mode."""
    T = idx.shape[1]
    leaks = [[False] * T for _ in range(T)]
    with eval_mode(model):
        full = model(idx)[0][0]  # [T, V]
        for s in range(1, T):
            part = model(idx[:, :s])[0][0]  # [s, V]
            for t in range(s):
                leaks[t][s] = not torch.allclose(part[t], full[t], rtol=0, atol=atol)
    return torch.tensor(leaks, device=idx.device)


def _course_cut_map(model, idx, atol=ATOL):
    """Correct: the course's cut_map (NaN where not measured: NaN > atol is False)."""
    from ..causality import cut_map

    return (cut_map(model.cpu(), idx.cpu()) > atol).to(idx.device)


def _cut_shortest_first(model, idx, atol=ATOL):
    """Correct: the cut for every length, compared with the full run, written as a lower-right loop."""
    with eval_mode(model), torch.no_grad():
        T = idx.size(1)
        full = logits_of(model, idx)[0]
        leaks = torch.zeros(T, T, dtype=torch.bool, device=idx.device)
        for length in range(T - 1, 0, -1):
            diff = (logits_of(model, idx[:, :length])[0] - full[:length]).abs()  # [length, V]
            leaks[:length, length] = (diff > atol).any(dim=-1)
    return leaks


CUT_LEAKS = Task(
    id="ch5.cut_leaks", exercise=EXERCISE, reference=cut_leaks, cases=model_cases, call=_call_with_model,
    contract=Contract(draw=model_draw, examples=4), input_names=("model", "config", "state", "idx"),
    mutants={
        "no_eval": _cut_mutant(train_mode=True),
        "keeps_token_s": _cut_mutant(cut="after_s"),
        "pads_instead_of_cutting": _cut_mutant(cut="pad"),
        "last_output_only": _cut_mutant(rows="last"),
        "column_of_last_kept": _cut_mutant(rows="column_before"),
        "transposed": _cut_mutant(transpose=True),
        "default_rtol": _cut_default_rtol,
    },
    course_copies=("attnlab.causality.cut_map", "attnlab.causality.find_leaks", "attnlab.causality.assert_causal"),
    alternatives=[_cut_list, _cut_shortest_first],
)

TASKS = [PREFIX_LEAKS, CUT_LEAKS]
