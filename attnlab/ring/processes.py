"""Starting P processes on this machine: a gloo process group on a free port of 127.0.0.1.

:func:`run_ring` checks the jobs, starts P CPU processes (``torch.multiprocessing``,
"forkserver" where there is one, else "spawn"), lets each join the group with one torch
thread and run the jobs, and returns every rank's report; :func:`run_ranks` is the part
that chapter 11's backward ring shares. A rank that fails is raised here with its
traceback; a ring that does not finish in time (most often a deadlock) raises
:class:`RingTimeout`.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import socket
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import inputs
from ..i18n import get_language, set_language, tr
from .callers_code import code_of
from .jobs import JobResult, RingJob, check_job, run_jobs


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
        main = getattr(sys.modules["__main__"], "__spec__", None)  # a module run by `python -m` is __main__: not preloaded
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
