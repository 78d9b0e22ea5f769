"""One measurement on the ring (:class:`RingJob`), what each rank reports of it, and running jobs on a rank.

:func:`run_jobs` runs on every rank of an initialized process group (the gloo processes of
:func:`attnlab.ring.run_ring`, or ``torchrun``): it makes the job's seeded inputs, takes this
rank's shard, runs ring attention (or the all-gather, or the passes alone) and reports the
counts, times, peak memory and the difference from SDPA on the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import inputs
from ..i18n import tr
from .attention import clock
from .callers_code import _functions
from .layouts import check_sizes


@dataclass
class RingJob:
    """One measurement: sizes, layout, and what to run (``method``: ring, allgather, pass)."""
    T: int
    layout: str = "contiguous"
    causal: bool = True
    block: int = 16
    heads: int = 2
    d: int = 16
    batch: int = 1
    method: str = "ring"
    repeats: int = 1  # timed runs after one warm-up (when > 1)
    check: bool = True  # compare with SDPA on the whole sequence
    memory: bool = False  # count peak tensor bytes (attnlab.memory.PeakMemory)
    seed: int = 0
    keep_output: bool = False  # send every rank's output back (RankReport.output)


@dataclass
class RankReport:
    job: RingJob
    rank: int
    steps: list[dict]  # per step: source, full, diagonal, skipped, score_flops, bytes_sent
    timings: list[list[tuple[float, float, float]]]  # per repeat, per step: (start, computed, done) since t0
    cpu: list[list[float]] = field(default_factory=list)  # per repeat, per step: CPU seconds computing
    max_abs_diff: float | None = None
    peak_bytes: int | None = None
    kv_bytes: int = 0  # bytes of K and V this rank starts with
    output: list | None = None  # this rank's output [B, H, S, d] as nested lists, when job.keep_output
    notes: list = field(default_factory=list)  # what the caller's code appended to ``rank_notes`` during the job

    @property
    def tiles(self) -> int:
        return sum(s["full"] + s["diagonal"] for s in self.steps)

    @property
    def score_flops(self) -> int:
        return sum(s["score_flops"] for s in self.steps)

    @property
    def bytes_sent(self) -> int:
        return sum(s["bytes_sent"] for s in self.steps)


@dataclass
class JobResult:
    job: RingJob
    ranks: list[RankReport]

    @property
    def best_repeat(self) -> int:
        """The timed run whose slowest rank finished first (least disturbed by the machine)."""
        spans = [max(r.timings[i][-1][2] for r in self.ranks) for i in range(len(self.ranks[0].timings))]
        return min(range(len(spans)), key=spans.__getitem__)

    def timeline(self, rank: int) -> list[tuple[float, float, float]]:
        return self.ranks[rank].timings[self.best_repeat]

    @property
    def span(self) -> float:
        """Seconds until the last rank was done (best run)."""
        return max(self.timeline(r)[-1][2] for r in range(len(self.ranks)))

    def busy(self, rank: int) -> float:
        """Wall-clock seconds the rank spent computing (best run)."""
        return sum(c - s for s, c, _ in self.timeline(rank))

    def busy_cpu(self, rank: int) -> float:
        """CPU seconds the rank spent computing, least over the timed runs: what it would take
        with a core of its own, whatever else the machine was doing."""
        return min(sum(run) for run in self.ranks[rank].cpu)


def check_job(job: "RingJob", P: int) -> None:
    """Everything a RingJob holds, checked before any process starts (a clear message, not a
    traceback from inside a rank)."""
    check_sizes(job.T, P, job.layout, job.block)
    for name in ("heads", "d", "batch", "repeats"):
        inputs.whole_number(name, getattr(job, name), 1)
    inputs.whole_number("seed", job.seed, 0)
    for name in ("causal", "check", "memory", "keep_output"):
        if not isinstance(getattr(job, name), bool):
            raise TypeError(tr("error.flag", name=name, got=inputs.describe(getattr(job, name))))
    if job.method not in ("ring", "allgather", "pass"):
        raise ValueError(tr("ring.error_method", got=inputs.describe(job.method)))


def make_inputs(job: RingJob, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The job's whole q, k, v [B, H, T, d], the same on every rank (seeded)."""
    generator = torch.Generator().manual_seed(job.seed)
    q, k, v = torch.randn(3, job.batch, job.heads, job.T, job.d, generator=generator).unbind(0)
    return q.to(device), k.to(device), v.to(device)


def run_jobs(jobs: list[RingJob], device: torch.device, group=None, code: str = "") -> list[RankReport]:
    """Run every job on this rank of an initialized process group (with ``code``: the caller's
    functions, see :func:`code_of`)."""
    from ..memory import PeakMemory

    functions = _functions(code)
    notes = functions["rank_notes"]  # the caller's code may note things here (the grader's watcher does)
    shard_positions, pass_around = functions["shard_positions"], functions["pass_around"]
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    reports = []
    for job in jobs:
        positions = shard_positions(job.T, P, job.layout)[rank].to(device)
        q_all, k_all, v_all = make_inputs(job, device)
        q, k, v = (x[..., positions, :].contiguous() for x in (q_all, k_all, v_all))  # this rank's shard
        method = {"ring": functions["ring_attention"], "allgather": functions["allgather_attention"]}.get(job.method)
        kwargs = dict(layout=job.layout, causal=job.causal, block=job.block, group=group)
        report = RankReport(job, rank, [], [], kv_bytes=k.nbytes + v.nbytes)
        start = len(notes)
        if job.method == "pass":
            timings = []
            for _ in range(job.repeats + (job.repeats > 1)):
                _barrier(device, group)
                seconds = pass_around(k, v, group)
                ends = [sum(seconds[:i + 1]) for i in range(len(seconds))]
                timings.append([(e - s, e, e) for s, e in zip(seconds, ends)])
            report.timings = timings[-job.repeats:]
            report.steps = [{"source": (rank - t - 1) % P, "full": 0, "diagonal": 0, "skipped": 0,
                             "score_flops": 0, "bytes_sent": k.nbytes + v.nbytes} for t in range(P - 1)]
            reports.append(report)
            continue
        if job.memory:
            _barrier(device, group)
            with PeakMemory() as memory:
                out, _ = method(q, k, v, **kwargs)
                del out
            report.peak_bytes = memory.peak
        for i in range(job.repeats + (job.repeats > 1)):
            _barrier(device, group)
            t0 = clock(device)
            out, stats = method(q, k, v, **kwargs)
            report.timings.append([(s.start - t0, s.computed - t0, s.done - t0) for s in stats.steps])
            report.cpu.append([s.cpu for s in stats.steps])
        report.timings, report.cpu = report.timings[-job.repeats:], report.cpu[-job.repeats:]
        report.steps = [{"source": s.source, "full": s.counts.full, "diagonal": s.counts.diagonal,
                         "skipped": s.counts.skipped, "score_flops": s.counts.score_flops,
                         "bytes_sent": s.bytes_sent} for s in stats.steps]
        if job.keep_output:
            report.output = out.detach().cpu().tolist()  # a list: a tensor would travel as shared memory of a process that exits
        if job.check:
            reference = F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=job.causal)
            report.max_abs_diff = (out - reference[..., positions, :]).abs().max().item()
        report.notes = list(notes[start:])
        reports.append(report)
    _barrier(device, group)
    return reports


def _barrier(device: torch.device, group=None) -> None:
    if device.type == "cuda":
        dist.barrier(group, device_ids=[device.index])
    else:
        dist.barrier(group)
