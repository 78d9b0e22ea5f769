"""The numeric paths every stored notebook output must survive (docs/decisions.md,
"Stored outputs that no numeric path can change").

PyTorch's CPU build picks its kernels by what the processor offers (ATen's own
vector kernels, MKL's BLAS and oneDNN, each on its own), and the thread count
splits sums differently. A stored output that holds on one path only would fail on
a reader's machine, so the suite runs the notebooks under several paths on this one
machine and requires the same stored outputs under each:

``native``       whatever torch picks on this CPU, one thread (``attnlab.setup``'s default)
``portable``     the oldest x86-64 code paths: ATen without vector kernels, MKL's
                 compatible branch, oneDNN limited to SSE4.1
``two-threads``  the native path with two torch threads (``ATTNLAB_TORCH_THREADS``), idle
                 OpenMP threads sleeping rather than spinning (``OMP_WAIT_POLICY=PASSIVE``)

The code of a chapter is the same in en, de and zh (the generator's drift check
proves it), so one run of the suite proves every notebook's code under all three
paths at no extra cost: each language's notebooks run under another path. The
rotation (``ATTNLAB_PATH_ROTATION`` = 0, 1 or 2) shifts which language takes which
path; three suite runs with rotations 0, 1, 2 run every notebook under every path
(``python -m tools.numeric_paths`` does only the notebooks, all three rotations).
"""

from __future__ import annotations

import os
import pathlib

LANGUAGES = ("en", "de", "zh")
PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    # OMP_WAIT_POLICY=PASSIVE changes no sum, only how an idle OpenMP thread waits: spinning, it
    # burned 3.6 times the CPU time (47.9 s instead of 9.0 s of wall time for 100 training steps and
    # 80 small forward passes) while another notebook ran on the other core
    "two-threads": {"ATTNLAB_TORCH_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
}
VARIABLES = sorted({name for env in PATHS.values() for name in env})
ROTATION = "ATTNLAB_PATH_ROTATION"


def rotation(environ=os.environ) -> int:
    value = environ.get(ROTATION, "0")
    if value not in ("0", "1", "2"):
        raise ValueError(f"{ROTATION} must be 0, 1 or 2, got {value!r}")
    return int(value)


def path_for(lang: str, turn: int = 0) -> str:
    """The numeric path the notebooks of ``lang`` run under in rotation ``turn``."""
    names = list(PATHS)
    return names[(LANGUAGES.index(lang) + turn) % len(names)]


def language_of(parts: tuple[str, ...]) -> str | None:
    """The language folder of a notebook path (``chapters/de/…`` -> ``de``), or None."""
    for folder, lang in zip(parts, parts[1:]):
        if folder in ("chapters", "solutions", "exercises") and lang in LANGUAGES:
            return lang
    return None


def notebook_path(file: pathlib.Path, root: pathlib.Path, turn: int) -> str | None:
    """The path a notebook file runs under: by its language folder, None outside chapters/solutions."""
    file = file.resolve()
    lang = language_of(file.relative_to(root).parts) if file.is_relative_to(root) else None
    return None if lang is None else path_for(lang, turn)


def apply(path: str | None, original: dict[str, str], environ=os.environ) -> None:
    """Put ``environ`` on ``path``: its variables set, the other paths' variables removed.

    ``path=None`` restores ``original`` (what the run started with), so a test that is not
    a notebook sees the environment the contributor gave the suite.
    """
    for name in VARIABLES:
        environ.pop(name, None)
    environ.update(original if path is None else PATHS[path])


NOTEBOOK_DIRS = [f"{section}/{lang}" for section in ("chapters", "solutions") for lang in LANGUAGES]


def main(argv: list[str] | None = None) -> int:
    """Run nbval over every chapter and solution notebook in the three rotations.

    Each notebook then runs once under each path; prints the counts and wall time per rotation.
    ``--turns 1`` (or ``0,2``) runs only those rotations.
    """
    import argparse
    import subprocess
    import sys
    import time

    parser = argparse.ArgumentParser(prog="python -m tools.numeric_paths", description=main.__doc__)
    parser.add_argument("--turns", default="0,1,2", help="rotations to run, comma-separated (default 0,1,2)")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (e.g. -x)")
    args = parser.parse_args(argv)
    root = pathlib.Path(__file__).resolve().parent.parent
    failed = 0
    for turn in (int(t) for t in args.turns.split(",")):
        env = dict(os.environ, **{ROTATION: str(turn)})
        paths = ", ".join(f"{lang}: {path_for(lang, turn)}" for lang in LANGUAGES)
        print(f"rotation {turn} ({paths})", flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "--nbval",
                               "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-p", "no:cacheprovider",
                               *args.pytest_args, *NOTEBOOK_DIRS], cwd=root, env=env, capture_output=True, text=True)
        summary = [line for line in done.stdout.splitlines() if line.strip()][-1:]
        print(f"  {summary[0] if summary else done.stderr[-2000:]}  ({time.perf_counter() - start:.0f} s)", flush=True)
        if done.returncode:
            failed += 1
            print("\n".join(line for line in done.stdout.splitlines() if line.startswith("FAILED")), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
