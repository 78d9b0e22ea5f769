"""Exercise 9, tasks 1 and 2: the token -> rank layouts (``shard_positions``) and the tiles each
rank computes at each ring step under the causal mask (``tiles_per_step``, which uses task 1's
reference).
"""

from __future__ import annotations

import torch

from ...blocked import tile_kind
from ...grader import Case, Contract, Task
from ...ring import expected_tiles, ring_schedule
from ...ring import shard_positions as course_shard_positions

EXERCISE = "09-ring-attention"


# --------------------------------------------------------------------------
# 1. shard_positions(T, P, layout) -> [P, T // P] long: the positions each rank holds,
#    increasing in every row; layout "contiguous", "striped" or "zigzag"


def shard_positions(T, P, layout):
    tokens = torch.arange(T)
    if layout == "contiguous":
        return tokens.view(P, T // P)  # rank r: r*S .. (r+1)*S - 1
    if layout == "striped":
        return tokens.view(T // P, P).T.contiguous()  # rank r: r, r+P, r+2P, ...
    chunks = tokens.view(2 * P, T // (2 * P))  # zigzag: 2P chunks
    return torch.cat([chunks[:P], chunks.flip(0)[:P]], dim=1)  # rank r: chunk r and chunk 2P-1-r


LAYOUT_CASES = [(12, 3, "contiguous"), (10, 2, "contiguous"), (12, 4, "striped"), (15, 3, "striped"),
                (8, 2, "striped"), (12, 3, "zigzag"), (24, 4, "zigzag"), (8, 2, "zigzag"), (20, 5, "zigzag")]
# the notebook shows T=16, P=4


def layout_cases(generator):
    return [Case((T, P, layout), label=f"T={T}, P={P}, layout={layout!r}") for T, P, layout in LAYOUT_CASES]


def _as_tensor(fn, *args):
    """Accept a list of lists, a NumPy array and any integer dtype as well as an int64 tensor:
    the positions are what is graded."""
    got = fn(*args)
    if isinstance(got, (list, tuple)) or type(got).__module__ == "numpy":
        try:
            got = torch.as_tensor(got) if type(got).__module__ == "numpy" else torch.tensor(got)
        except (TypeError, ValueError, RuntimeError):
            return got
    if isinstance(got, torch.Tensor) and not got.is_floating_point() and not got.is_complex() \
            and got.dtype != torch.bool:
        return got.long()
    return got


def _layout_mutant(zigzag="mirror", striped="transpose", ignore_layout=False):
    def positions(T, P, layout):
        tokens = torch.arange(T)
        if ignore_layout or layout == "contiguous":
            return tokens.view(P, T // P)
        if layout == "striped":
            rows = tokens.view(T // P, P).T
            return rows.roll(-1, dims=0).contiguous() if striped == "off_by_one" else rows.contiguous()
        chunks = tokens.view(2 * P, T // (2 * P))
        if zigzag == "consecutive":
            return torch.cat([chunks[:P], chunks[P:]], dim=1)  # chunk r and chunk P + r
        if zigzag == "late_first":
            return torch.cat([chunks.flip(0)[:P], chunks[:P]], dim=1)  # chunk 2P-1-r before chunk r
        if zigzag == "reversed":
            return torch.cat([chunks[:P], tokens.flip(0).view(2 * P, T // (2 * P))[:P]], dim=1)
        return torch.cat([chunks[:P], chunks.flip(0)[:P]], dim=1)

    return positions


def _by_rule(T, P, layout):
    """Correct: which rank holds token t, then every rank's tokens in order."""
    if layout == "contiguous":
        owner = [t // (T // P) for t in range(T)]
    elif layout == "striped":
        owner = [t % P for t in range(T)]
    else:
        chunk = T // (2 * P)
        owner = [min(t // chunk, 2 * P - 1 - t // chunk) for t in range(T)]
    return [[t for t in range(T) if owner[t] == r] for r in range(P)]


def _arithmetic(T, P, layout):
    """Correct: closed forms with index arithmetic on a [P, S] grid."""
    S = T // P
    r = torch.arange(P)[:, None]
    i = torch.arange(S)[None, :]
    if layout == "contiguous":
        return r * S + i
    if layout == "striped":
        return i * P + r
    c = S // 2
    return torch.where(i < c, r * c + i, (2 * P - 1 - r) * c + (i - c))


def shard_draw(d):
    """P ranks of S positions each (S even for zigzag), T up to 131072 (positions past int16 and uint8)."""
    layout, P = d.choice("layout", ("contiguous", "striped", "zigzag")), d.size("P", 1, 8, edges=(1, 2, 64))
    S = d.size("S", 1, 40, edges=(1, 2, 2048))
    if layout == "zigzag" and S % 2:
        S += 1
    return Case((P * S, P, layout), label=f"T={P * S}, P={P}, layout={layout!r}")


def tiles_draw(d):
    """P ranks, S positions each in tiles of ``block``, each its own choice (block divides S, for zigzag S / 2
    too): another block for the same T, P and layout is one choice away."""
    layout, P = d.choice("layout", ("contiguous", "striped", "zigzag")), d.size("P", 1, 6, edges=(1, 2))
    half = d.size("S/2" if layout == "zigzag" else "S", 1, 12, edges=(1, 12))
    S = 2 * half if layout == "zigzag" else half
    block = d.choice("block", tuple(b for b in range(1, half + 1) if half % b == 0))
    return Case((P * S, P, layout, block), label=f"T={P * S}, P={P}, layout={layout!r}, block={block}")


SHARD_POSITIONS = Task(
    id="ch9.shard_positions", exercise=EXERCISE, reference=shard_positions, cases=layout_cases, call=_as_tensor,
    contract=Contract(draw=shard_draw), input_names=("T", "P", "layout"),
    mutants={
        "zigzag_consecutive": _layout_mutant(zigzag="consecutive"),
        "zigzag_reversed": _layout_mutant(zigzag="reversed"),
        "zigzag_late_first": _layout_mutant(zigzag="late_first"),
        "striped_off_by_one": _layout_mutant(striped="off_by_one"),
        "layout_ignored": _layout_mutant(ignore_layout=True),
    },
    course_copies=("attnlab.ring.shard_positions",),
    alternatives=[
        _by_rule,
        _arithmetic,
        lambda T, P, layout: torch.arange(T).view(-1, P).T if layout == "striped" else shard_positions(T, P, layout),
    ],
)


# --------------------------------------------------------------------------
# 2. tiles_per_step(T, P, layout, block) -> [P][P] ints: the tiles rank r computes at ring
#    step t (keys of rank (r - t) mod P), causal mask, tiles of `block` positions per side


def tiles_per_step(T, P, layout, block):
    positions = shard_positions(T, P, layout)  # [P, S]
    S = T // P
    table = []
    for rank in range(P):
        row = []
        for step in range(P):
            source = (rank - step) % P  # whose keys rank holds at this step
            computed = 0
            for q0 in range(0, S, block):
                q = positions[rank, q0:q0 + block]
                for k0 in range(0, S, block):
                    k = positions[source, k0:k0 + block]
                    computed += bool(k[0] <= q[-1])  # skipped only when every key comes after every query
            row.append(computed)
        table.append(row)
    return table


TILE_CASES = [(24, 3, "contiguous", 4), (32, 2, "contiguous", 4), (24, 3, "striped", 2), (24, 4, "striped", 3),
              (12, 3, "striped", 1), (24, 3, "zigzag", 2), (32, 4, "zigzag", 2), (24, 2, "zigzag", 3)]
# (T, P, layout, block); the notebook shows T=16, P=4, contiguous, block=2


def tile_cases(generator):
    return [Case((T, P, layout, block), label=f"T={T}, P={P}, layout={layout!r}, block={block}")
            for T, P, layout, block in TILE_CASES]


def _as_lists(fn, *args):
    """Accept a tensor or a NumPy array as well as a list of lists."""
    got = fn(*args)
    if isinstance(got, torch.Tensor) and got.dim() == 2:
        return got.tolist()
    if type(got).__module__ == "numpy" and getattr(got, "ndim", 0) == 2:
        return got.tolist()
    return got


def _tiles_mutant(direction=-1, local=False, causal=True, count="computed", rule="first_key", transpose=False):
    def tiles(T, P, layout, block):
        positions = shard_positions(T, P, layout)
        S = T // P
        if local:
            positions = torch.arange(S).expand(P, S)  # indices inside the shard, not positions
        table = []
        for rank in range(P):
            row = []
            for step in range(P):
                source = (rank + direction * step) % P
                computed = skipped = 0
                for q0 in range(0, S, block):
                    q = positions[rank, q0:q0 + block]
                    for k0 in range(0, S, block):
                        k = positions[source, k0:k0 + block]
                        visible = {"first_key": k[0] <= q[-1], "strict": k[0] < q[-1],
                                   "full_only": k[-1] <= q[0]}[rule]
                        if not causal or visible:
                            computed += 1
                        else:
                            skipped += 1
                row.append(computed if count == "computed" else skipped)
            table.append(row)
        return [list(r) for r in zip(*table)] if transpose else table

    return tiles


def _from_schedule(T, P, layout, block):
    """Correct: count the non-skipped tiles of the course's ring_schedule."""
    return [[sum(kind != "skipped" for kind, _, _ in step["tiles"]) for step in rank]
            for rank in ring_schedule(T, P, layout, block)]


def _pairwise(T, P, layout, block):
    """Correct: a tile is computed when at least one of its (query, key) pairs is allowed."""
    positions = shard_positions(T, P, layout)
    S = T // P
    n = S // block
    table = torch.zeros(P, P, dtype=torch.long)
    for rank in range(P):
        for step in range(P):
            q = positions[rank].view(n, block)  # [n, block]
            k = positions[(rank - step) % P].view(n, block)
            allowed = k[None, :, None, :] <= q[:, None, :, None]  # [n_q, n_k, bq, bk]
            table[rank, step] = int(allowed.flatten(2).any(-1).sum())
    return table


def _with_tile_kind(T, P, layout, block):
    """Correct: chapter 3's tile_kind on the first and last position of each tile."""
    positions = shard_positions(T, P, layout).tolist()
    S = T // P
    return [[sum(tile_kind(positions[r][a], positions[r][a + block - 1] + 1,
                           positions[(r - t) % P][b], positions[(r - t) % P][b + block - 1] + 1) != "skipped"
                 for a in range(0, S, block) for b in range(0, S, block))
             for t in range(P)] for r in range(P)]


TILES_PER_STEP = Task(
    id="ch9.tiles_per_step", exercise=EXERCISE, reference=tiles_per_step, cases=tile_cases, call=_as_lists,
    contract=Contract(draw=tiles_draw), input_names=("T", "P", "layout", "block"),
    mutants={
        "wrong_direction": _tiles_mutant(direction=1),
        "local_indices": _tiles_mutant(local=True),
        "no_mask": _tiles_mutant(causal=False),
        "counts_skipped": _tiles_mutant(count="skipped"),
        "strict_comparison": _tiles_mutant(rule="strict"),
        "full_tiles_only": _tiles_mutant(rule="full_only"),
        "transposed": _tiles_mutant(transpose=True),
    },
    course_copies=("attnlab.ring.expected_tiles", "attnlab.ring.ring_schedule"),
    alternatives=[
        _pairwise,
        _with_tile_kind,
    ],
)
