"""Ring attention on ``torch.distributed``: one sequence, P processes.

Each of the P ranks holds one shard of the queries, keys and values of a
sequence of T tokens (S = T / P tokens each). The key/value shards travel
around a ring: at step t (t = 0 .. P-1) rank r holds the keys and values of
rank (r - t) mod P, folds them into the online softmax of its own queries
(``attnlab.blocked.attend_tiles``, chapter 3's code) and meanwhile sends them
on to rank r + 1 and receives the next ones from rank r - 1. After P steps
every query has seen every key; the K/V of the whole sequence never sits on
one device. Ring Attention: Liu, Zaharia, Abbeel 2023, arXiv 2310.01889.

Which tokens a rank holds is the *layout*:

* ``contiguous``  rank r holds tokens r*S .. (r+1)*S - 1;
* ``striped``     token t goes to rank t mod P (Striped Attention:
  Brandon et al. 2023, arXiv 2311.09431);
* ``zigzag``      the sequence is cut into 2P chunks; rank r holds chunk r
  and chunk 2P-1-r (one early, one late).

With a causal mask the layout decides how much work each rank does; the
counts of every step are returned (:class:`RingStats`) and have closed forms
(:func:`expected_tiles`).

Running it
----------
In a notebook or a test, :func:`run_ring` starts P CPU processes with the
``gloo`` backend (``torch.multiprocessing`` with the start method
"forkserver", or "spawn" where there is none), lets them rendezvous on a
free port of 127.0.0.1 with one torch thread each, and returns every rank's
report. ``run_ring(jobs, P, code=...)`` runs the caller's own functions instead
of the package's (:func:`code_of`: their source text travels to every process),
so a learner's ``ring_attention`` or ``pass_on`` from a notebook runs on the ring.
The same functions run on GPUs with NCCL, one process per GPU,
started by ``torchrun``::

    torchrun --nproc-per-node=4 -m attnlab.ring --T 65536 --block 512 --layout zigzag
    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:29500 -m attnlab.ring --T 262144 --block 512

``torchrun`` sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
:func:`main` then picks ``nccl`` and ``cuda:LOCAL_RANK`` when CUDA is present
(``--backend gloo`` forces CPU processes; ``--check`` compares with SDPA on
the whole sequence, for small T). Without torchrun,
``python -m attnlab.ring --nproc 4`` starts CPU processes with :func:`run_ring`.
Point-to-point peers are ranks of the default process group.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import queue as queue_module
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import inputs
from .blocked import TileCounts, attend_tiles, finish_states, start_states, tile_kind
from .i18n import get_language, set_language, tr

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


# --------------------------------------------------------------------------- ring attention


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


# --------------------------------------------------------------------------- jobs and processes


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


def make_inputs(job: RingJob, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The job's whole q, k, v [B, H, T, d], the same on every rank (seeded)."""
    generator = torch.Generator().manual_seed(job.seed)
    q, k, v = torch.randn(3, job.batch, job.heads, job.T, job.d, generator=generator).unbind(0)
    return q.to(device), k.to(device), v.to(device)


def code_of(functions) -> str:
    """Source text of the caller's functions for ``run_ring(..., code=...)``.

    ``functions``: a function, a list of functions, or a dict {name: function}; a dict runs
    each function under the given name (``{"pass_on": blocking_pass_on}`` makes the package's
    ``ring_attention`` call ``blocking_pass_on``). A process cannot import a function from a
    notebook, but it can run its source text."""
    import inspect
    import textwrap

    if callable(functions):
        functions = [functions]
    if not isinstance(functions, (list, tuple, dict)):
        raise TypeError(tr("ring.error_code", got=inputs.describe(functions)))
    named = functions.items() if isinstance(functions, dict) else [(getattr(f, "__name__", None), f) for f in functions]
    parts = []
    for name, function in named:
        if not callable(function) or not isinstance(name, str):
            raise TypeError(tr("ring.error_code", got=inputs.describe(function)))
        if function.__name__ == "<lambda>":  # its source is the whole line it sits in, not a definition
            raise TypeError(tr("ring.error_code_lambda", name=name))
        try:
            source = textwrap.dedent(inspect.getsource(function))
        except (OSError, TypeError):
            raise TypeError(tr("ring.error_code", got=inputs.describe(function))) from None
        parts.append(source)
        if name != function.__name__:
            parts.append(f"{name} = {function.__name__}\n")
    return "\n".join(parts)


