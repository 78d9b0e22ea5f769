"""Exercise 7, tasks 3 and 4: BERT's 80/10/10 rule (``bert_corrupt``, graded by its statistics,
since it is random) and the MLM loss on the chosen positions only (``mlm_loss``).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from ...grader import Case, Contract, Problem, Task, note
from ...grader.state import grader_seed
from ...mlm import mlm_corrupt
from .. import case_device
from .statistics import IGNORE, LARGE, MUTANT, RATE, SHARES, SOME, Z, _bert_judge, _structure  # noqa: F401

EXERCISE = "07-bidirectional-attention"


# --------------------------------------------------------------------------
# 3. bert_corrupt(ids, mask_id, vocab_size, generator) -> (inputs, labels)
#    Each position is chosen with probability 15%; a chosen token becomes mask_id (80%),
#    a random token of the vocabulary (10%) or stays (10%); labels hold the original
#    token at chosen positions and -100 elsewhere. Random, so graded by its statistics.



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
    grader_seed(int.from_bytes(os.urandom(7), "little"))  # draws from the global RNG differ per call
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    out = fn(ids, mask_id, vocab_size, generator)
    if generator.initial_seed() != seed:  # generator.manual_seed(...) inside: every call draws alike
        note(Problem("grader.ch7.bert_corrupt.reseeds_generator"))
    elif ids.numel() >= SAME_CHECKED and _structure(ids, out) is None:
        # the same generator again, going on where it stopped (the next epoch): other positions
        again = fn(ids, mask_id, vocab_size, generator)
        if _structure(ids, again) is None and torch.equal(again[1], out[1]):
            note(Problem("grader.ch7.bert_corrupt.same_each_call"))
    return out


SAME_CHECKED = 200  # from this many positions on, two calls with one generator must choose differently


BERT_SIZES = [((2, 24), 30, 3), ((40,), 50, 1), ((64, 128), 30, 4), ((16, 384), 1000, 103), ((4096,), 100, 0),
              ((32, 256), 30522, 103, 40)]
# (shape of ids, vocab_size, mask_id[, the tokens the batch holds: 40 of 30522, as a real batch holds few of them]);
# the notebook shows a sentence of the course's tokenizer


def bert_cases(generator):
    cases = []
    for n, (shape, vocab_size, mask_id, *held) in enumerate(BERT_SIZES):
        ids = torch.randint(0, (held[0] if held else vocab_size) - 1, shape, generator=generator)
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


def _from_the_batch(ids, mask_id, vocab_size, generator):
    """Wrong: the random tokens are drawn from the tokens of the batch, not from the vocabulary."""
    inputs, labels = bert_corrupt(ids, mask_id, vocab_size, generator)
    randomized = (labels != IGNORE) & (inputs != mask_id) & (inputs != ids)
    flat = ids.flatten()
    picks = flat[torch.randint(0, flat.numel(), ids.shape, generator=generator, device=ids.device)]
    return torch.where(randomized, picks, inputs), labels


def bert_draw(d):
    """Token ids of one sentence to a large batch (the shares are tested from 4000 positions on), a vocabulary of
    3 to 30522, ids from all of it or from a few of its tokens (as a real batch holds few of them)."""
    shape = d.choice("shape", ((7,), (4096,), (2, 24), (16, 384), (40, 128)))
    vocab_size = d.choice("vocab_size", (30, 3, 1000, 30522))
    mask_id = d.size("mask_id", 0, vocab_size - 1, edges=(0, vocab_size - 1))
    few = d.flag("few_tokens")
    generator = d.generator("ids")
    ids = torch.randint(0, min(vocab_size - 1, 40) if few else vocab_size - 1, shape, generator=generator)
    ids = (ids + (ids >= mask_id).long()).to(d.device)  # every token but mask_id
    seed = d.size("seed", 0, 10**6)
    return Case((ids, mask_id, vocab_size), seed=seed, judge=_bert_judge(ids, mask_id, vocab_size, seed),
                label=f"ids {list(shape)}, vocab_size={vocab_size}, mask_id={mask_id}")


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
        "random_from_batch": _from_the_batch,
    },
    contract=Contract(draw=bert_draw, examples=5, neighbours=False),
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


def mlm_draw(d):
    """Logits [B, T, V] (float32 or float64, up to a few hundred), labels with -100 where not chosen: a row may
    have none chosen, at least one position is."""
    B, T, V = d.size("B", 1, 4, edges=(1,)), d.size("T", 1, 40, edges=(1, 64)), d.size("V", 2, 40, edges=(2, 1000))
    logits = d.normal("logits", (B, T, V), d.choice("dtype", (torch.float32, torch.float64)),
                      scale=d.choice("scale", (2.0, 300.0)), layouts=("contiguous", "offset"))
    generator = d.generator("labels")
    chosen = torch.rand(B, T, generator=generator) < d.choice("rate", (0.15, 0.01, 1.0))
    chosen.view(-1)[int(torch.randint(B * T, (), generator=generator))] = True
    labels = torch.where(chosen, torch.randint(0, V, (B, T), generator=generator), IGNORE)
    return Case((logits, labels.to(d.device)))


MLM_LOSS = Task(
    id="ch7.mlm_loss", exercise=EXERCISE, reference=mlm_loss, cases=loss_cases,
    contract=Contract(draw=mlm_draw, grads=("logits",)),
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
