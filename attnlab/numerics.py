"""One CPU numeric path on every x86-64 machine, so stored outputs match anywhere.

PyTorch's CPU build picks its vector kernels by what the processor offers:
ATen's own kernels (``AVX2`` or ``AVX512``), MKL's BLAS and oneDNN each choose
separately. A sum computed with 16-wide registers is added in another order
than one with 8-wide registers, so the last bit of a matrix product differs,
and 500 optimizer steps turn a last-bit difference into another model. The
course's stored outputs are compared by nbval on the reader's machine, so all
three libraries are held to their AVX2 code path, which every x86-64 CPU since
about 2015 (Intel Haswell, AMD Excavator/Zen) has:

===================== ======== =================================================
variable              value    read by
===================== ======== =================================================
``ATEN_CPU_CAPABILITY`` ``avx2`` ATen's vectorized kernels (first dispatch)
``MKL_CBWR``            ``AVX2`` MKL's conditional numerical reproducibility
``ONEDNN_MAX_CPU_ISA``  ``AVX2`` oneDNN (matrix products of ``nn.Linear``)
===================== ======== =================================================

Measured (docs/decisions.md, "One CPU numeric path"): on an AVX-512 machine,
pinning ATen and MKL alone still differed from an AVX2 machine; oneDNN was the
third path. Each library reads its variable when it first computes, so
:func:`pin_cpu_numerics` runs when ``attnlab`` is imported, before the package
imports torch. A value the user set already is kept (``setdefault``). Nothing
is set off x86-64 Linux, on a CPU without AVX2 and FMA, or when
``ATTNLAB_CPU_NUMERICS=native`` (the benchmarks measure the native path).

This module must not import torch.
"""

from __future__ import annotations

import os
import platform

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SWITCH = "ATTNLAB_CPU_NUMERICS"  # "native" leaves every library to pick its own path


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The feature flags of the first processor in /proc/cpuinfo (empty set where there is none)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as file:
            for line in file:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def can_pin(machine: str | None = None, flags: set[str] | None = None) -> bool:
    """True on x86-64 with AVX2 and FMA (the flags the pinned AVX2 kernels need)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return False
    flags = cpu_flags() if flags is None else flags
    return {"avx2", "fma"} <= flags


def pin_cpu_numerics(environ: os._Environ | dict | None = None) -> dict[str, str]:
    """Set the variables of :data:`PINNED` where they are unset; return what is in force.

    Returns the pinned variables and their values as they stand afterwards
    (empty where nothing is pinned: not x86-64 Linux with AVX2, or ``ATTNLAB_CPU_NUMERICS=native``).
    """
    environ = os.environ if environ is None else environ
    if environ.get(SWITCH, "").lower() == "native" or not can_pin():
        return {}
    for name, value in PINNED.items():
        environ.setdefault(name, value)
    return {name: environ[name] for name in PINNED}
