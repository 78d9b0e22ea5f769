"""Which tokens each rank holds (the layouts) and the tiles each rank computes at each ring step.

A layout maps the T tokens of one sequence onto P ranks (:func:`shard_positions`:
contiguous, striped or zigzag shards of S = T / P tokens). With a causal mask the
layout decides how much work each rank does: :func:`ring_schedule` lists every tile
of every step without running anything, :func:`expected_tiles` gives the closed
form of the counts.
"""

from __future__ import annotations

import torch

from .. import inputs
from ..blocked import tile_kind
from ..i18n import tr

LAYOUTS = ("contiguous", "striped", "zigzag")


# --------------------------------------------------------------------------- layouts


def shard_positions(T: int, P: int, layout: str) -> torch.Tensor:
    """Positions of the tokens each rank holds: [P, T // P], increasing in every row."""
    T, P = inputs.whole_number("T", T, 1), inputs.whole_number("P", P, 1)
    if layout not in LAYOUTS:
        raise ValueError(tr("ring.error_layout", layouts=", ".join(LAYOUTS), got=inputs.describe(layout)))
    parts = 2 * P if layout == "zigzag" else P
    if T % parts:
        raise ValueError(tr("ring.error_divisible", T=T, parts=parts, layout=layout, P=P))
    tokens = torch.arange(T)
    if layout == "contiguous":
        return tokens.view(P, T // P)  # rank r: r*S .. (r+1)*S - 1
    if layout == "striped":
        return tokens.view(T // P, P).T.contiguous()  # rank r: r, r+P, r+2P, ...
    chunks = tokens.view(2 * P, T // (2 * P))  # 2P chunks
    return torch.cat([chunks[:P], chunks.flip(0)[:P]], dim=1)  # rank r: chunk r, chunk 2P-1-r


def check_sizes(T: int, P: int, layout: str, block: int) -> None:
    """Raise a clear ValueError for sizes ring attention cannot use."""
    shard_positions(T, P, layout)
    inputs.whole_number("block", block, 1)  # any size from 1: the last tile of a shard may be shorter


# --------------------------------------------------------------------------- counting


def ring_schedule(T: int, P: int, layout: str, block: int, causal: bool = True) -> list[list[dict]]:
    """What every rank does at every step, without running anything.

    ``schedule[rank][step]`` = {"source": rank whose K/V arrive, "tiles":
    [(kind, query positions, key positions), ...]}, decided by the same
    :func:`attnlab.blocked.tile_kind` that :func:`ring_attention` uses.
    """
    check_sizes(T, P, layout, block)
    positions = shard_positions(T, P, layout)
    S = T // P
    schedule = []
    for rank in range(P):
        steps = []
        for step in range(P):
            source = (rank - step) % P
            tiles = []
            for q0 in range(0, S, block):
                qp = positions[rank, q0:q0 + block].tolist()
                for k0 in range(0, S, block):
                    kp = positions[source, k0:k0 + block].tolist()
                    kind = tile_kind(qp[0], qp[-1] + 1, kp[0], kp[-1] + 1) if causal else "full"
                    tiles.append((kind, qp, kp))
            steps.append({"source": source, "tiles": tiles})
        schedule.append(steps)
    return schedule


def expected_tiles(T: int, P: int, layout: str, block: int, causal: bool = True) -> list[list[int]]:
    """Closed form of the tiles each rank computes at each step: [rank][step].

    With n = S / block tiles per shard side and s = (r - t) mod P the source:

    * not causal:  n^2 at every step;
    * contiguous:  n(n+1)/2 at step 0 (own block), n^2 when s < r, 0 when s > r;
    * striped:     n(n+1)/2 at every step (n(n-1)/2 when block = 1 and s > r);
    * zigzag:      n^2/2 + n/2 at step 0, n^2/2 at every other step.
    """
    check_sizes(T, P, layout, block)
    if not isinstance(causal, bool):  # "no" is a true string: the causal table, silently
        raise TypeError(tr("error.flag", name="causal", got=inputs.describe(causal)))
    S = T // P
    chunk = S // 2 if layout == "zigzag" else S
    if chunk % block:
        raise ValueError(tr("ring.error_block", block=block, S=chunk))
    n = S // block
    table = []
    for rank in range(P):
        row = []
        for step in range(P):
            source = (rank - step) % P
            if not causal:
                row.append(n * n)
            elif layout == "contiguous":
                row.append(n * (n + 1) // 2 if source == rank else (n * n if source < rank else 0))
            elif layout == "striped":
                row.append(n * (n - 1) // 2 + (0 if block == 1 and source > rank else n))
            else:
                row.append(n * n // 2 + (n // 2 if source == rank else 0))
        table.append(row)
    return table
