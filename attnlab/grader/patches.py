"""Torch's namespaces as the course imported them (``torch``, ``torch.nn.functional``, ``torch.Tensor``, ...):
which of their functions a learner's cell replaced, putting them back, and running the grader's own answers on
the originals (a patch in a notebook cannot reach the references)."""

from __future__ import annotations

import contextlib
import itertools
import operator
from typing import Any

import torch


def _namespaces() -> dict[str, Any]:
    import torch.nn.functional as F

    return {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
            "torch.linalg": torch.linalg, "torch.special": torch.special}


def torch_attributes() -> dict[str, dict]:
    """What torch's namespaces hold now (the names a learner could patch)."""
    return {name: dict(vars(space)) for name, space in _namespaces().items()}


PRISTINE = torch_attributes()  # as the course imported torch: references run on these


def _differences(before: dict[str, dict]):
    """``(namespace name, space, attribute)`` for every torch attribute not as in ``before``."""
    for name, space in _namespaces().items():
        now, then = vars(space), before[name]
        still = _all_still_there(now, then)
        if not still:
            for attr, old in then.items():  # replaced or deleted (a name torch adds lazily is not a patch)
                if ((not attr.startswith("_") or attr in _OPERATORS) and attr not in _SET_BY_TORCH
                        and now.get(attr, _MISSING) is not old):
                    yield name, space, attr
        if isinstance(space, type) and not (still and len(now) == len(then)):  # a new attribute of a class
            for attr in set(now) - set(then):  # that hides an inherited one (Tensor.softmax)
                if any(attr in vars(base) for base in space.__mro__[1:]):
                    yield name, space, attr


def _all_still_there(now, then: dict) -> bool:
    """Whether every name of ``then`` still holds the same object in namespace ``now``, compared
    by identity in C (``map`` over ``now.get``): a few microseconds for torch's thousands of names,
    checked around every graded call; new names in ``now`` (torch adds some lazily) do not count."""
    return all(map(operator.is_, map(now.get, then, itertools.repeat(_MISSING)), then.values()))


_MISSING = object()
_SET_BY_TORCH = {"Storage"}  # torch.set_default_dtype rebinds torch.Storage: not a learner's patch
_OPERATORS = {"__call__", "__matmul__", "__add__", "__sub__", "__mul__", "__truediv__", "__getitem__", "__setitem__"}


def patched_names(before: dict[str, dict]) -> list[str]:
    """Names of torch attributes that differ from ``before`` (``torch.softmax``, ``torch.Tensor.exp``)."""
    return sorted(f"{name}.{attr}" for name, _, attr in _differences(before))


def restore_torch(before: dict[str, dict]) -> None:
    """Put torch's namespaces back as in ``before``."""
    for name, space, attr in list(_differences(before)):
        try:
            if attr in before[name]:
                setattr(space, attr, before[name][attr])
            else:
                delattr(space, attr)
        except (AttributeError, TypeError):
            pass


@contextlib.contextmanager
def pristine_torch():
    """Run on torch as the course imported it: a function a notebook cell patched is put back for the
    duration (the references cannot be reached by a learner's patch), and the patch restored after."""
    if not patched_names(PRISTINE):
        yield
        return
    now = torch_attributes()
    restore_torch(PRISTINE)
    try:
        yield
    finally:
        restore_torch(now)
