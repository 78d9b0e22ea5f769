"""Measure every performance claim the course makes, in one run.

    python -m benchmarks.run            # CPU-sized, a few minutes on 2 cores (make bench)
    python -m benchmarks.run --full     # bigger sizes, for a bigger machine or a GPU
    python -m benchmarks.run --smoke    # tiny sizes, seconds (the test suite runs this)
    python -m benchmarks.run --only decoding --publish  # chapter 12's rows alone, put into the stored results

On a CUDA GPU the default sizes are ``gpu``: the same rows, plus bfloat16 rows from T = 1k to
32k (flash causal against full, compiled FlexAttention with causal and sliding-window block
masks); ``--publish`` then writes ``attnlab/data/benchmarks_cuda.json`` next to the CPU file.

Writes ``benchmarks/results/<name>.md``, ``.json`` and ``.png`` (``--name``,
default ``cpu`` or ``gpu``), with the machine described. Every speed claim is a
median of ratios taken side by side in the same run (after warm-up; see
``paired_seconds``), because shared machines are noisy; peak memory is counted exactly (attnlab.memory), so it is
the same on every machine. With ``--publish`` the JSON is also copied to
``attnlab/data/benchmarks.json``, from which the chapters quote their numbers.

This module is the command line; the sizes are in :mod:`benchmarks.sizes`, how a measurement is
timed in :mod:`benchmarks.timing`, the rows in :mod:`benchmarks.measurements` and the markdown and
figure in :mod:`benchmarks.report`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch

from .decoding import decoding_rows
from .measurements import ROOT, attention_rows, backward_rows, bf16_rows, decode_rows, grader_row
from .report import markdown, plot
from .sizes import SIZES, Sizes  # noqa: F401 - Sizes and paired_seconds: run.Sizes, run.paired_seconds as before
from .timing import machine, paired_seconds  # noqa: F401

RESULTS = ROOT / "benchmarks" / "results"
PUBLISHED = ROOT / "attnlab" / "data" / "benchmarks.json"


def run(size: str, device: torch.device) -> dict:
    sizes = SIZES[size]
    print(f"benchmarks ({size}) on {device.type}", flush=True)
    attention = attention_rows(sizes, device)
    backward = backward_rows(sizes, device)
    decode, memory = decode_rows(sizes, device)
    decoding = decoding_rows(sizes, device)  # chapter 12
    bf16 = bf16_rows(sizes, device) if device.type == "cuda" and sizes.gpu_T else []
    last = attention[-1]
    ratio = last["sdpa_causal_over_full"]["median"]
    notes = (f"at T={last['T']}, SDPA with is_causal=True took {ratio:.2f} of the time of SDPA without a mask "
             f"on {device.type}; a ratio near 0.5 means the kernel skips the key tiles above the diagonal, "
             f"near 1.0 that it computes them and masks. The blocked Python version skips them by "
             f"construction: causal/full = {last['blocked_causal_over_full']['median']:.2f} "
             f"against a counted FLOP ratio of {last['flops_ratio_counted']:.2f}.")
    return {"size": size, "date": time.strftime("%Y-%m-%d"), "machine": machine(device), "attention": attention,
            "backward": backward, "bf16": bf16, "decode": decode, "kv_cache_memory": memory,
            "decoding": decoding, "grader": grader_row() if size != "smoke" else None,
            "notes": notes}


def only_decoding(stored_path: pathlib.Path, size: str, device: torch.device) -> dict:
    """The stored result of an earlier full run of the same size, with chapter 12's rows measured now
    (their own date and machine under ``decoding``, since the other rows were measured at another time)."""
    if not stored_path.exists():
        raise SystemExit(f"--only decoding needs an earlier full run in {stored_path}")
    result = json.loads(stored_path.read_text("utf-8"))
    if result.get("size") != size:
        raise SystemExit(f"{stored_path} holds size {result.get('size')!r}, not {size!r}: run the full benchmark")
    print(f"benchmarks ({size}) on {device.type}: chapter 12's decoding rows only", flush=True)
    decoding = decoding_rows(SIZES[size], device)
    result["decoding"] = {**decoding, "date": time.strftime("%Y-%m-%d"), "machine": machine(device)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", const="full", dest="size", help="bigger sizes")
    size.add_argument("--smoke", action="store_const", const="smoke", dest="size", help="tiny sizes (tests)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--name", default=None, help="result file name (default: cpu or gpu)")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the result files")
    parser.add_argument("--publish", action="store_true", help="also copy the JSON to attnlab/data/")
    parser.add_argument("--only", choices=["decoding"], default=None,
                        help="measure only chapter 12's decoding rows and put them into the stored results "
                             "(the other rows and their date stay as they were measured)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: 1 on the CPU, where a second thread waits whenever "
                             "another process holds a core; torch's own choice on a GPU; recorded with the results)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.threads is None and device.type == "cpu":
        args.threads = 1
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    size_name = args.size or ("gpu" if device.type == "cuda" else "default")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("gpu" if device.type == "cuda" else "cpu")
    if args.only:
        result = only_decoding(out / f"{name}.json", size_name, device)
    else:
        result = run(size_name, device)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    (out / f"{name}.md").write_text(markdown(result), "utf-8")
    plot(result, out / f"{name}.png")
    if args.publish:  # the chapters quote the CPU file; a GPU run publishes next to it
        published = PUBLISHED if device.type == "cpu" else PUBLISHED.with_name(f"benchmarks_{device.type}.json")
        published.write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    print(f"wrote {out / name}.md, .json, .png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
