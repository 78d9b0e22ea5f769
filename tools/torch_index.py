"""Which torch build ``make venv`` installs: PyTorch's CPU build unless there is an NVIDIA GPU.

    python tools/torch_index.py      # prints pip's arguments for torch; the reason goes to stderr
    python tools/torch_index.py wheel   # the wheel alone, before the lock (no dependencies)
    python tools/torch_index.py deps    # after the lock: what torch needs that the lock lacks

PyPI's Linux wheel of torch is the CUDA build, which pulls several GB of NVIDIA
libraries; on a machine without an NVIDIA GPU the Makefile takes the CPU build
from PyTorch's own wheel index instead (a tenth of the size, the same
numbers). ``ATTNLAB_TORCH`` overrides the choice:

=========== =================================================================
``cpu``     PyTorch's CPU index (``--index-url`` of it, ``--no-deps``)
``cuda``    PyPI's build (the CUDA build on Linux)
``pip``     whatever pip's own configuration finds (index, find-links)
unset       ``cuda`` where ``nvidia-smi -L`` lists a GPU; ``pip`` off Linux
            (PyPI's macOS and Windows wheels are CPU builds) and where a
            find-links folder of pip's configuration holds the lock's torch
            for this Python (a machine that carries its own wheels); else ``cpu``
=========== =================================================================

Standard library only: it runs in the fresh venv before anything is installed.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CHOICES = ("cpu", "cuda", "pip")


def locked_version(lock: pathlib.Path = LOCK) -> str:
    match = re.search(r"^torch==([^\s#]+)", lock.read_text("utf-8"), re.M)
    if match is None:
        raise SystemExit(f"no torch== line in {lock}")
    return match.group(1)


def has_nvidia_gpu() -> bool:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def find_links() -> list[str]:
    """The find-links locations of pip's configuration (files, environment)."""
    try:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    found = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            found += value.strip().strip("'\"").split()
    found += os.environ.get("PIP_FIND_LINKS", "").split()
    return list(dict.fromkeys(found))


def local_wheels(version: str, python_tag: str, folders: list[str]) -> list[str]:
    """torch wheels of ``version`` for ``python_tag`` (cp311) in local find-links folders."""
    name = re.compile(rf"^torch-{re.escape(version)}(\+[\w.]+)?-{python_tag}-{python_tag}-\S*\.whl$")
    wheels = []
    for folder in folders:
        path = pathlib.Path(folder.removeprefix("file://"))
        if path.is_dir():
            wheels += sorted(str(p) for p in path.iterdir() if name.match(p.name))
    return wheels


def choose(env: dict, platform: str, gpu: bool, wheels: list[str]) -> tuple[str, str]:
    """(choice, reason): one of CHOICES and why."""
    wanted = env.get("ATTNLAB_TORCH", "").strip().lower()
    if wanted:
        if wanted not in CHOICES:
            raise SystemExit(f"ATTNLAB_TORCH={wanted!r}: choose one of {', '.join(CHOICES)}")
        return wanted, f"ATTNLAB_TORCH={wanted}"
    if not platform.startswith("linux"):
        return "pip", f"{platform}: PyPI's torch is the CPU build there"
    if gpu:
        return "cuda", "nvidia-smi lists a GPU"
    if wheels:
        return "pip", f"pip's find-links hold {pathlib.Path(wheels[0]).name}"
    return "cpu", "no NVIDIA GPU (nvidia-smi lists none)"


PARTS = ("all", "wheel", "deps")


def pip_arguments(choice: str, version: str, part: str = "all") -> list[str]:
    """What follows ``pip install`` for torch: ``all`` of it, or in two steps around the lock, the
    ``wheel`` alone before it (no dependency: the Makefile installs it while pip installs the
    site's packages into the same venv) and the ``deps`` that the lock lacks after it (the CUDA
    build's NVIDIA libraries; none for the other builds, whose dependencies the lock pins)."""
    if part not in PARTS:
        raise SystemExit(f"{part!r}: choose one of {', '.join(PARTS)}")
    if part == "deps":
        return [f"torch=={version}"] if choice == "cuda" else []
    if choice == "cpu":
        # --no-deps: torch's own dependencies come from the lock, installed right after from PyPI
        return [f"torch=={version}", "--no-deps", "--index-url", CPU_INDEX]
    return [f"torch=={version}", *(["--no-deps"] if part == "wheel" else [])]


def main() -> int:
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    version = locked_version()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = local_wheels(version, tag, find_links())
    choice, reason = choose(dict(os.environ), sys.platform, has_nvidia_gpu(), wheels)
    print(f"torch {version}: {choice} build ({reason}; ATTNLAB_TORCH=cpu|cuda|pip overrides)", file=sys.stderr)
    print(" ".join(pip_arguments(choice, version, part)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
