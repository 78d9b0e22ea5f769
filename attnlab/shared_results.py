"""A result computed once per test run and shared by the three languages of a chapter.

The English, German and Chinese notebooks of a chapter run the same code (the
generator's drift check), so a training run that is deterministic gives the same
weights in all three. When ``ATTNLAB_SHARED_RESULTS`` names a folder (the test
suite and ``make notebooks`` set one, fresh for each run), :func:`cached` stores
what the first notebook computed under a key made of everything the result depends
on: the inputs' bytes, the arguments, the source of every module of ``attnlab``,
torch's version and its CPU numeric path. The other two load it instead of
computing it again. Without the variable (a learner's notebook) nothing is stored
and everything is computed.

nbval still compares every stored output of every notebook; the first run of each
key is the proof that the code gives what is stored, and a key that changes with
any input or any line of the package cannot serve a stale result.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
from typing import Callable

import torch

VARIABLE = "ATTNLAB_SHARED_RESULTS"
PACKAGE = pathlib.Path(__file__).resolve().parent


def folder() -> pathlib.Path | None:
    """The shared folder, or None when results are not shared."""
    value = os.environ.get(VARIABLE)
    return pathlib.Path(value) if value else None


def package_fingerprint() -> str:
    """A digest of the source of every module of the package (any edit changes every key)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def key(*parts) -> str:
    """A digest of ``parts`` (tensors by dtype, shape and bytes; the rest by ``repr``), the
    package's source, torch's version and the CPU numeric path."""
    digest = hashlib.sha256()
    environment = (torch.__version__, torch.backends.cpu.get_cpu_capability(),
                   *(os.environ.get(name, "") for name in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")))
    for part in (package_fingerprint(), environment, *parts):
        if isinstance(part, torch.Tensor):
            part = part.detach().cpu().contiguous()
            digest.update(f"{part.dtype}{tuple(part.shape)}".encode())
            digest.update(part.view(torch.uint8).numpy().tobytes() if part.numel() else b"")
        else:
            digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cached(name: str, parts: tuple, compute: Callable[[], object]) -> object:
    """``compute()``, or what an earlier call with the same ``name`` and ``parts`` stored.

    The result must be something ``torch.save`` can store (tensors, lists, dicts).
    """
    where = folder()
    if where is None:
        return compute()
    path = where / f"{name}-{key(name, *parts)}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    result = compute()
    where.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(result, buffer)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_bytes(buffer.getvalue())
    temporary.replace(path)  # atomic: a notebook running beside this one sees all of it or nothing
    return result
