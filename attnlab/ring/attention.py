"""What every rank runs: ring attention, the all-gather alternative, and the passes alone.

Each function works on this rank's shard of q, k, v [..., S, d] inside an initialized
process group, folds the arriving key/value shards into chapter 3's online softmax
(:func:`attnlab.blocked.attend_tiles`) and returns what it did at every step
(:class:`RingStats`: tiles, bytes sent, times).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..blocked import TileCounts, attend_tiles, finish_states, start_states
from .layouts import shard_positions


@dataclass
class StepStats:
    source: int  # rank whose keys and values were folded in at this step
    counts: TileCounts  # tiles computed / skipped, score FLOPs
    bytes_sent: int  # K and V passed on to the next rank
    start: float  # perf_counter() when the step began
    computed: float  # ... when its tiles were done
    done: float  # ... when the next block had arrived
    cpu: float = 0.0  # CPU seconds of this thread while computing (on a GPU: only the launches)

    @property
    def busy(self) -> float:
        return self.computed - self.start

    @property
    def wait(self) -> float:
        return self.done - self.computed


@dataclass
class RingStats:
    rank: int
    steps: list[StepStats] = field(default_factory=list)

    @property
    def counts(self) -> TileCounts:
        return sum((s.counts for s in self.steps), TileCounts())

    @property
    def bytes_sent(self) -> int:
        return sum(s.bytes_sent for s in self.steps)


def pass_on(k, v, group=None):
    """Start sending ``k``, ``v`` to the next rank and receiving the previous rank's.

    Returns (k_next, v_next, requests): the buffers are filled once every request is waited on.
    """
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def ring_attention(q, k, v, layout="contiguous", causal=True, block=64, group=None):
    """This rank's shard of attention over the whole sequence.

    q, k, v: this rank's shard [..., S, d]; returns (out [..., S, d_v], RingStats).
    """
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    positions = shard_positions(P * q.shape[-2], P, layout).to(q.device)  # [P, S]
    states = start_states(q, v.shape[-1], block)  # chapter 3: one online softmax per query tile
    stats = RingStats(rank)
    for step in range(P):
        start = clock(q.device)
        source = (rank - step) % P  # whose keys and values we hold now
        if step < P - 1:
            k_next, v_next, requests = pass_on(k, v, group)  # travels while we compute
        cpu = time.thread_time()
        counts = attend_tiles(states, q, k, v, positions[rank], positions[source], block, causal)
        computed, cpu = clock(q.device), time.thread_time() - cpu
        sent = 0
        if step < P - 1:
            for request in requests:
                request.wait()
            k, v, sent = k_next, v_next, k.nbytes + v.nbytes
        stats.steps.append(StepStats(source, counts, sent, start, computed, clock(q.device), cpu))
    return finish_states(states, q.dtype), stats


def allgather_attention(q, k, v, layout="contiguous", causal=True, block=64, group=None):
    """The alternative: gather every rank's K and V first, then compute.

    Same result and the same bytes received as :func:`ring_attention`, but
    every rank holds the K and V of the whole sequence at once, and nothing
    is computed while they travel. Returns (out, RingStats with one step).
    """
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    positions = shard_positions(P * q.shape[-2], P, layout).to(q.device)  # [P, S]
    start = clock(q.device)
    k_all = [torch.empty_like(k) for _ in range(P)]
    v_all = [torch.empty_like(v) for _ in range(P)]
    dist.all_gather(k_all, k, group=group)
    dist.all_gather(v_all, v, group=group)
    gathered, cpu = clock(q.device), time.thread_time()
    states = start_states(q, v.shape[-1], block)
    counts = TileCounts()
    for source in range(P):
        counts += attend_tiles(states, q, k_all[source], v_all[source], positions[rank], positions[source],
                               block, causal)
    out = finish_states(states, q.dtype)
    end = clock(q.device)
    sent = (P - 1) * (k.nbytes + v.nbytes)  # what a ring all-gather sends per rank
    gather = StepStats(-1, TileCounts(), sent, start, start, gathered)  # waiting only, nothing to compute yet
    return out, RingStats(rank, [gather, StepStats(rank, counts, 0, gathered, end, end, time.thread_time() - cpu)])


def pass_around(k, v, group=None) -> list[float]:
    """Only the communication of ring attention: P-1 passes, seconds per pass."""
    seconds = []
    for _ in range(dist.get_world_size(group) - 1):
        start = clock(k.device)
        k_next, v_next, requests = pass_on(k, v, group)
        for request in requests:
            request.wait()
        k, v = k_next, v_next
        seconds.append(clock(k.device) - start)
    return seconds


def clock(device: torch.device | str) -> float:
    device = torch.device(device)  # also "cpu" or "cuda:0"; a misspelt name gets torch's list of device types
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU work is asynchronous: wait for it before reading the clock
    return time.perf_counter()
