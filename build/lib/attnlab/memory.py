"""Peak memory of the tensors an expression allocates, counted exactly.

``PeakMemory`` is a TorchDispatchMode: it sees every tensor that a PyTorch op
returns, adds its storage size when it appears and subtracts it when the
tensor is freed. The peak is deterministic (no allocator noise), which makes
it a fair way to compare algorithms on the CPU, where PyTorch keeps no
``max_memory_allocated``. Scratch buffers inside a fused kernel are not
tensors and are not counted (for flash attention they are one tile).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
    """``with PeakMemory() as mem: f(...)``; then ``mem.peak`` in bytes."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._storages: dict[int, weakref.finalize] = {}

    def _free(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._storages.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self._storages:
                    nbytes = storage.nbytes()
                    self._storages[key] = weakref.finalize(tensor, self._free, key, nbytes)
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
        return out


def peak_bytes(fn, *args, **kwargs) -> int:
    """Peak bytes of the tensors ``fn(*args, **kwargs)`` allocates (its result included)."""
    with PeakMemory() as mem:
        result = fn(*args, **kwargs)
        del result
    return mem.peak
