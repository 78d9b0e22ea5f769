"""Exercise 12 (exercises/src/12-decoding-faster.md): the chunk mask of chunked prefill, the
block-table gather of a paged KV cache, the log-sum-exp combine of split-KV decoding, the tree
mask from parent pointers, and the accepted length of speculative decoding.
"""

from __future__ import annotations

import itertools

import torch

from ..grader import Case, Contract, Problem, Task
from ..grader.compare import compare_outputs
from . import case_device

EXERCISE = "12-decoding-faster"


# --------------------------------------------------------------------------
# 1. chunk_mask(C, cache_len) -> [C, cache_len + C] bool: query i of the chunk sits at position
#    cache_len + i and may read keys 0 .. cache_len + i (the lower-right causal mask)


def chunk_mask(C, cache_len):
    return torch.ones(C, cache_len + C, dtype=torch.bool).tril(diagonal=cache_len)


CHUNK_SIZES = [(1, 0), (3, 7), (4, 5), (4, 0), (5, 9), (6, 70),  # (C, cache_len); the notebook shows (2, 3)
               (3, 40_000)]  # C < 3 after a cache: mistakes coincide; positions past 32767, where int16 wraps


def chunk_cases(generator):
    return [Case((C, n), label=f"C={C}, cache_len={n}") for C, n in CHUNK_SIZES]


def _chunk(diagonal=0, cache=True, transpose=False):
    def mask(C, cache_len):
        full = torch.ones(C, cache_len + C, dtype=torch.bool)
        allowed = full.triu(diagonal=cache_len) if transpose else full.tril(diagonal=cache_len + diagonal)
        if not cache:
            allowed[:, :cache_len] = False
        return allowed

    return mask


def chunk_draw(d):
    C = d.size("C", 1, 40, edges=(1, 2, 70))
    cache_len = d.size("cache_len", 0, 60, edges=(0, 1, 100, 40_000))  # positions past 32767: int16 wraps
    return Case((C, cache_len), label=f"C={C}, cache_len={cache_len}")


CHUNK_MASK = Task(
    id="ch12.chunk_mask", exercise=EXERCISE, reference=chunk_mask, cases=chunk_cases,
    contract=Contract(draw=chunk_draw),
    course_copies=("attnlab.chunked_prefill.chunk_mask", "attnlab.masks.causal_allowed_from_indices",
                   "attnlab.mask_builder.build_mask", "attnlab.mask_builder.batch_mask"),
    mutants={
        "top_left": lambda C, n: torch.ones(C, n + C, dtype=torch.bool).tril(),
        "diagonal_blocked": _chunk(diagonal=-1),
        "one_too_many": _chunk(diagonal=1),
        "cache_unread": _chunk(cache=False),
        "transposed": _chunk(transpose=True),
        "chunk_only": lambda C, n: torch.ones(C, C, dtype=torch.bool).tril(),
        "no_mask": lambda C, n: torch.ones(C, n + C, dtype=torch.bool),
        "inverted": lambda C, n: ~chunk_mask(C, n),
        "narrow_positions": lambda C, n: (torch.arange(n + C).to(torch.int16)[None, :]
                                          <= torch.arange(n, n + C).to(torch.int16)[:, None]),
    },
    # not an alternative: the square mask of the whole sequence, sliced (tril()[cache_len:]), is right in value but
    # builds (cache_len + C)^2 entries, 1.6 GB at the 40 000 cached positions the task's text announces
    alternatives=[
        lambda C, n: torch.arange(n + C)[None, :] <= torch.arange(n, n + C)[:, None],
        lambda C, n: torch.tensor([[j <= n + i for j in range(n + C)] for i in range(C)], dtype=torch.bool),
    ],
)


# --------------------------------------------------------------------------
# 2. gather_kv(blocks, block_table, length) -> [H, length, d]: one layer of a block pool
#    blocks [num_blocks, H, block_size, d]; block_table: the sequence's block ids in the order of its
#    positions (position p lives in block block_table[p // block_size], slot p % block_size)


def gather_kv(blocks, block_table, length):
    table = torch.as_tensor(block_table, dtype=torch.long, device=blocks.device)
    return blocks[table].transpose(0, 1).flatten(1, 2)[:, :length]


