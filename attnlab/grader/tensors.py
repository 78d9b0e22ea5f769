"""The tensors inside a value a task passes or returns (a tensor, or tuples, lists and dicts of them):
listed, moved to another device (the device probe's ``meta``), and where they are NaN.
"""

from __future__ import annotations

from typing import Any

import torch


def _to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _nan_pattern(value: Any) -> list[torch.Tensor] | None:
    """Where the floating-point tensors in ``value`` are NaN (one bool tensor each); None when nothing is NaN."""
    try:
        pattern = [t.detach().isnan().cpu() for t in _tensors(value) if t.is_floating_point() and not t.is_meta]
    except Exception:  # noqa: BLE001
        return None
    return pattern if any(bool(p.any()) for p in pattern) else None
