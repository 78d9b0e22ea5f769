"""Exercise 7, task 3: judging BERT's 80/10/10 rule by its statistics (the corruption is random): the structure
of the answer, the labels, the shares overall and by position, the random tokens drawn from the vocabulary,
the generator used (the same seed gives the same result, another seed another one)."""

from __future__ import annotations

import math

import torch

from ...grader import Problem

IGNORE = -100  # F.cross_entropy's ignore_index: no loss at this position
RATE, SHARES = 0.15, (0.8, 0.1, 0.1)  # chosen; of the chosen: [MASK], random, unchanged
Z = 6.0  # a share may stray this many standard errors from its expected value
LARGE = 4000  # from this many positions on, the shares are checked
SOME = 20  # from this many positions on, "every position chosen" counts as a mistake
MUTANT = "grader.mutant.ch7.bert_corrupt."


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
        batch = _random_from_batch(inputs, labelled, ids_cpu, mask_id, vocab_size)
        if batch is not None:
            return batch
        return _reproducible(run, seed, ids, inputs, labels)

    return judge


def _random_from_batch(inputs, labelled, ids, mask_id, vocab_size):
    """The random tokens come from the whole vocabulary: where the batch holds few of its tokens, most random
    tokens are tokens the batch does not hold (drawing them from the batch gives none)."""
    present = torch.zeros(vocab_size, dtype=torch.bool)
    present[ids.flatten()] = True
    present[mask_id] = True
    outside = 1 - present.double().mean().item()  # the share of the vocabulary the batch lacks
    randomized = labelled & (inputs != mask_id) & (inputs != ids)
    n = int(randomized.sum())
    if outside < 0.5 or n < 30:
        return None
    share = (~present[inputs[randomized]]).double().mean().item()
    if share < outside - Z * math.sqrt(outside * (1 - outside) / n) - 0.05:
        return Problem(MUTANT + "random_from_batch", detail=Problem("grader.mlm.random_outside", {
            "got": _percent(share), "expected": _percent(outside)}))
    return None


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
