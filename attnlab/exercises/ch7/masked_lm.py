"""Exercise 7, tasks 3 and 4: BERT's 80/10/10 rule (``bert_corrupt``, graded by its statistics,
since it is random) and the MLM loss on the chosen positions only (``mlm_loss``).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from ...grader import Case, Problem, Task, note
from ...mlm import mlm_corrupt
from .. import case_device

EXERCISE = "07-bidirectional-attention"
IGNORE = -100  # F.cross_entropy's ignore_index: no loss at this position


# --------------------------------------------------------------------------
# 3. bert_corrupt(ids, mask_id, vocab_size, generator) -> (inputs, labels)
#    Each position is chosen with probability 15%; a chosen token becomes mask_id (80%),
#    a random token of the vocabulary (10%) or stays (10%); labels hold the original
#    token at chosen positions and -100 elsewhere. Random, so graded by its statistics.

RATE, SHARES = 0.15, (0.8, 0.1, 0.1)  # chosen; of the chosen: [MASK], random, unchanged
Z = 6.0  # a share may stray this many standard errors from its expected value
LARGE = 4000  # from this many positions on, the shares are checked
SOME = 20  # from this many positions on, "every position chosen" counts as a mistake


def bert_corrupt(ids, mask_id, vocab_size, generator):
    chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < RATE
    action = torch.rand(ids.shape, generator=generator, device=ids.device)
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (action < 0.8), mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, IGNORE)
    return inputs, labels


def _call_corrupt(fn, ids, mask_id, vocab_size):
    """A generator seeded from the case's seed: the same draws on every run, other draws per seed."""
    seed = int(torch.randint(0, 2**62, ()).item())  # task.run seeds the global RNG first
    torch.manual_seed(int.from_bytes(os.urandom(7), "little"))  # draws from the global RNG differ per call
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    out = fn(ids, mask_id, vocab_size, generator)
    if generator.initial_seed() != seed:  # generator.manual_seed(...) inside: every call draws alike
        note(Problem("grader.ch7.bert_corrupt.reseeds_generator"))
    return out


def _percent(x):
    """A share in percent, as a number: each language's message formats it (de "80.0 %" with
    its space, en and zh "80.0%")."""
    return 100 * float(x)


def _off(share, expected, n):
    """Is ``share`` (of ``n`` draws) further than Z standard errors from ``expected``?"""
    return abs(float(share) - expected) > Z * math.sqrt(max(expected * (1 - expected), 1e-12) / n)


def _structure(ids, got):
    """None when ``got`` is two long tensors shaped like ``ids``; else what is wrong."""
    if got is None:
        return Problem("grader.none")
    if not isinstance(got, (tuple, list)):
        return Problem("grader.wrong_type", {"expected": "tuple", "got": type(got).__name__})
    if len(got) != 2:
        return Problem("grader.length", {"expected": 2, "got": len(got)})
    for n, g in enumerate(got):
        inner = None
        if not isinstance(g, torch.Tensor):
            inner = Problem("grader.not_tensor", {"got": type(g).__name__})
        elif g.shape != ids.shape:
            inner = Problem("grader.shape", {"expected": str(list(ids.shape)), "got": str(list(g.shape))})
        elif g.dtype != torch.long:
            inner = Problem("grader.dtype", {"expected": str(torch.long), "got": str(g.dtype)})
        elif g.device != ids.device:
            inner = Problem("grader.device", {"expected": str(ids.device), "got": str(g.device)})
        if inner is not None:
            return Problem("grader.returned_item", {"n": n + 1, "total": 2}, detail=inner)
    return None


def _first(where, *tensors):
    """The index of the first True in ``where`` and the values of ``tensors`` there."""
    flat = int(where.flatten().nonzero()[0])
    index = "[" + ", ".join(str(int(c)) for c in torch.unravel_index(torch.tensor(flat), where.shape)) + "]"
    return index, [int(t.flatten()[flat]) for t in tensors]


MUTANT = "grader.mutant.ch7.bert_corrupt."


