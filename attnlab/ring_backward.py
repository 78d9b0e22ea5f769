"""The backward pass of ring attention (chapter 11) on ``torch.distributed``.

Chapter 9's ring attention (:mod:`attnlab.ring`) passes the key/value shards
around a ring of P ranks. Autograd cannot follow a tensor through
``isend``/``irecv``: the received buffer is a new leaf on another process,
with no ``grad_fn`` pointing back to the sender. So each rank wraps its
whole ring in one ``torch.autograd.Function`` (:class:`RingAttention`):

* forward: K, V travel around the ring as in chapter 9; the rank keeps only
  its own q, k, v, the output O and the logsumexp L of its queries;
* backward: K, V make the same trip again, and with each K/V shard travels
  its gradient accumulator dK, dV. At step t rank r holds the shard of
  source s = (r - t) mod P, adds this rank's share of dK_s, dV_s (tiles of
  chapter 11's :func:`attnlab.blocked_backward.tile_grads`, the same tiles
  skipped as in the forward) and passes K, V, dK, dV on to rank r + 1. The
  accumulator of shard s visits ranks s, s+1, ..., s+P-1; after the last
  step one more hop brings it home to rank s. dQ never travels: every rank
  adds the share of each visiting shard to its own queries' dQ.

:func:`run_ring_backward` starts P CPU processes with gloo (as
:func:`attnlab.ring.run_ring` does) and returns per-rank reports. Like ``run_ring``,
``run_ring_backward(jobs, P, code=[tile_grads, ring_backward])`` runs the caller's own
functions (chapter 11's cells) in the processes instead of the package's.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import inputs
from .blocked import attend_tiles, finish_states, start_states, tile_kind
from .blocked_backward import tile_grads
from .i18n import set_language, tr
from .ring import check_sizes, code_of, pass_on, run_ranks, shard_positions


def pass_tensors(tensors, group=None):
    """Send ``tensors`` to the next rank, receive the previous rank's: new tensors of the same shapes."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % P, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, r, (rank - 1) % P, group) for r in received]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


def ring_forward(q, k, v, positions, block, causal=True, group=None):
    """This rank's O and L [..., S] over the whole sequence; K, V travel as in chapter 9."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    states = start_states(q, v.shape[-1], block)
    tiles = 0
    for step in range(P):
        source = (rank - step) % P
        if step < P - 1:
            k_next, v_next, requests = pass_on(k, v, group)  # chapter 9: travels while we compute
        tiles += attend_tiles(states, q, k, v, positions[rank], positions[source], block, causal).computed
        if step < P - 1:
            for request in requests:
                request.wait()
            k, v = k_next, v_next
    lse = torch.cat([state.m + torch.log(state.l) for state in states], dim=-1)  # L [..., S]
    return finish_states(states, q.dtype), lse, tiles


def shard_backward(q, k, v, d_out, lse, D, q_pos, k_pos, block, causal=True):
    """One visiting shard: this rank's share of dQ (own queries) and of dK, dV (the visitor's keys)."""
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    tiles = 0
    S_q, S_k = q.shape[-2], k.shape[-2]
    for k_start in range(0, S_k, block):
        ks = slice(k_start, min(k_start + block, S_k))
        for q_start in range(0, S_q, block):
            qs = slice(q_start, min(q_start + block, S_q))
            kind = tile_kind(int(q_pos[qs][0]), int(q_pos[qs][-1]) + 1, int(k_pos[ks][0]),
                             int(k_pos[ks][-1]) + 1) if causal else "full"
            if kind == "skipped":
                continue  # skipped in the forward, skipped here
            blocked = k_pos[None, ks] > q_pos[qs, None] if kind == "diagonal" else None
            tile_dq, tile_dk, tile_dv = tile_grads(q[..., qs, :], k[..., ks, :], v[..., ks, :], d_out[..., qs, :],
                                                   lse[..., qs], D[..., qs], blocked)
            dq[..., qs, :] += tile_dq
            dk[..., ks, :] += tile_dk
            dv[..., ks, :] += tile_dv
            tiles += 1
    return dq, dk, dv, tiles


def ring_backward(q, k, v, out, lse, d_out, positions, block, causal=True, group=None, trace=None):
    """dQ, dK, dV of this rank's shard; ``trace`` (a list) gets (step, source of the K/V held) per step."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    D = (d_out.float() * out.float()).sum(dim=-1)  # rowsum(dO * O), own queries only
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk_acc = torch.zeros(k.shape, dtype=torch.float32, device=q.device)  # travels with K, V
    dv_acc = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    tiles = 0
    for step in range(P):
        source = (rank - step) % P
        share_dq, share_dk, share_dv, n = shard_backward(q, k, v, d_out, lse, D, positions[rank], positions[source],
                                                         block, causal)
        dq += share_dq
        dk_acc, dv_acc, tiles = dk_acc + share_dk, dv_acc + share_dv, tiles + n
        if trace is not None:
            trace.append((step, source))
        if step < P - 1:
            k, v, dk_acc, dv_acc = pass_tensors([k, v, dk_acc, dv_acc], group)  # K, V and their gradients, together
        elif P > 1:
            dk_acc, dv_acc = pass_tensors([dk_acc, dv_acc], group)  # the last hop: home to their owner
    return dq.to(q.dtype), dk_acc.to(k.dtype), dv_acc.to(v.dtype), tiles


