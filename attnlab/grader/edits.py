"""A caller's edits of what a learner's function returned (every entry made different, in place), and the way
back: the contract's inputs check that the next call does not hand back the edited object and that two returned
tensors do not share memory (``drawn.DrawnInputs.edited``)."""

from __future__ import annotations

from typing import Any

import torch


def editable(value: Any) -> bool:
    """Whether ``value`` holds something a caller can edit in place (a tensor with entries, a list, a dict)."""
    if isinstance(value, torch.Tensor):
        return value.numel() > 0 and not value.is_meta
    if isinstance(value, (list, dict)):
        return True
    return isinstance(value, tuple) and any(editable(v) for v in value)


def edit(value: Any, undo: list) -> bool:
    """Change ``value`` in place as a caller might (every entry made different), with a way back in ``undo`` (the
    learner's memo is put back as it was); ``False`` where nothing could be changed (an expanded view, whose
    entries share one memory location, is read-only by convention)."""
    if isinstance(value, torch.Tensor):
        try:
            with torch.no_grad():
                before = value.detach().clone()
                if value.dtype == torch.bool:
                    value.logical_not_()
                elif value.is_floating_point() or value.is_complex():
                    value.neg_().add_(1.5)
                else:
                    value.add_(1)
        except (RuntimeError, TypeError):
            return False
        undo.append(lambda: _put_back(value, before))
        return True
    if isinstance(value, dict):
        undo.append(lambda items=dict(value): (value.clear(), value.update(items)))
        for v in value.values():
            edit(v, undo)
        value["edited by the caller"] = True
        return True
    if isinstance(value, list):
        undo.append(lambda items=list(value): value.__setitem__(slice(None), items))
        for n, item in enumerate(value):
            if not edit(item, undo) and isinstance(item, (bool, int, float, str)):
                value[n] = (not item if isinstance(item, bool) else item + 1 if isinstance(item, (int, float))
                            else item + "?")
        return bool(value)
    if isinstance(value, tuple):
        return any([edit(v, undo) for v in value])
    return False


def _put_back(tensor: torch.Tensor, before: torch.Tensor) -> None:
    with torch.no_grad():
        tensor.copy_(before)


def put_all_back(undo: list) -> None:
    for step in reversed(undo):
        step()
    undo.clear()
