"""Torch's global state around a learner's call: the default dtype and device, grad mode, the number of
threads, the CPU generator's seed, deterministic algorithms, a ``TorchFunctionMode`` left entered (``with
torch.device("meta")`` opened and never closed). What a call changes is named and put back, so a call that
leaves ``torch.set_default_device("meta")`` behind costs its own point and nothing else: the next checks and
``summary()`` run as before.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .model import Problem


@dataclass(frozen=True)
class TorchState:
    dtype: torch.dtype
    device_context: object  # torch.set_default_device's context (None: the default, the CPU)
    grad: bool
    threads: int
    seed: int  # torch.initial_seed(): changes when anything reseeds the CPU generator
    deterministic: bool
    modes: tuple  # the TorchFunctionModes entered (torch.device(...) as a context manager is one), bottom first
    current_device: object  # torch.utils._device.CURRENT_DEVICE, which a DeviceContext sets


_GRADER_SEEDS: set[int] = set()  # seeds a task's own call set (exercise 7 reseeds the global RNG per call)


def grader_seed(seed: int) -> None:
    """``torch.manual_seed(seed)`` by the grader's own code inside a learner's call: not the learner's reseeding."""
    torch.manual_seed(seed)
    _GRADER_SEEDS.add(torch.initial_seed())


def _device_context():
    return getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)


def _modes() -> tuple:
    return tuple(torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack()))


def snapshot() -> TorchState:
    from torch.utils import _device

    return TorchState(torch.get_default_dtype(), _device_context(), torch.is_grad_enabled(), torch.get_num_threads(),
                      torch.initial_seed(), torch.are_deterministic_algorithms_enabled(), _modes(),
                      _device.CURRENT_DEVICE)


def _device_of(context) -> str:
    return str(getattr(context, "device", "cpu"))


def changes(before: TorchState, after: TorchState | None = None) -> list[Problem]:
    """One problem per global setting the call left changed (compared with ``before``)."""
    after = snapshot() if after is None else after
    found = []
    if after.dtype != before.dtype:
        found.append(Problem("grader.changed_default_dtype", {"dtype": str(after.dtype)}))
    if after.device_context is not before.device_context:
        found.append(Problem("grader.changed_default_device", {"device": _device_of(after.device_context)}))
    left = [m for m in after.modes if m not in before.modes and m is not after.device_context]
    if left:
        found.append(Problem("grader.left_mode_entered", {"name": type(left[0]).__name__}))
    if after.grad != before.grad:
        found.append(Problem("grader.changed_grad_mode", {"enabled": str(after.grad)}))
    if after.threads != before.threads:
        found.append(Problem("grader.changed_threads", {"before": before.threads, "after": after.threads}))
    if after.seed != before.seed and after.seed not in _GRADER_SEEDS:
        found.append(Problem("grader.reseeds_rng", {"name": "torch.default_generator"}))
    if after.deterministic != before.deterministic:
        found.append(Problem("grader.changed_deterministic", {"enabled": str(after.deterministic)}))
    return found


def restore(before: TorchState) -> None:
    """Put back what :func:`changes` reports (the seed: nothing to restore, the RNG runs forked)."""
    from torch.utils import _device

    if _modes() != before.modes or _device_context() is not before.device_context:  # the stack as it was
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
        for mode in before.modes:
            torch._C._push_on_torch_function_stack(mode)
        torch._GLOBAL_DEVICE_CONTEXT.device_context = before.device_context
        _device.CURRENT_DEVICE = before.current_device
    if torch.get_default_dtype() != before.dtype:
        torch.set_default_dtype(before.dtype)
    if torch.is_grad_enabled() != before.grad:
        torch.set_grad_enabled(before.grad)
    if torch.get_num_threads() != before.threads:
        torch.set_num_threads(before.threads)
    if torch.are_deterministic_algorithms_enabled() != before.deterministic:
        torch.use_deterministic_algorithms(before.deterministic)


@contextlib.contextmanager
def clean():
    """Grade in torch's usual state, whatever a notebook cell left: float32 by default, on the CPU, grad mode
    on, no function mode entered; the notebook's state is put back afterwards."""
    before = snapshot()
    restore(TorchState(torch.float32, None, True, before.threads, before.seed, before.deterministic, (), None))
    try:
        yield
    finally:
        restore(before)
