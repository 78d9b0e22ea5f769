"""Tree speculation (chapter 12): several candidates per step, checked in one target pass.

A chain of k proposals is lost from its first wrong token on. A tree keeps several candidates
at each depth (the draft's best b tokens), and the target checks all of its branches in one
pass (SpecInfer, Miao et al. 2024; Medusa, Cai et al. 2024). The entries of a step are the last
accepted token (the root, entry 0) and the tree's nodes in breadth-first order; ``parents[i]``
is the entry that entry i continues (-1 for the root).

- **The tree mask** (:func:`tree_mask`): an entry reads the whole cache, itself and its
  ancestors, never its siblings or cousins: each branch is a sequence of its own.
- **Positions from the depth**: an entry at depth t sits at position cache_len + t, whatever
  its index in the step (several entries share a position).
- **Acceptance** (:func:`accept_path`): from the root, follow the child whose token is the
  target's choice, as long as there is one; the target's choice after the last accepted
  entry is the next token.
- **The cache** (:func:`keep_path`): the step wrote keys and values for every entry; the
  accepted path's are moved to the positions they belong at, the rest are dropped.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from .chunked_prefill import check_model, forward_with_mask
from .gpt import KVCache
from .i18n import tr
from .inputs import describe, whole_number
from .speculative import SpeculationStats, check_draft


def tree_mask(parents, cache_len):
    check_parents(parents)  # a clear error unless every parent comes before its child
    cache_len = whole_number("cache_len", cache_len, low=0)
    N = len(parents)
    allowed = torch.zeros(N, cache_len + N, dtype=torch.bool)  # [N, cache_len + N]
    allowed[:, :cache_len] = True  # every entry reads the whole cache
    for i in range(N):
        j = i
        while j != -1:  # i itself, its parent, its parent's parent, ... up to the root
            allowed[i, cache_len + j] = True
            j = parents[j]
    return allowed


def check_parents(parents) -> list[int]:
    if isinstance(parents, torch.Tensor):
        parents = parents.tolist()
    if not isinstance(parents, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parents):
        raise TypeError(tr("ch12.err_parents_type", got=describe(parents)))
    bad = [i for i, p in enumerate(parents) if not -1 <= p < i]
    if bad:
        raise ValueError(tr("ch12.err_parents", i=bad[0], parent=parents[bad[0]]))
    return list(parents)


def tree_depths(parents) -> list[int]:
    """Depth of every entry: 0 for a root (parent -1), one more than its parent otherwise."""
    depths = []
    for p in check_parents(parents):
        depths.append(0 if p == -1 else depths[p] + 1)
    return depths


def tree_shape(branching) -> list[int]:
    """Parents of a tree with ``branching[t]`` children under every entry of depth t, root first."""
    branching = check_branching(branching)
    parents, level = [-1], [0]
    for b in branching:
        new = []
        for entry in level:
            new += [entry] * b
        level = list(range(len(parents), len(parents) + len(new)))
        parents += new
    return parents


def check_branching(branching, high: int | None = None) -> list[int]:
    """A tree's shape: a non-empty list of children counts per depth, each in 1..high, e.g. (2, 2, 1)."""
    if isinstance(branching, (str, bytes)) or not isinstance(branching, (list, tuple)) or not branching:
        raise TypeError(tr("ch12.err_branching", got=describe(branching)))
    return [whole_number("branching", b, 1, high) for b in branching]


def accept_path(parents, tokens, choices):
    """Entries accepted: the root, then the child whose token is the target's choice, as long as
    one exists. ``tokens`` and ``choices`` [N] are the entries' tokens and the target's greedy pick
    after each entry."""
    path = [0]
    while True:
        children = [c for c, p in enumerate(parents) if p == path[-1] and tokens[c] == choices[path[-1]]]
        if not children:
            return path
        path.append(children[0])


def keep_path(cache: KVCache, start: int, path: list[int]) -> None:
    """The step wrote entry i at cache position start + i; keep the path's entries, in order, at
    start, start + 1, ... and drop the rest (``cache.pos`` = start + len(path))."""
    index = torch.tensor([start + i for i in path], device=cache.k.device)
    cache.k[:, :, :, start:start + len(path)] = cache.k[:, :, :, index]  # the index copies before the write
    cache.v[:, :, :, start:start + len(path)] = cache.v[:, :, :, index]
    cache.pos = start + len(path)


