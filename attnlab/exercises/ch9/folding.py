"""Exercise 9, task 3: fold an arriving K/V block into the online softmax (``fold_block``), pure
tensor math in one process.
"""

from __future__ import annotations

import torch

from ...blocked import OnlineSoftmax
from ...grader import Case, Contract, Task
from .. import case_device

EXERCISE = "09-ring-attention"


# --------------------------------------------------------------------------
# 3. fold_block(m, l, acc, scores, v) -> (m, l, acc): fold one arriving block into the
#    online softmax. m [..., q] running maximum, l [..., q] sum of exp(score - m),
#    acc [..., q, d_v] sum of exp(score - m) * value; scores [..., q, k] (-inf = masked),
#    v [..., k, d_v]. After the fold every row has seen at least one allowed key.


def fold_block(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.amax(dim=-1))  # [..., q]
    correction = torch.exp(m - m_new)  # rescales what was summed under the old maximum
    p = torch.exp(scores - m_new[..., None])  # [..., q, k]
    l_new = l * correction + p.sum(dim=-1)
    acc_new = acc * correction[..., None] + p @ v
    return m_new, l_new, acc_new


FOLD_SIZES = [(1, 2, 3, 4, 5), (2, 1, 4, 6, 3), (1, 3, 5, 2, 4), (2, 2, 2, 8, 6), (1, 1, 6, 3, 2)]
# (B, H, q, k, d_v); the notebook shows one row with two keys


def fold_cases(generator):
    device = case_device()
    cases = []
    for n, (B, H, nq, nk, d_v) in enumerate(FOLD_SIZES):
        scale = 150.0 if n == 3 else 4.0 if n % 2 else 2.0  # case 4: scores in the hundreds (float32 exp overflows)
        m = torch.full((B, H, nq), float("-inf"))
        l, acc = torch.zeros(B, H, nq), torch.zeros(B, H, nq, d_v)
        if n != 4:  # case 5 starts from the empty state (nothing read yet)
            earlier = torch.randn(B, H, nq, nk + 1, generator=generator) * scale
            m, l, acc = fold_block(m, l, acc, earlier, torch.randn(B, H, nk + 1, d_v, generator=generator))
        scores = torch.randn(B, H, nq, nk, generator=generator) * scale + 1.5 * (n % 3 - 1)  # some rows gain a new max
        scores = scores.masked_fill(torch.rand(B, H, nq, nk, generator=generator) < 0.3, float("-inf"))
        scores[..., 0] = torch.randn(B, H, nq, generator=generator) * scale  # at least one allowed key per row
        v = torch.randn(B, H, nk, d_v, generator=generator)
        cases.append(Case(tuple(t.to(device) for t in (m, l, acc, scores, v)),
                          label=f"B={B}, H={H}, q={nq}, k={nk}, d_v={d_v}"))
    return cases


def _fold_mutant(kind):
    def fold(m, l, acc, scores, v):
        m_block = scores.amax(dim=-1)
        m_new = m_block if kind == "block_max_only" else torch.maximum(m, m_block)
        correction = torch.exp(m - m_new)
        if kind == "inverted_correction":
            correction = torch.exp(m_new - m).nan_to_num(posinf=0.0)
        p = torch.exp(scores - m_new[..., None])
        if kind == "exp_ratio":  # exp(m) / exp(m_new): each exp overflows on its own for scores in the hundreds
            correction = torch.exp(m) / torch.exp(m_new)
            p = torch.exp(scores) / torch.exp(m_new)[..., None]
        if kind == "no_max":
            return m_new, l + scores.exp().sum(dim=-1), acc + scores.exp() @ v
        if kind == "acc_not_rescaled":
            return m_new, l * correction + p.sum(dim=-1), acc + p @ v
        if kind == "nothing_rescaled":
            return m_new, l + p.sum(dim=-1), acc + p @ v
        if kind == "normalized_acc":
            l_new = l * correction + p.sum(dim=-1)
            return m_new, l_new, (acc * correction[..., None] + p @ v) / l_new[..., None]
        if kind == "old_max":
            return m, l * correction + p.sum(dim=-1), acc * correction[..., None] + p @ v
        if kind == "normalized_block":
            return m_new, l * correction + p.sum(dim=-1), acc * correction[..., None] + scores.softmax(-1) @ v
        return m_new, l * correction + p.sum(dim=-1), acc * correction[..., None] + p @ v

    return fold