def _bert_judge(ids, mask_id, vocab_size, seed):
    ids_cpu = ids.cpu()
    N = ids.numel()

    def judge(run):
        got = run(seed)
        problem = _structure(ids, got)
        if problem is not None:
            return problem
        inputs, labels = (g.cpu() for g in got)
        labelled = labels != IGNORE  # the chosen positions, as the labels say
        changed = inputs != ids_cpu
        if N >= SOME and labelled.all():
            return Problem(MUTANT + "labels_everywhere")
        wrong_label = labelled & (labels != ids_cpu)
        if wrong_label.any():
            index, (expected, label) = _first(wrong_label, ids_cpu, labels)
            detail = Problem("grader.mlm.label", {"index": index, "expected": expected, "got": label})
            if bool((labels[wrong_label] == inputs[wrong_label]).all()):
                return Problem(MUTANT + "labels_after_corruption", detail=detail)
            return detail
        unlabelled_changed = ~labelled & changed
        if unlabelled_changed.any():
            index, (expected, token) = _first(unlabelled_changed, ids_cpu, inputs)
            detail = Problem("grader.mlm.unchosen_changed", {"index": index, "expected": expected, "got": token})
            if N >= LARGE:
                share_labelled = labelled.double().mean()
                share_changed = unlabelled_changed.sum() / (~labelled).sum()
                if not _off(share_labelled, 1 - RATE, N):
                    return Problem(MUTANT + "inverted_labels", detail=detail)
                if not _off(share_changed, SHARES[1], int((~labelled).sum())):
                    return Problem(MUTANT + "random_unchosen", detail=detail)
            return detail
        outside = (inputs < 0) | (inputs >= vocab_size)
        if outside.any():
            index, (token,) = _first(outside, inputs)
            return Problem("grader.mlm.outside_vocabulary", {"index": index, "got": token, "last": vocab_size - 1})
        if N < LARGE:
            return None
        rate = labelled.double().mean()
        if _off(rate, RATE, N):
            detail = Problem("grader.mlm.rate", {"expected": _percent(RATE), "got": _percent(rate)})
            if not _off(rate, 0.5, N):
                return Problem(MUTANT + "rate_half", detail=detail)
            return detail
        n = int(labelled.sum())
        masked = (inputs[labelled] == mask_id).double().mean()
        kept = (inputs[labelled] == ids_cpu[labelled]).double().mean()
        randomized = 1 - masked - kept
        # a random token is mask_id or the original token with probability 1 / vocab_size each
        expected = (SHARES[0] + SHARES[1] / vocab_size, SHARES[1] * (1 - 2 / vocab_size),
                    SHARES[2] + SHARES[1] / vocab_size)
        if any(_off(s, e, n) for s, e in zip((masked, randomized, kept), expected)):
            detail = Problem("grader.mlm.shares", {"masked": _percent(masked), "random": _percent(randomized),
                                                   "kept": _percent(kept)})
            if not _off(masked, 1.0 - 1e-3, n):
                return Problem(MUTANT + "all_mask", detail=detail)
            return detail
        split = _split_by_position(inputs, labelled, ids_cpu, mask_id, vocab_size)
        if split is not None:
            return split
        return _reproducible(run, seed, ids, inputs, labels)

    return judge


def _reproducible(run, seed, ids, inputs, labels):
    """The same seed gives the same result (the generator is used), another seed another one."""
    same = run(seed)
    if _structure(ids, same) is None and not (torch.equal(same[0].cpu(), inputs) and torch.equal(same[1].cpu(), labels)):
        return Problem(MUTANT + "generator_ignored")
    again = run(seed + 1)
    if _structure(ids, again) is None and torch.equal(again[1].cpu() != IGNORE, labels != IGNORE):
        return Problem("grader.mlm.not_random")
    return None