@torch.no_grad()
def draft_tree(draft, cache: KVCache, tokens: list[int], branching, stats: SpeculationStats):
    """The draft's tree: ``branching[t]`` best tokens under every entry of depth t, grown one
    depth per draft pass under the tree mask. Returns (parents, tokens) of the step's entries."""
    device = draft.token_embedding.weight.device
    cache.pos = min(cache.pos, len(tokens) - 1)
    if cache.pos < len(tokens) - 1:  # catch up on the tokens accepted since its last step
        draft(torch.tensor([tokens[cache.pos:-1]], device=device), cache=cache)
        stats.draft_passes += 1
    start = cache.pos
    parents, entry_tokens = [-1], [tokens[-1]]
    level = [0]
    for b in branching:
        allowed = tree_mask(parents, start)[level[0]:]  # the rows of the newest depth
        depths = tree_depths(parents)
        fed = torch.tensor([[entry_tokens[i] for i in level]], device=device)
        positions = torch.tensor([start + depths[i] for i in level])
        logits = forward_with_mask(draft, fed, cache, allowed.to(device), positions)[0]  # [len(level), V]
        stats.draft_passes += 1
        best = logits.topk(b, dim=-1)
        stats.min_lead = min(stats.min_lead, float(_gaps(logits, b)))
        new_level = []
        for row, entry in enumerate(level):
            for token in best.indices[row].tolist():
                new_level.append(len(parents))
                parents.append(entry)
                entry_tokens.append(token)
        level = new_level
    cache.pos = start  # the draft keeps nothing of the tree: the accepted tokens are fed again next step
    return parents, entry_tokens


def _gaps(logits: torch.Tensor, b: int) -> torch.Tensor:
    """How far the b-th best logit is ahead of the (b+1)-th, at its closest: the draft's closest call
    (the order among the b candidates changes the entries' order, not which tokens are proposed)."""
    top = logits.topk(min(b + 1, logits.size(-1)), dim=-1).values
    if top.size(-1) <= b:
        return torch.tensor(math.inf)
    return (top[..., b - 1] - top[..., b]).min()


@torch.no_grad()
def tree_generate(target, draft, ids, max_new_tokens, branching=(2, 2, 1)):
    """Greedy decoding of ``target`` from ``ids`` [1, T0] with a tree of the draft's candidates per
    target pass. Returns the tokens [1, T0 + max_new_tokens], the stats and the target's cache."""
    check_model(target)
    target.check_idx(ids)
    if ids.size(0) != 1 or ids.size(1) == 0:
        raise ValueError(tr("ch12.err_one_prompt", got=describe(ids)))
    max_new_tokens = whole_number("max_new_tokens", max_new_tokens, low=1)
    branching = check_branching(branching)
    parents = tree_shape(branching)
    total = ids.size(1) + max_new_tokens
    room = total + len(parents)  # the last step writes all its entries before it keeps a path
    if total > target.config.block_size:  # the trees stop at the end: no candidate sits past position total - 1
        raise ValueError(tr("ch12.err_room", last=total - 1, block_size=target.config.block_size,
                            room=target.config.block_size - ids.size(1)))
    check_draft(target, draft, ids.size(1), max_new_tokens)
    device = target.token_embedding.weight.device
    # a step writes every entry into its own slot, so the cache needs more slots than the sequence has
    # positions: a cache built for a config whose block_size is that room (the model's positions still end at its own)
    caches = [KVCache(replace(m.config, block_size=max(room, m.config.block_size)), 1, room, device=device,
                      dtype=m.token_embedding.weight.dtype) for m in (target, draft)]
    tokens, stats = ids[0].tolist(), SpeculationStats()
    if len(tokens) > 1:
        target(ids[:, :-1], cache=caches[0])
    while len(tokens) < total:
        start = caches[0].pos
        depth = min(len(branching), total - len(tokens) - 1)  # no candidate past the end, as a chain proposes
        if depth:
            parents, entry_tokens = draft_tree(draft, caches[1], tokens, branching[:depth], stats)
        else:  # the last token: the target's own choice, nothing to propose
            parents, entry_tokens = [-1], [tokens[-1]]
        depths = torch.tensor(tree_depths(parents))
        logits = forward_with_mask(target, torch.tensor([entry_tokens], device=device), caches[0],
                                   tree_mask(parents, start).to(device), start + depths)[0]  # [N, V]
        choices = logits.argmax(dim=-1).tolist()
        path = accept_path(parents, entry_tokens, choices)
        stats.note_lead(logits[path])
        tokens += [entry_tokens[i] for i in path[1:]] + [choices[path[-1]]]  # never past the end: the tree stops there
        keep_path(caches[0], start, path)
        stats.target_passes += 1
        stats.proposed += len(parents) - 1
        stats.accepted += len(path) - 1
        stats.accepted_per_pass.append(len(path) - 1)
    stats.new_tokens = max_new_tokens
    caches[0].pos = min(caches[0].pos, total - 1)  # as after greedy decoding: every token but the last is cached
    return torch.tensor([tokens], device=ids.device), stats, caches[0]


def tree_nodes(branching) -> int:
    """Candidates in a tree (the root not counted): b0 + b0 b1 + b0 b1 b2 + ..."""
    return sum(math.prod(branching[:t + 1]) for t in range(len(branching)))