GATHER_SIZES = [  # (num_blocks, H, block_size, d, table, length); the notebook shows 8 blocks of 4, [5, 2], 6
    (6, 2, 3, 4, [4, 1, 5], 7), (5, 1, 4, 3, [2], 4), (9, 3, 2, 2, [7, 0, 3, 8, 1], 9),
    (4, 2, 5, 3, [3, 0], 6), (12, 2, 4, 8, [11, 2, 9, 5, 0, 6], 21), (3, 4, 1, 2, [2, 0], 2),
    (40_000, 2, 2, 2, [39_998, 3, 32_768], 5),  # a pool of 40 000 blocks: ids past 32767, where int16 wraps
]


def gather_cases(generator):
    cases = []
    for n, H, size, d, table, length in GATHER_SIZES:
        blocks = torch.randn(n, H, size, d, generator=generator).to(case_device())
        cases.append(Case((blocks, list(table), length),
                          label=f"blocks=[{n}, {H}, {size}, {d}], block_table={table}, length={length}"))
    return cases


def _gather(order="table", transpose=True, cut=True):
    def gather(blocks, block_table, length):
        ids = {"table": list(block_table), "sorted": sorted(block_table), "first": list(range(len(block_table))),
               "shifted": [b + 1 for b in block_table],
               "narrow": torch.tensor(block_table).to(torch.int16).tolist()}[order]
        picked = blocks[torch.tensor(ids, dtype=torch.long, device=blocks.device)]  # [n, H, size, d]
        n, H, size, d = picked.shape
        rows = picked.transpose(0, 1).flatten(1, 2) if transpose else picked.reshape(H, n * size, d)
        return rows[:, :length] if cut else rows

    return gather


def gather_draw(d):
    size = d.size("block_size", 1, 8, edges=(1, 16))  # the largest edges stay small: 24 x 3 x 16 x 8 numbers
    n = d.size("blocks in the table", 1, 8, edges=(1, 16))
    num_blocks = n + d.size("other blocks", 0, 4, edges=(0, 8, 40_000))  # a pool past 32767 blocks: int16 ids wrap
    H, dim = d.size("H", 1, 3), d.size("d", 1, 8)
    if num_blocks > 1000:  # a big pool of small blocks: 40 000 x 1 x 2 x 2 numbers, still fast
        size, H, dim = min(size, 2), 1, min(dim, 2)
    blocks = d.normal("blocks", (num_blocks, H, size, dim), d.choice("dtype", (torch.float32, torch.float64)))
    generator = d.generator("block_table")
    table = torch.randperm(num_blocks, generator=generator)[:n].tolist()
    if num_blocks > 32768 and max(table) < 32768:  # at least one id past int16's range
        table[int(torch.randint(n, (1,), generator=generator))] = 32768 + int(torch.randint(num_blocks - 32768, (1,), generator=generator))
    length = (n - 1) * size + d.size("used slots of the last block", 1, size)
    return Case((blocks, table, length), label=f"blocks={list(blocks.shape)}, block_table={table}, length={length}")