def _functions(code: str) -> dict:
    """The package's functions, with the caller's source text run over them (see :func:`code_of`)."""
    namespace = dict(globals(), math=math, rank_notes=[])  # math: chapter 9's attend_tiles needs it
    if code:  # the package's functions first, as source text, so that they call the caller's versions
        package = code_of([shard_positions, pass_on, ring_attention, allgather_attention, pass_around])
        exec(compile(package, __file__, "exec"), namespace)  # noqa: S102
        exec(compile(code, "<code given to run_ring>", "exec"), namespace)  # noqa: S102 (the caller's own code)
    return namespace


def run_jobs(jobs: list[RingJob], device: torch.device, group=None, code: str = "") -> list[RankReport]:
    """Run every job on this rank of an initialized process group (with ``code``: the caller's
    functions, see :func:`code_of`)."""
    from .memory import PeakMemory

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


def _worker(rank: int, P: int, port: int, jobs: list[RingJob], results, lang: str, timeout_s: float,
            code: str = "") -> None:
    """One spawned CPU process: join the gloo group, run the jobs, report, leave cleanly."""
    try:
        set_language(lang)
        torch.set_num_threads(1)  # P processes share the machine's cores
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(P))
        # the caller stops the run after timeout_s; the group waits longer, so a stuck ring always ends
        # with the caller's clear RingTimeout, never with a race against gloo's own timeout
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s + 60))
        try:
            results.put((rank, run_jobs(jobs, torch.device("cpu"), code=code), None))
        finally:
            dist.destroy_process_group()
    except BaseException:  # report, do not print: the parent raises it
        results.put((rank, None, traceback.format_exc()))


class RingTimeout(RuntimeError):
    """The processes did not finish in time: in a ring, most often a deadlock."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_context(*modules: str):
    """"forkserver" where it exists (Linux, macOS): one server process imports torch once and
    forks every rank from it, so a launch costs well under a second after the first; "spawn"
    elsewhere (every rank imports torch itself). Never plain "fork" from a running kernel."""
    import torch.multiprocessing as mp

    if "forkserver" in mp.get_all_start_methods():
        context = mp.get_context("forkserver")
        main = getattr(sys.modules["__main__"], "__spec__", None)  # `python -m attnlab.ring` runs as __main__
        # torch._dynamo: the first TorchDispatchMode (attnlab.memory.PeakMemory) imports it, seconds per process
        preload = ["torch", "torch.distributed", "torch._dynamo", "attnlab.ring", *modules]
        context.set_forkserver_preload([name for name in preload if name != getattr(main, "name", None)])
        return context
    return mp.get_context("spawn")


@contextlib.contextmanager
def _script_not_imported():
    """Start processes without making them import the caller's script again.

    "spawn" and "forkserver" run the main script once more in every new process (as
    ``__mp_main__``), so a script that calls :func:`run_ring` without ``if __name__ == "__main__":``
    would start processes from inside the new processes and fail. The workers are the package's
    functions and the caller's ``code=`` travels as source text, so they need nothing from the
    script: while the processes start, ``__main__`` shows neither its path nor its module name."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    saved = {name: main.__dict__.get(name, missing) for name in ("__file__", "__spec__")}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                main.__dict__.pop(name, None)
            else:
                setattr(main, name, value)


def run_ranks(worker, P: int, jobs: list, timeout_s: float, *extra, modules: tuple[str, ...] = ()) -> dict:
    """Start P processes, each running ``worker(rank, P, port, jobs, results, lang, timeout_s, *extra)``,
    and collect what each puts on ``results``: ``(rank, reports, error)``. Returns ``{rank: reports}``.

    A rank that dies, reports an error, or a run longer than ``timeout_s`` (most often a deadlocked
    ring) raises here, with the rank's traceback; every process is ended before this returns.
    ``modules``: what the worker's module adds to the processes' preload (chapter 11's backward ring).
    """
    context = _process_context(*modules)
    results = context.Queue()
    port = free_port()
    processes = [context.Process(target=worker, args=(rank, P, port, jobs, results, get_language(), timeout_s, *extra),
                                 daemon=True) for rank in range(P)]
    with _script_not_imported():
        for process in processes:
            process.start()
    reports: dict[int, list] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(reports) < P:
            try:
                rank, rank_reports, error = results.get(timeout=0.2)
            except queue_module.Empty:
                for rank, process in enumerate(processes):
                    if rank not in reports and process.exitcode not in (None, 0):
                        raise RuntimeError(tr("ring.error_exit", rank=rank, code=process.exitcode)) from None
                if time.monotonic() > deadline:
                    raise RingTimeout(tr("ring.error_timeout", seconds=timeout_s)) from None
                continue
            if error:
                raise RuntimeError(tr("ring.error_rank", rank=rank) + "\n" + error)
            reports[rank] = rank_reports
        for process in processes:
            process.join(timeout=30)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
        results.close()
    return reports