def _split_by_position(inputs, labelled, ids, mask_id, vocab_size, parts=4):
    """The 80/10/10 shares in each quarter of the positions (in reading order, and along the
    sequence for a batch): a split that follows the position is right overall, wrong here."""
    expected = (SHARES[0] + SHARES[1] / vocab_size, SHARES[1] * (1 - 2 / vocab_size), SHARES[2] + SHARES[1] / vocab_size)
    N = ids.numel()
    flat_position = torch.arange(N).view(ids.shape)
    groups = [(flat_position * parts // N == g, f"{g * N // parts} .. {(g + 1) * N // parts - 1}") for g in range(parts)]
    if ids.dim() == 2:
        T = ids.size(1)
        column = torch.arange(T).expand_as(ids)
        groups += [(column * parts // T == g, f"[:, {g * T // parts} .. {(g + 1) * T // parts - 1}]") for g in range(parts)]
    for where, name in groups:
        chosen = labelled & where
        n = int(chosen.sum())
        if n == 0:
            continue
        masked = (inputs[chosen] == mask_id).double().mean()
        kept = (inputs[chosen] == ids[chosen]).double().mean()
        shares = (masked, 1 - masked - kept, kept)
        if any(_off(s, e, n) for s, e in zip(shares, expected)):
            return Problem(MUTANT + "split_by_position", detail=Problem("grader.mlm.shares_at", {
                "where": name, "masked": _percent(shares[0]), "random": _percent(shares[1]), "kept": _percent(shares[2])}))
    return None


BERT_SIZES = [((2, 24), 30, 3), ((40,), 50, 1), ((64, 128), 30, 4), ((16, 384), 1000, 103), ((4096,), 100, 0)]
# (shape of ids, vocab_size, mask_id); the notebook shows a sentence of the course's tokenizer


def bert_cases(generator):
    cases = []
    for n, (shape, vocab_size, mask_id) in enumerate(BERT_SIZES):
        ids = torch.randint(0, vocab_size - 1, shape, generator=generator)
        ids = ids + (ids >= mask_id).long()  # every token but mask_id
        ids = ids.to(case_device())
        cases.append(Case((ids, mask_id, vocab_size), seed=20 + n, judge=_bert_judge(ids, mask_id, vocab_size, 20 + n),
                          label=f"ids {list(shape)}, vocab_size={vocab_size}, mask_id={mask_id}"))
    return cases


def _corrupt_mutant(rate=RATE, masked=0.8, random_everywhere=False, labels="chosen"):
    def corrupt(ids, mask_id, vocab_size, generator):
        chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < rate
        action = torch.rand(ids.shape, generator=generator, device=ids.device)
        random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator, device=ids.device)
        inputs = torch.where(chosen & (action < masked), mask_id, ids)
        randomized = (action >= masked) & (action < masked + 0.1)
        inputs = torch.where(randomized if random_everywhere else chosen & randomized, random_ids, inputs)
        label = {"chosen": torch.where(chosen, ids, IGNORE), "everywhere": ids.clone(),
                 "inverted": torch.where(chosen, IGNORE, ids), "corrupted": torch.where(chosen, inputs, IGNORE)}
        return inputs, label[labels]

    return corrupt


def _split_in_order(ids, mask_id, vocab_size, generator):
    """Wrong: the chosen positions are random, but the first 80% of them (in reading order) get
    [MASK], the next 10% a random token, the last 10% stay."""
    chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < RATE
    rank = chosen.flatten().cumsum(0).view(ids.shape) - 1  # 0, 1, ... over the chosen positions
    n = max(int(chosen.sum()), 1)
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (rank < 0.8 * n), mask_id, ids)
    inputs = torch.where(chosen & (rank >= 0.8 * n) & (rank < 0.9 * n), random_ids, inputs)
    return inputs, torch.where(chosen, ids, IGNORE)


def _clock_seeded(ids, mask_id, vocab_size, generator):
    """Wrong: right statistics, but its own generator seeded from the clock."""
    import time

    own = torch.Generator(device=ids.device).manual_seed(time.perf_counter_ns())
    return bert_corrupt(ids, mask_id, vocab_size, own)


def _course_function(ids, mask_id, vocab_size, generator):
    """Correct: the course's attnlab.mlm.mlm_corrupt (it draws on the CPU)."""
    seed = int(torch.randint(0, 2**62, (), generator=generator, device=ids.device))
    inputs, labels, _ = mlm_corrupt(ids.cpu(), mask_id, vocab_size, generator=torch.Generator().manual_seed(seed))
    return inputs.to(ids.device), labels.to(ids.device)


def _bernoulli(ids, mask_id, vocab_size, generator):
    """Correct, the way Hugging Face's DataCollatorForLanguageModeling draws: three coin flips."""
    probability = torch.full(ids.shape, RATE, device=ids.device)
    chosen = torch.bernoulli(probability, generator=generator).bool()
    masked = torch.bernoulli(torch.full_like(probability, 0.8), generator=generator).bool() & chosen
    randomized = torch.bernoulli(torch.full_like(probability, 0.5), generator=generator).bool() & chosen & ~masked
    labels = ids.clone()
    labels[~chosen] = IGNORE
    inputs = ids.clone()
    inputs[masked] = mask_id
    inputs[randomized] = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)[randomized]
    return inputs, labels


def _exact_counts(ids, mask_id, vocab_size, generator):
    """Correct: exactly 15% of the positions, split exactly 80/10/10, by a random permutation."""
    flat = ids.flatten()
    order = torch.randperm(flat.numel(), generator=generator, device=ids.device)
    n = round(RATE * flat.numel())
    chosen = order[:n]
    n_mask, n_random = round(0.8 * n), round(0.1 * n)
    inputs, labels = flat.clone(), torch.full_like(flat, IGNORE)
    labels[chosen] = flat[chosen]
    inputs[chosen[:n_mask]] = mask_id
    random_positions = chosen[n_mask:n_mask + n_random]
    inputs[random_positions] = torch.randint(vocab_size, (n_random,), generator=generator, device=ids.device)
    return inputs.view_as(ids), labels.view_as(ids)


def _multinomial(ids, mask_id, vocab_size, generator):
    """Correct: one categorical draw per position over (not chosen, [MASK], random, unchanged)."""
    probs = torch.tensor([1 - RATE, RATE * 0.8, RATE * 0.1, RATE * 0.1], device=ids.device)
    what = torch.multinomial(probs, ids.numel(), replacement=True, generator=generator).view(ids.shape)
    random_ids = torch.randint_like(ids, vocab_size, generator=generator)
    inputs = torch.where(what == 1, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(what == 2, random_ids, inputs)
    return inputs, ids.masked_fill(what == 0, IGNORE)


BERT_CORRUPT = Task(
    id="ch7.bert_corrupt", exercise=EXERCISE, reference=bert_corrupt, cases=bert_cases, call=_call_corrupt,
    mutants={
        "labels_everywhere": _corrupt_mutant(labels="everywhere"),
        "all_mask": _corrupt_mutant(masked=1.0),
        "rate_half": _corrupt_mutant(rate=0.5),
        "inverted_labels": _corrupt_mutant(labels="inverted"),
        "random_unchosen": _corrupt_mutant(random_everywhere=True),
        "labels_after_corruption": _corrupt_mutant(labels="corrupted"),
        "split_by_position": _split_in_order,
        "generator_ignored": _clock_seeded,
    },
    input_names=("ids", "mask_id", "vocab_size"),
    course_copies=("attnlab.mlm.mlm_corrupt",),
    alternatives=[_bernoulli, _exact_counts, _multinomial],
)


# --------------------------------------------------------------------------
# 4. mlm_loss(logits, labels) -> 0-d tensor: mean cross-entropy over the chosen positions
#    (labels != -100) only; logits [B, T, V], labels [B, T]


def mlm_loss(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)


def loss_cases(generator):
    device = case_device()
    cases = []
    for B, T, V in [(2, 12, 10), (3, 20, 7), (1, 30, 16), (4, 9, 5), (2, 40, 12)]:  # the notebook shows (1, 6, 4)
        # the last case: logits in the hundreds, where softmax underflows to 0 and log(softmax) gives inf
        logits = torch.randn(B, T, V, generator=generator) * (200 if T == 40 else 2)
        ids = torch.randint(0, V, (B, T), generator=generator)
        chosen = torch.rand(B, T, generator=generator) < 0.2 + 0.2 * torch.arange(B)[:, None] / B  # unequal counts
        chosen[:, 0] = True  # at least one per sequence
        labels = torch.where(chosen, ids, IGNORE)
        cases.append(Case((logits.to(device), labels.to(device)), label=f"B={B}, T={T}, V={V}"))
    return cases


def _per_position(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="none").view(
        labels.shape)


def _manual_loss(logits, labels):
    chosen = labels != IGNORE
    log_probs = logits.log_softmax(dim=-1)[chosen]  # [n_chosen, V]
    return -log_probs.gather(-1, labels[chosen][:, None]).mean()


MLM_LOSS = Task(
    id="ch7.mlm_loss", exercise=EXERCISE, reference=mlm_loss, cases=loss_cases,
    mutants={
        "mean_over_all": lambda logits, labels: _per_position(logits, labels).sum() / labels.numel(),
        "sum": lambda logits, labels: _per_position(logits, labels).sum(),
        "per_sequence_mean": lambda logits, labels: (
            _per_position(logits, labels).sum(dim=1) / (labels != IGNORE).sum(dim=1)).mean(),
        "ignored_as_class_0": lambda logits, labels: F.cross_entropy(
            logits.flatten(0, 1), labels.clamp(min=0).flatten()),
        "no_log_softmax": lambda logits, labels: F.nll_loss(logits.flatten(0, 1), labels.flatten()),
        "log_of_softmax": lambda logits, labels: F.nll_loss(logits.softmax(dim=-1).log().flatten(0, 1), labels.flatten()),
    },
    alternatives=[
        lambda logits, labels: F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1)),
        lambda logits, labels: F.cross_entropy(logits.transpose(1, 2), labels),
        _manual_loss,
        lambda logits, labels: nn.CrossEntropyLoss()(logits[labels != IGNORE], labels[labels != IGNORE]),
        lambda logits, labels: F.nll_loss(F.log_softmax(logits, dim=-1).flatten(0, 1), labels.flatten()),
    ],
)