def _course_state(m, l, acc, scores, v):
    """Correct: attnlab.blocked.OnlineSoftmax, the state ring_attention keeps per query tile."""
    state = OnlineSoftmax(m.shape, v.size(-1), m.device)
    state.m, state.l, state.acc = m, l, acc
    state.add(scores, v)
    return state.m, state.l, state.acc


def _concatenated(m, l, acc, scores, v):
    """Correct: the old state as one more column, with weight l and value acc / l."""
    m_new = torch.maximum(m, scores.amax(dim=-1))
    weights = torch.exp(torch.cat([m[..., None], scores], dim=-1) - m_new[..., None])  # [..., q, 1 + k]
    l_new = weights[..., 0] * l + weights[..., 1:].sum(dim=-1)
    acc_new = weights[..., :1] * acc + weights[..., 1:] @ v
    return m_new, l_new, acc_new


def _logsumexp(m, l, acc, scores, v):
    """Correct: combine the old and new log-sums with torch.logaddexp, then rescale."""
    m_new = torch.maximum(m, scores.amax(dim=-1))
    log_l = torch.logaddexp(l.log() + m, torch.logsumexp(scores, dim=-1))  # log of the total sum
    p = torch.exp(scores - m_new[..., None])
    return m_new, torch.exp(log_l - m_new), torch.exp(m - m_new)[..., None] * acc + torch.einsum("...qk,...kd->...qd", p, v)


def fold_draw(d):
    """A state after 0 or more earlier blocks and a block [..., q, k] of scores up to the hundreds (float32 exp
    overflows), some masked; a block row may be masked whole where the state has read a key already."""
    lead = d.choice("lead", ((1, 1), (2, 3), (1,)))
    nq, nk, d_v = d.size("q", 1, 6, edges=(1, 40)), d.size("k", 1, 8, edges=(1, 64)), d.size("d_v", 1, 8, edges=(1, 32))
    dtype, scale = d.choice("dtype", (torch.float32, torch.float64)), d.choice("scale", (2.0, 150.0))
    state = d.choice("state", ("empty", "read", "read, a row masked"))  # the last: a fully masked block row
    empty = state == "empty"
    generator = d.generator("values")
    m = torch.full((*lead, nq), float("-inf"), dtype=dtype)
    l, acc = torch.zeros(*lead, nq, dtype=dtype), torch.zeros(*lead, nq, d_v, dtype=dtype)
    if not empty:
        earlier = torch.randn(*lead, nq, nk + 1, generator=generator, dtype=torch.float64).to(dtype) * scale
        m, l, acc = fold_block(m, l, acc, earlier, torch.randn(*lead, nk + 1, d_v, generator=generator).to(dtype))
    scores = torch.randn(*lead, nq, nk, generator=generator, dtype=torch.float64).to(dtype) * scale
    scores = scores.masked_fill(torch.rand(*lead, nq, nk, generator=generator) < 0.3, float("-inf"))
    if state != "read, a row masked":
        scores[..., 0] = (torch.randn(*lead, nq, generator=generator) * scale).to(dtype)  # a key per row
    else:
        scores[..., 0, :] = float("-inf")  # the first query row reads nothing in this block (the state has)
    v = torch.randn(*lead, nk, d_v, generator=generator).to(dtype)
    return Case(tuple(d.layout(name, t.to(d.device)) for name, t in zip(("m", "l", "acc", "scores", "v"),
                                                                      (m, l, acc, scores, v))),
                label=f"{'x'.join(map(str, lead))}, q={nq}, k={nk}, d_v={d_v}, {str(dtype)[6:]}, scale={scale:g}, "
                      f"state: {state}")


FOLD_BLOCK = Task(
    id="ch9.fold_block", exercise=EXERCISE, reference=fold_block, cases=fold_cases,
    contract=Contract(draw=fold_draw), output_names=("m", "l", "acc"),
    mutants={
        "acc_not_rescaled": _fold_mutant("acc_not_rescaled"),
        "nothing_rescaled": _fold_mutant("nothing_rescaled"),
        "inverted_correction": _fold_mutant("inverted_correction"),
        "block_max_only": _fold_mutant("block_max_only"),
        "no_max": _fold_mutant("no_max"),
        "normalized_block": _fold_mutant("normalized_block"),
        "normalized_acc": _fold_mutant("normalized_acc"),
        "old_max": _fold_mutant("old_max"),
        "exp_ratio": _fold_mutant("exp_ratio"),
    },
    course_copies=("attnlab.blocked.OnlineSoftmax.add",),
    alternatives=[_concatenated, _logsumexp],
)
