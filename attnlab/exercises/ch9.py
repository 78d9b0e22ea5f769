"""Exercise 9 (exercises/src/09-ring-attention.md): the token -> rank layouts, the tiles each
rank computes at each ring step under the causal mask, folding an arriving K/V block
into the online softmax (pure tensor math in one process), and ``pass_on`` on a real ring:
graded by starting 2 or 3 gloo processes that run the course's ring attention with it.
"""

from __future__ import annotations

import builtins

import torch
import torch.distributed as dist

from ..blocked import OnlineSoftmax, tile_kind
from ..grader import Case, Problem, Task, compare_outputs, note
from ..grader.model import patched_names, restore_torch, torch_attributes
from ..i18n import tr
from ..ring import expected_tiles, ring_schedule
from ..ring import shard_positions as course_shard_positions
from . import case_device

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


SHARD_POSITIONS = Task(
    id="ch9.shard_positions", exercise=EXERCISE, reference=shard_positions, cases=layout_cases, call=_as_tensor,
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


FOLD_BLOCK = Task(
    id="ch9.fold_block", exercise=EXERCISE, reference=fold_block, cases=fold_cases,
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

# --------------------------------------------------------------------------
# 4. pass_on(k, v, group=None) -> (k_next, v_next, requests): start sending k, v to rank + 1
#    and receiving rank - 1's, on a real gloo ring; graded through run_ring(..., code=...)


def pass_on(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)  # the buffers the receives fill
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


RING_CASES = [(3, "contiguous", True, 1), (2, "striped", True, 2), (3, "zigzag", True, 3), (3, "striped", False, 4)]  # P, layout, causal, seed
RING_TIMEOUT_S = 8.0  # a deadlocked ring is stopped after this; below the grader's 10 s per call
_warm = []


def _warm_up():
    """The first launch starts the forkserver (seconds); later ones take a fraction of one. Done
    while the cases are made, outside the time limit of the learner's calls."""
    from ..ring import RingJob, run_ring

    if not _warm:
        run_ring([RingJob(T=4, block=2, heads=1, d=2, check=False)], 2)
        _warm.append(True)


def ring_cases(generator):
    _warm_up()
    return [Case((P, layout, causal, seed), label=f"P={P}, layout={layout!r}, causal={causal}")
            for P, layout, causal, seed in RING_CASES]


EDITED_MARK = "attnlab.grader: pass_on edited k or v in place"


def _watched_pass_on(k, v, group=None):
    """The learner's pass_on (``_learner_pass_on`` on the ranks), watched: once its requests are
    done, the caller's k and v must be what they were (this step still computes with them). What the
    call changed besides is noted in the rank's ``rank_notes`` (run_ring's report brings them back) and
    put back: torch's functions replaced, the default dtype, torch's global RNG reseeded; and a second
    call with new k and v that hands back the first call's buffers or requests is kept (memoized)."""
    import torch as _torch

    from attnlab.grader.model import patched_names, restore_torch, torch_attributes

    seen = globals().setdefault("_pass_on_seen", [])  # per earlier call: (k given, k_next, v_next, requests)
    reseeded = []
    seeders = [(space, name, getattr(space, name)) for space in (_torch, _torch.random)
               for name in ("manual_seed", "seed", "set_rng_state") if hasattr(space, name)]

    def seeder(space, name, original):
        def reseeds(*args, **kwargs):
            reseeded.append(f"{space.__name__}.{name}")
            return original(*args, **kwargs)

        return reseeds

    before, dtype = torch_attributes(), _torch.get_default_dtype()
    k_before, v_before = k.clone(), v.clone()
    for space, name, original in seeders:
        setattr(space, name, seeder(space, name, original))
    try:
        k_next, v_next, requests = _learner_pass_on(k, v, group)  # noqa: F821 - defined on the ranks
    finally:
        for space, name, original in seeders:
            setattr(space, name, original)
        patched = patched_names(before)
        if patched:
            rank_notes.append(("grader.patched_torch", {"name": patched[0]}))  # noqa: F821 - the rank's notes
            restore_torch(before)
        if _torch.get_default_dtype() != dtype:
            rank_notes.append(("grader.changed_default_dtype", {"dtype": str(_torch.get_default_dtype())}))  # noqa: F821
            _torch.set_default_dtype(dtype)
        if reseeded:
            rank_notes.append(("grader.reseeds_rng", {"name": reseeded[0]}))  # noqa: F821
    old = [r for *_, earlier in seen for r in earlier]
    kept = any(any(r is o for o in old) for r in requests)  # a gloo request waited on twice never returns
    for request in requests:
        if not any(request is o for o in old):
            request.wait()
    if not (torch.equal(k, k_before) and torch.equal(v, v_before)):
        raise RuntimeError("attnlab.grader: pass_on edited k or v in place")
    for k_given, k_out, v_out, _ in seen:  # new k given, an earlier answer handed back
        if (not torch.equal(k_before, k_given) and k_out.shape == k_next.shape and torch.equal(k_out, k_next)
                and v_out.shape == v_next.shape and torch.equal(v_out, v_next)):
            kept = True
    if kept:
        rank_notes.append(("memoized", {}))  # noqa: F821
    seen.append((k_before, k_next.clone(), v_next.clone(), list(requests)))
    return k_next, v_next, []  # waited for here (a gloo request waited on twice never returns)


class _Done:
    """A request that has finished (what the stand-in for torch.distributed hands back)."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


class _OneRank:
    """A stand-in for ``torch.distributed`` on rank 0 of 2, moving nothing: it records the
    devices of the tensors the learner's pass_on sends and receives."""

    def __init__(self):
        self.devices = []

    def __getattr__(self, name):
        return getattr(dist, name)

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 2

    def P2POp(self, op, tensor, peer=None, group=None, tag=0, **kwargs):  # noqa: N802 - dist's name
        return (op, tensor)

    def _use(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)
        return _Done()

    isend = irecv = _use

    def send(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)

    def recv(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)
        return 1

    def batch_isend_irecv(self, ops):
        return [op(tensor) for op, tensor in ops]


def _cpu_buffers(fn) -> bool:
    """Does ``fn`` make its buffers on the CPU? Its source runs once here, with k and v on the meta
    device and a stand-in for torch.distributed: on GPUs (NCCL) a CPU tensor cannot be sent or
    received. What cannot run this way (a typo, values read) says nothing: the ring shows it. A torch
    function it replaces, or the default dtype it sets, is put back at once (the ring is still to run
    here) and noted."""
    from .. import ring
    from ..ring import code_of

    before, dtype = torch_attributes(), torch.get_default_dtype()
    try:
        namespace = dict(vars(ring), dist=_OneRank())
        exec(compile(code_of({"pass_on": fn}), "<pass_on>", "exec"), namespace)  # noqa: S102 - the learner's code
        k, v = torch.empty(1, 1, 6, 4, device="meta"), torch.empty(1, 1, 6, 4, device="meta")
        k_next, v_next, requests = namespace["pass_on"](k, v, None)
        used = namespace["dist"].devices + [t.device.type for t in (k_next, v_next) if isinstance(t, torch.Tensor)]
    except Exception:  # noqa: BLE001
        return False
    finally:
        patched = patched_names(before)
        if patched:
            note(Problem("grader.patched_torch", {"name": patched[0]}))
            restore_torch(before)
        if torch.get_default_dtype() != dtype:
            note(Problem("grader.changed_default_dtype", {"dtype": str(torch.get_default_dtype())}))
            torch.set_default_dtype(dtype)
    return any(device != "meta" for device in used)


def _on_the_ring(fn, P, layout, causal, seed):
    """Run the course's ring_attention with ``fn`` as its pass_on on P gloo processes; return
    the attention output of the whole sequence [1, 1, T, d], assembled from every rank, and
    what the ring saw besides: ``tensor([k or v edited in place, buffers made on the CPU, an earlier answer
    handed back])``; what the ranks noted besides (torch patched, the default dtype changed, the RNG reseeded)
    is noted for the grader (``note``)."""
    from ..ring import RingJob, RingTimeout, run_ring
    from ..ring import shard_positions as positions_of

    _warm_up()
    T = 24
    flags = torch.tensor([0, int(_cpu_buffers(fn)), 0])
    out = torch.full((1, 1, T, 4), float("nan"), dtype=torch.float32)
    job = RingJob(T=T, layout=layout, causal=causal, block=2, heads=1, d=4, check=False, keep_output=True, seed=seed)
    try:
        result = run_ring([job], P, code={"_learner_pass_on": fn, "pass_on": _watched_pass_on},
                          timeout_s=RING_TIMEOUT_S)[0]
    except RingTimeout:
        raise RuntimeError(tr("ch9.ex_deadlock", seconds=RING_TIMEOUT_S)) from None
    except RuntimeError as error:  # a rank failed: its traceback ends with the learner's own error
        if EDITED_MARK in str(error):
            flags[0] = 1
            return out, flags
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        last = lines[-1] if lines else str(error)
        name, _, message = last.partition(": ")
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):  # the same type here (NotImplementedError: a stub)
            raise kind(message) from None
        raise RuntimeError(last) from None
    for rank, report in enumerate(result.ranks):
        out[..., positions_of(T, P, layout)[rank], :] = torch.tensor(report.output)
        for key, params in report.notes:
            if key == "memoized":
                flags[2] = 1
            else:
                note(Problem(key, params))
    return out, flags


def _compare_ring(expected, got):
    """The output, and what the ring saw besides (k or v edited in place, buffers on the CPU)."""
    (expected_out, expected_flags), (got_out, got_flags) = expected, got
    problems = [Problem(key) for key, flag in zip(("grader.ch9.pass_on.edits_input", "grader.ch9.pass_on.cpu_buffer"),
                                                  got_flags.tolist()) if flag]
    if not got_flags[0]:  # edited: the ring stopped, there is no output to compare
        values = compare_outputs(expected_out, got_out)
        if got_flags[2]:  # the second call handed back the first one's answer: that is why the values differ
            problems.insert(0, Problem("grader.memoized", detail=values))
        elif values is not None:
            problems.append(values)
    if not problems:
        return None
    return Problem(problems[0].key, problems[0].params, problems[0].detail, problems[1:])


def wrong_direction(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank - 1) % P, group), dist.P2POp(dist.isend, v, (rank - 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank + 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank + 1) % P, group)])
    return k_next, v_next, requests


def k_and_v_swapped(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def keeps_its_own(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k, v, requests  # the received buffers are never used


def receives_first(k, v, group=None):
    """Correct: the same four operations, the receives listed first."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group),
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group)])
    return k_next, v_next, requests


def taking_turns(k, v, group=None):
    """Correct: blocking calls, even ranks send first and odd ranks receive first (nothing to wait for)."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    for sending in (rank % 2 == 0, rank % 2 == 1):
        if sending:
            dist.send(k, (rank + 1) % P, group)
            dist.send(v, (rank + 1) % P, group)
        else:
            dist.recv(k_next, (rank - 1) % P, group)
            dist.recv(v_next, (rank - 1) % P, group)
    return k_next, v_next, []


PASS_ON = Task(
    id="ch9.pass_on", exercise=EXERCISE, reference=pass_on, cases=ring_cases,
    mutants={"wrong_direction": wrong_direction, "k_and_v_swapped": k_and_v_swapped, "keeps_its_own": keeps_its_own},
    alternatives=[receives_first, taking_turns],
    call=_on_the_ring, compare=_compare_ring,
)

TASKS = [SHARD_POSITIONS, TILES_PER_STEP, FOLD_BLOCK, PASS_ON]