def run_ring(jobs: list[RingJob], P: int, timeout_s: float = 120.0, code=None) -> list[JobResult]:
    """Start P gloo processes on this machine, run ``jobs`` on all of them, return their reports.

    Sizes are checked here first, so bad input fails at once with a clear
    message. A failure in any process is raised here with its traceback.
    ``code``: the caller's own functions to run instead of the package's (see :func:`code_of`).
    ``timeout_s`` bounds the whole run and every collective (a deadlocked ring fails after it).
    """
    P = inputs.whole_number("P", P, 1)
    inputs.positive_number("timeout_s", timeout_s)  # checked; kept as given, so that messages print 3 s, not 3.0 s
    code = code_of(code) if code is not None else ""
    if isinstance(jobs, RingJob):
        jobs = [jobs]
    if not isinstance(jobs, (list, tuple)) or not jobs or not all(isinstance(job, RingJob) for job in jobs):
        raise TypeError(tr("ring.error_jobs", got=inputs.describe(jobs)))
    for job in jobs:
        check_job(job, P)
    reports = run_ranks(_worker, P, jobs, timeout_s, code)
    return [JobResult(job, [reports[r][j] for r in range(P)]) for j, job in enumerate(jobs)]


# --------------------------------------------------------------------------- command line (torchrun)


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc-per-node=P -m attnlab.ring`` (or ``python -m attnlab.ring --nproc P``)."""
    parser = argparse.ArgumentParser(description="Ring attention: per-rank work, time and bytes.")
    parser.add_argument("--T", type=int, default=4096, help="sequence length")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d", type=int, default=64, help="head size")
    parser.add_argument("--block", type=int, default=128, help="tile size inside a shard")
    parser.add_argument("--layout", choices=LAYOUTS + ("all",), default="all")
    parser.add_argument("--no-causal", dest="causal", action="store_false")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="compare with SDPA on the whole sequence (small T)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="default: nccl when CUDA is present, else gloo")
    parser.add_argument("--nproc", type=int, default=2, help="processes to start when not under torchrun")
    args = parser.parse_args(argv)
    layouts = LAYOUTS if args.layout == "all" else (args.layout,)
    jobs = [RingJob(T=args.T, layout=layout, causal=args.causal, block=args.block, heads=args.heads, d=args.d,
                    repeats=args.repeats, check=args.check) for layout in layouts]
    if "RANK" not in os.environ:  # not under torchrun: start CPU processes here
        print_results(run_ring(jobs, args.nproc))
        return 0
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)  # before any NCCL call, or point-to-point ops may hang
    dist.init_process_group(backend)
    try:
        reports = run_jobs(jobs, device)
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(reports, gathered, dst=0)
        if dist.get_rank() == 0:
            print_results([JobResult(job, [gathered[r][j] for r in range(len(gathered))])
                           for j, job in enumerate(jobs)])
    finally:
        dist.destroy_process_group()
    return 0


def print_results(results: list[JobResult]) -> None:
    for result in results:
        job = result.job
        print(f"{job.method} {job.layout} causal={job.causal} T={job.T} P={len(result.ranks)} block={job.block}")
        print(f"{'rank':>4} {'tiles':>6} {'GFLOP':>8} {'busy ms':>8} {'done ms':>8} {'MiB sent':>9} {'max|Δ|':>9}")
        for r, report in enumerate(result.ranks):
            diff = "-" if report.max_abs_diff is None else f"{report.max_abs_diff:.1e}"
            print(f"{r:4} {report.tiles:6} {report.score_flops / 1e9:8.3f} {result.busy(r) * 1e3:8.1f} "
                  f"{result.timeline(r)[-1][2] * 1e3:8.1f} {report.bytes_sent / 2**20:9.2f} {diff:>9}")


if __name__ == "__main__":
    from attnlab.ring import main as package_main  # the processes must find their functions in attnlab.ring

    sys.exit(package_main())