GATHER_KV = Task(
    id="ch12.gather_kv", exercise=EXERCISE, reference=gather_kv, cases=gather_cases,
    contract=Contract(draw=gather_draw),
    course_copies=("attnlab.paged_cache.gather_kv", "attnlab.paged_cache.PagedSequence.update"),
    mutants={
        "physical_order": _gather(order="sorted"),
        "table_ignored": _gather(order="first"),
        "no_transpose": _gather(transpose=False),
        "not_cut": _gather(cut=False),
        "ids_shifted": _gather(order="shifted"),
        "narrow_ids": _gather(order="narrow"),
    },
    alternatives=[
        lambda blocks, table, length: torch.cat([blocks[b] for b in table], dim=1)[:, :length],
        lambda blocks, table, length: torch.stack(
            [blocks[table[p // blocks.size(2)], :, p % blocks.size(2)] for p in range(length)], dim=1)
        if length else blocks.new_zeros(blocks.size(1), 0, blocks.size(3)),
        lambda blocks, table, length: torch.index_select(
            blocks, 0, torch.tensor(table, device=blocks.device)).permute(1, 0, 2, 3).reshape(
            blocks.size(1), -1, blocks.size(3))[:, :length],
    ],
)


# --------------------------------------------------------------------------
# 3. combine_splits(outs, lses) -> [..., T_q, d]: the outputs of n_splits parts of the keys, each
#    softmax-weighted over its own keys (outs [n_splits, ..., T_q, d]), and the log-sum-exp of
#    each part's scores (lses [n_splits, ..., T_q]), combined into attention over all keys


def combine_splits(outs, lses):
    lse = torch.logsumexp(lses, dim=0)
    return (torch.exp(lses - lse)[..., None] * outs).sum(dim=0)


COMBINE_SIZES = [  # (n_splits, H, T_q, d, scale of the lses); the notebook shows 1000 keys in 4 splits
    (2, 1, 1, 4, 1.0), (3, 2, 1, 8, 3.0), (1, 2, 2, 4, 1.0), (5, 3, 1, 6, 2.0), (4, 2, 3, 5, 1.0),
    (3, 1, 2, 4, 100.0),  # lses near 100: exp overflows float32 unless the maximum is subtracted
]


def combine_cases(generator):
    cases = []
    for n, H, T_q, d, scale in COMBINE_SIZES:
        outs = torch.randn(n, H, T_q, d, generator=generator)
        lses = torch.randn(n, H, T_q, generator=generator) * min(scale, 3.0) + (scale if scale > 3 else 0.0)
        cases.append(Case((outs.to(case_device()), lses.to(case_device())),
                          label=f"outs=[{n}, {H}, {T_q}, {d}], lses=[{n}, {H}, {T_q}]" + (" ~ 100" if scale > 3 else "")))
    return cases


def _weighted(weights, outs):
    return (weights[..., None] * outs).sum(dim=0) / weights.sum(dim=0)[..., None]


COMBINE_MISTAKES = {
    "mean": lambda outs, lses: outs.mean(dim=0),
    "sum": lambda outs, lses: outs.sum(dim=0),
    "largest": lambda outs, lses: outs.gather(0, lses.argmax(dim=0)[None, ..., None].expand(1, *outs.shape[1:]))[0],
    "no_max": lambda outs, lses: _weighted(torch.exp(lses), outs),
    "not_normalized": lambda outs, lses: (torch.exp(lses - lses.amax(dim=0))[..., None] * outs).sum(dim=0),
    "linear": lambda outs, lses: _weighted(lses, outs),  # weights proportional to the log-sum-exps themselves
    "wrong_axis": lambda outs, lses: (torch.softmax(lses, dim=-1)[..., None] * outs).sum(dim=0),  # over the queries
}


def combine_draw(d):
    n = d.size("n_splits", 1, 8, edges=(1, 32))
    H, T_q, dim = d.size("H", 1, 4), d.size("T_q", 1, 3), d.size("d", 1, 16, edges=(1, 32))
    dtype = d.choice("dtype", (torch.float32, torch.float64))
    outs = d.normal("outs", (n, H, T_q, dim), dtype)
    lses = d.normal("lses", (n, H, T_q), dtype, scale=d.choice("scale of the lses", (1.0, 10.0, 300.0)))
    return Case((outs, lses), label=f"outs={list(outs.shape)}, lses={list(lses.shape)}, {str(dtype).removeprefix('torch.')}")


COMBINE_SPLITS = Task(
    id="ch12.combine_splits", exercise=EXERCISE, reference=combine_splits, cases=combine_cases,
    contract=Contract(draw=combine_draw),
    course_copies=("attnlab.split_kv.combine_splits", "attnlab.split_kv.split_kv_attention"),
    mutants=COMBINE_MISTAKES,
    compare=lambda expected, got: combine_compare(expected, got),
    alternatives=[
        lambda outs, lses: (torch.softmax(lses, dim=0)[..., None] * outs).sum(dim=0),
        lambda outs, lses: torch.einsum("s...,s...d->...d", torch.softmax(lses, dim=0), outs),
    ],
)


def combine_compare(expected, got):
    """The default comparison, with the reason a dtype must match: the parts came in that dtype."""
    problem = compare_outputs(expected, got)
    if problem is not None and problem.key == "grader.dtype":
        return Problem("grader.ch12.combine_splits.dtype", dict(problem.params))
    return problem


# --------------------------------------------------------------------------
# 4. tree_mask(parents, cache_len) -> [N, cache_len + N] bool: entry i reads every cached key,
#    itself and its ancestors (parents[i] is the entry it continues, -1 for a root), not its siblings


def tree_mask(parents, cache_len):
    N = len(parents)
    allowed = torch.zeros(N, cache_len + N, dtype=torch.bool)
    allowed[:, :cache_len] = True
    for i in range(N):
        j = i
        while j != -1:
            allowed[i, cache_len + j] = True
            j = parents[j]
    return allowed


TREES = [  # (parents, cache_len); the notebook shows tree_shape((2, 2)) after 2 cached positions
    ([-1], 0), ([-1, 0, 0, 0], 3), ([-1, 0, 1, 2, 3], 2),  # a chain after one cached key: no_offset is no_self
    ([-1, 0, 0, 1, 1, 2], 4),
    ([-1, 0, 0, 1, 2, 2, 5, 3], 2), ([-1, -1, 0, 1], 1), ([-1] + list(range(69)), 2),  # a chain of 70: no 64 x 64 kept
]


def tree_cases(generator):
    return [Case((list(parents), cache_len), label=f"parents={parents if len(parents) < 12 else '[-1, 0, 1, ..., 68]'}, "
                                                  f"cache_len={cache_len}") for parents, cache_len in TREES]


def _tree(kind):
    def mask(parents, cache_len):
        N, right = len(parents), tree_mask(parents, cache_len)
        step = {"causal": torch.ones(N, N, dtype=torch.bool).tril(),  # every earlier entry: siblings and cousins too
                "parent_only": torch.eye(N, dtype=torch.bool) | torch.tensor(
                    [[j == p for j in range(N)] for p in parents], dtype=torch.bool).reshape(N, N),
                "no_self": right[:, cache_len:] & ~torch.eye(N, dtype=torch.bool),
                "descendants": tree_mask(parents, 0).T}  # the transpose within the step
        if kind in step:
            return torch.cat([right[:, :cache_len], step[kind]], dim=1)
        if kind == "cache_unread":
            return torch.cat([torch.zeros(N, cache_len, dtype=torch.bool), right[:, cache_len:]], dim=1)
        if kind == "no_offset":  # entry j written at column j, among the cached keys
            wrong = torch.zeros(N, cache_len + N, dtype=torch.bool)
            wrong[:, :cache_len] = True
            wrong[:, :N] |= tree_mask(parents, 0)
            return wrong
        return ~right  # "inverted"

    return mask


def tree_draw(d):
    N = d.size("N", 1, 24, edges=(1, 2, 70))
    kind = d.choice("tree", ("chain", "star", "random", "forest"))
    generator = d.generator("parents")
    parents = []
    for i in range(N):
        if i == 0 or kind == "forest" and int(torch.randint(4, (1,), generator=generator)) == 0:
            parents.append(-1)
        elif kind == "chain":
            parents.append(i - 1)
        elif kind == "star":
            parents.append(0)
        else:
            parents.append(int(torch.randint(i, (1,), generator=generator)))
    cache_len = d.size("cache_len", 0, 8, edges=(0, 1, 40))
    return Case((parents, cache_len), label=f"parents={parents if N <= 12 else f'[{N} entries]'}, cache_len={cache_len}")


TREE_MASK = Task(
    id="ch12.tree_mask", exercise=EXERCISE, reference=tree_mask, cases=tree_cases,
    contract=Contract(draw=tree_draw),
    course_copies=("attnlab.tree_speculation.tree_mask",),
    mutants={name: _tree(name) for name in ("causal", "parent_only", "no_self", "cache_unread", "descendants",
                                             "no_offset", "inverted")},
    alternatives=[
        lambda parents, cache_len: _tree_by_rows(parents, cache_len),
    ],
)


def _tree_by_rows(parents, cache_len):
    """Row i is row parents[i] plus entry i itself (parents come first)."""
    rows = []
    for i, p in enumerate(parents):
        row = rows[p].clone() if p != -1 else torch.cat([torch.ones(cache_len, dtype=torch.bool),
                                                          torch.zeros(len(parents), dtype=torch.bool)])
        row[cache_len + i] = True
        rows.append(row)
    return torch.stack(rows)


# --------------------------------------------------------------------------
# 5. accepted_length(draft_tokens, target_choices) -> int: draft_tokens, k proposed token ids;
#    target_choices, k + 1 token ids: the target's greedy pick after the last accepted token and
#    after each proposal (one pass). The number of proposals accepted: the longest prefix that agrees.


def accepted_length(draft_tokens, target_choices):
    a = 0
    while a < len(draft_tokens) and draft_tokens[a] == target_choices[a]:
        a += 1
    return a


ACCEPT = [  # (draft_tokens, target_choices); the notebook shows [a, b, c, d] against [a, b, x, ., .]
    ([], [7]), ([3, 4, 3], [3, 4, 3, 5]), ([4, 9, 2], [1, 9, 2, 6]), ([5, 6, 7, 8, 9], [5, 6, 0, 8, 9, 1]),
    ([7, 7, 3, 5, 3], [7, 7, 7, 3, 5, 5]), ([1, 4, 1, 4, 2, 6], [1, 4, 1, 4, 0, 5, 3]), ([8], [8, 8]),
    ([5, 5, 9, 65_542, 4, 9, 2], [5, 5, 9, 6, 4, 9, 5, 3]),  # ids 65536 apart: equal in int16 (a 256k vocabulary)
]


def accept_cases(generator):
    return [Case((list(draft), list(choices)), label=f"draft_tokens={draft}, target_choices={choices}")
            for draft, choices in ACCEPT]


def accept_draw(d):
    k = d.size("k", 0, 8, edges=(0, 1, 20))
    agree = d.size("agreeing", 0, k)
    vocab = d.size("vocab", 2, 50, edges=(2, 1000, 262_144))  # vocabularies of 256k ids exist (Gemma)
    apart = d.choice("first disagreement", ("another id", "an id 65536 away"))  # int16 or uint16 ids compare equal
    generator = d.generator("tokens")
    draft = torch.randint(vocab, (k,), generator=generator).tolist()
    choices = draft[:agree] + torch.randint(vocab, (k + 1 - agree,), generator=generator).tolist()
    if agree < k and apart != "another id":
        choices[agree] = draft[agree] + 65536 if draft[agree] < 65536 else draft[agree] - 65536
    elif agree < k and choices[agree] == draft[agree]:
        choices[agree] = (draft[agree] + 1) % vocab  # the first disagreement is where agree says
    return Case((draft, choices), label=f"draft_tokens={draft}, target_choices={choices}")


def accept_compare(expected, got):
    """A Python int: the decoding loop slices its tokens with it (a 0-d tensor, a bool or a float is named;
    the grader's general rule lets a tensor and a bool pass)."""
    kind = next((name for name, t in (("bool", bool), ("tensor", torch.Tensor), ("float", float)) if isinstance(got, t)), None)
    return compare_outputs(expected, got) if kind is None else Problem(f"grader.ch12.accepted_length.{kind}", {"got": repr(got)})


ACCEPTED_LENGTH = Task(
    id="ch12.accepted_length", exercise=EXERCISE, reference=accepted_length, cases=accept_cases,
    contract=Contract(draw=accept_draw),
    course_copies=("attnlab.speculative.accepted_length", "attnlab.speculative.speculative_step"),
    mutants={  # the narrow ids first: on a drawn input they can also look like another mistake
        "narrow_ids": lambda d, c: accepted_length(torch.tensor(d, dtype=torch.long).to(torch.int16).tolist(),
                                                   torch.tensor(c, dtype=torch.long).to(torch.int16).tolist()),
        "all_matches": lambda d, c: sum(x == y for x, y in zip(d, c)),
        "bonus_counted": lambda d, c: accepted_length(d, c) + 1,
        "all_or_nothing": lambda d, c: len(d) if list(d) == list(c[:len(d)]) else 0,  # before shifted: a tie goes to it
        "shifted": lambda d, c: accepted_length(d, c[1:]),
        "last_unchecked": lambda d, c: accepted_length(d[:-1], c),
        "first_mismatch_only": lambda d, c: 0 if d and d[0] != c[0] else len(d),
        "one_short": lambda d, c: accepted_length(d, c) - 1,
    },
    compare=lambda expected, got: accept_compare(expected, got),
    alternatives=[
        lambda d, c: sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], zip(d, c))),
        lambda d, c: next((i for i, (x, y) in enumerate(zip(d, c)) if x != y), len(d)),
        lambda d, c: int(torch.tensor([x == y for x, y in zip(d, c)] or [True], dtype=torch.long).cumprod(0).sum())
        if d else 0,
    ],
)

TASKS = [CHUNK_MASK, GATHER_KV, COMBINE_SPLITS, TREE_MASK, ACCEPTED_LENGTH]

