"""Reading a learner's function without running it: the global values it names (through its nested
functions, a class's methods, its closure), and whether it keeps tensors between calls (an
``lru_cache``, a dict or list of tensors in a default argument, a closure or a global).
"""

from __future__ import annotations

from typing import Any

import torch

from .tensors import _tensors


def _names_used(fn, seen=None) -> list:
    """The global values the learner's function (its nested functions, a class's methods) names."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    if isinstance(fn, type):
        return [v for value in vars(fn).values() for v in _names_used(getattr(value, "__func__", value), seen)
                if callable(value) or isinstance(value, (staticmethod, classmethod))]
    code, env = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    if code is None:
        return [fn]
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if hasattr(c, "co_code"))
    values = [env[n] for n in names if n in env]
    values += [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ()) if _cell_filled(cell)]
    return values


def _keeps_tensors(fn: Any) -> bool:
    """Does the learner's function keep tensors between calls: an lru_cache, or a dict or list of
    tensors in a default argument, a closure or a global it names?"""
    def holds(value: Any) -> bool:
        if hasattr(value, "cache_info") and callable(value):
            return True
        if isinstance(value, dict):
            return any(isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and _tensors(v))
                       for v in value.values())
        return isinstance(value, list) and bool(_tensors(value))

    fn = getattr(fn, "__wrapped__", fn)
    if holds(fn):
        return True
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    values = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    values += [cell.cell_contents for cell in (fn.__closure__ or ()) if _cell_filled(cell)]
    values += [fn.__globals__[name] for name in code.co_names if name in fn.__globals__]
    return any(holds(v) for v in values)


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False