class RingAttention(torch.autograd.Function):
    """One rank's ring attention as one autograd node: the ring's communication lives in
    forward and backward, where autograd cannot see it."""

    @staticmethod
    def forward(ctx, q, k, v, positions, block, causal, group, stats):
        out, lse, tiles = ring_forward(q, k, v, positions, block, causal, group)
        ctx.save_for_backward(q, k, v, out, lse, positions)
        ctx.block, ctx.causal, ctx.group, ctx.stats = block, causal, group, stats
        stats["forward_tiles"] = tiles
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse, positions = ctx.saved_tensors
        trace = []
        dq, dk, dv, tiles = ring_backward(q, k, v, out, lse, d_out, positions, ctx.block, ctx.causal, ctx.group,
                                          trace)
        ctx.stats.update(backward_tiles=tiles, trace=trace)
        return dq, dk, dv, None, None, None, None, None


# --------------------------------------------------------------------------- processes


@dataclass
class BackwardJob:
    T: int
    layout: str = "contiguous"
    block: int = 4
    heads: int = 2
    d: int = 8
    causal: bool = True
    seed: int = 0


@dataclass
class BackwardReport:
    job: BackwardJob
    rank: int
    forward_tiles: int
    backward_tiles: int
    trace: list = field(default_factory=list)  # (step, source of the K/V shard held)
    received_requires_grad: bool | None = True  # what a tensor received by irecv knows about gradients (None: P = 1)
    grads_match: bool = False  # dQ, dK, dV of this shard equal autograd of SDPA on the whole sequence
    out_matches: bool = False
    cpu_seconds: float = 0.0  # CPU time of this rank's process, start to report


def _functions(code: str) -> dict:
    """This module's functions, with the caller's source text run over them (as :func:`attnlab.ring.callers_code._functions`):
    the package's ring backward then calls the caller's ``tile_grads`` or ``ring_backward``."""
    namespace = dict(globals(), math=math)  # math: chapter 11's tile_grads needs it
    if code:
        package = code_of([pass_tensors, shard_backward, ring_backward, RingAttention, run_backward_jobs])
        exec(compile(package, __file__, "exec"), namespace)  # noqa: S102
        exec(compile(code, "<code given to run_ring_backward>", "exec"), namespace)  # noqa: S102 (the caller's code)
    return namespace


def run_backward_jobs(jobs, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    reports = []
    for job in jobs:
        positions = shard_positions(job.T, P, job.layout)
        generator = torch.Generator().manual_seed(job.seed)
        q_all, k_all, v_all, do_all = torch.randn(4, 1, job.heads, job.T, job.d, generator=generator).unbind(0)
        mine = positions[rank]
        q, k, v = (x[..., mine, :].clone().requires_grad_() for x in (q_all, k_all, v_all))
        stats = {}
        out = RingAttention.apply(q, k, v, positions, job.block, job.causal, group, stats)
        out.backward(do_all[..., mine, :])
        probe = pass_tensors([k.detach()], group)[0] if P > 1 else None  # a received tensor: no grad_fn (one rank receives nothing)
        ref = [x.clone().requires_grad_() for x in (q_all, k_all, v_all)]
        ref_out = F.scaled_dot_product_attention(*ref, is_causal=job.causal)
        ref_out.backward(do_all)
        tol = dict(atol=1e-5, rtol=1e-4)
        grads_match = all(torch.allclose(mine_t.grad, whole.grad[..., mine, :], **tol)
                          for mine_t, whole in zip((q, k, v), ref))
        reports.append(BackwardReport(job, rank, stats["forward_tiles"], stats["backward_tiles"], stats["trace"],
                                      None if probe is None else probe.requires_grad or probe.grad_fn is not None,
                                      grads_match,
                                      torch.allclose(out, ref_out[..., mine, :], **tol), time.process_time()))
    dist.barrier(group)
    return reports


def _worker(rank, P, port, jobs, results, lang, timeout_s, code=""):
    try:
        set_language(lang)
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(P))
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        try:
            results.put((rank, _functions(code)["run_backward_jobs"](jobs), None))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, None, traceback.format_exc()))


def run_ring_backward(jobs, P, timeout_s=120.0, code=None):
    """Start P gloo processes, run forward and backward of ring attention for each job:
    a list per job of P :class:`BackwardReport`. ``code``: the caller's own functions to run
    instead of the package's (``[tile_grads, ring_backward]``; see :func:`attnlab.ring.code_of`)."""
    P = inputs.whole_number("P", P, 1)
    code = code_of(code) if code is not None else ""
    if isinstance(jobs, BackwardJob):
        jobs = [jobs]
    if not jobs or not all(isinstance(job, BackwardJob) for job in jobs):
        raise TypeError(tr("ch11.error_jobs", got=inputs.describe(jobs)))
    for job in jobs:
        check_sizes(job.T, P, job.layout, job.block)
    reports = run_ranks(_worker, P, jobs, timeout_s, code, modules=("attnlab.ring_backward",))
    return [[reports[r][j] for r in range(P)] for j in range(len(jobs))]


def accumulator_route(P: int, source: int) -> list[int]:
    """The ranks the dK, dV accumulator of ``source``'s shard visits, then its owner again."""
    P = inputs.whole_number("P", P, 1)
    source = inputs.whole_number("source", source, 0, P - 1)
    return [(source + t) % P for t in range(P)] + ([source] if P > 1 else [])

