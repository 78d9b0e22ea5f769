"""Peak memory of the tensors an expression allocates, counted exactly.

``PeakMemory`` is a TorchDispatchMode: it sees every tensor that an ATen
operator returns while the mode is active. What it counts:

* a returned tensor on a storage it has not seen is a new allocation: its
  storage size is added, and subtracted when the last tensor on that storage
  is freed;
* a returned tensor that shares the storage of one of the operator's inputs
  (a view such as ``k.transpose(-2, -1)`` or ``q[..., :64, :]``, an in-place
  result) allocates nothing and is not counted; neither are tensors that
  existed before the mode (the inputs);
* memory that one operator allocates for its own work and frees before it
  returns is invisible: an operator is one call to the mode. SDPA's CPU flash
  kernel, for example, works in per-thread buffers of one tile of scores
  (a query block x a key block) plus row statistics; they are not counted,
  and their size depends on the tile sizes and the number of threads, not on T.

The peak is deterministic (no allocator noise), which makes it a fair way to
compare algorithms on the CPU, where PyTorch keeps no ``max_memory_allocated``.
Measure without autograd (inputs that do not require grad, or
``torch.no_grad()``): tensors saved for backward are held by the graph, not by
Python, and would be counted as freed too early.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
    """``with PeakMemory() as mem: f(...)``; then ``mem.peak`` in bytes (``mem.live``: still held)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._owners: dict[int, int] = {}  # storage address -> number of live tensors on it
        self._nbytes: dict[int, int] = {}

    def _release(self, key: int) -> None:
        self._owners[key] -= 1
        if self._owners[key] == 0:
            self.live -= self._nbytes.pop(key)
            del self._owners[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if not key:
                continue  # an empty tensor
            if key in self._owners:  # one more tensor on a storage we count already
                self._owners[key] += 1
            elif key in inputs:  # a view of (or in-place result on) a tensor made before the mode
                continue
            else:  # a new allocation
                self._owners[key], self._nbytes[key] = 1, storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            weakref.finalize(tensor, self._release, key)
        return out


def peak_bytes(fn, *args, **kwargs) -> int:
    """Peak bytes of the tensors ``fn(*args, **kwargs)`` allocates (its result included)."""
    with PeakMemory() as mem:
        result = fn(*args, **kwargs)
        del result
    return mem.peak


def cuda_peak_bytes(fn, *args, **kwargs) -> int:
    """Peak bytes the CUDA allocator holds during ``fn(*args, **kwargs)`` beyond what it held before
    (``torch.cuda.max_memory_allocated``; kernel workspaces included, unlike :func:`peak_bytes`)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn(*args, **kwargs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak

