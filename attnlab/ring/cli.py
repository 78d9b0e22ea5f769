"""The command line: ``torchrun --nproc-per-node=P -m attnlab.ring`` or ``python -m attnlab.ring --nproc P``.

Under ``torchrun`` every process runs :func:`main`, joins the group (``nccl`` and
``cuda:LOCAL_RANK`` when CUDA is present, else ``gloo``), runs the jobs and rank 0 prints
every rank's tiles, FLOPs, times and bytes (:func:`print_results`). Without ``torchrun``
it starts CPU processes with :func:`attnlab.ring.run_ring`.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from .jobs import JobResult, RingJob, run_jobs
from .layouts import LAYOUTS
from .processes import run_ring


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
