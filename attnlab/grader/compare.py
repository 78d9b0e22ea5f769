"""Comparing a learner's output with the reference's: what is wrong, in words a learner reads
(None, type, shape, dtype, device, NaN, values), and whether two outputs say the same thing."""

from __future__ import annotations

import math
from typing import Any

import torch

from .model import Problem

BLOCKED_AT_MOST = -1e4  # an additive mask entry this low blocks like -inf (its weight underflows to 0)


def _index(flat_index: int, shape: torch.Size) -> str:
    coords = []
    for size in reversed(shape):
        coords.append(flat_index % size)
        flat_index //= size
    return "[" + ", ".join(str(c) for c in reversed(coords)) + "]"


def _value(x: Any) -> str:
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "-inf" if x < 0 else "inf"
        return f"{x:.4g}"
    return str(x)


def _short(x: Any, limit: int = 80) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shape(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _type_name(x: Any) -> str:
    return "None" if x is None else type(x).__name__


def _model_output(x: Any) -> bool:
    """A model's output object (transformers' ModelOutput and the like): it carries ``.logits``."""
    return not isinstance(x, torch.Tensor) and isinstance(getattr(x, "logits", None), torch.Tensor)


def _plain(x: Any) -> Any:
    """Python values for comparison: tuples -> lists, 0-d tensors -> numbers."""
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        x = x.item()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _first_difference(expected: Any, got: Any, where: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return (where or "len", len(expected), len(got))
        for n, (e, g) in enumerate(zip(expected, got)):
            found = _first_difference(e, g, f"{where}[{n}]")
            if found:
                return found
        return None
    if expected == got:
        if (isinstance(expected, int) and not isinstance(expected, bool) and isinstance(got, float)
                and not isinstance(got, bool)):
            return ("float:" + where, expected, got)  # the right number, as a float where an int is asked
        return None
    return (where, expected, got)


def _holds_tensors(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) or _holds_tensors(v) for v in x)


def _is_additive_mask(x: torch.Tensor, expected: torch.Tensor) -> bool:
    """A float tensor of 0 (may read) and -inf or a very negative number (blocked) where a bool
    mask is expected (all 0 counts only where everything is allowed)."""
    try:
        if not x.is_floating_point() or x.numel() == 0 or x.is_meta:
            return False
        x = x.detach().cpu().double()
        blocked = x <= BLOCKED_AT_MOST
        return bool(((x == 0) | blocked).all() and (blocked.any() or expected.all()))
    except Exception:  # noqa: BLE001
        return False


def returned(n: int, total: int, names: tuple[str, ...] = ()) -> Problem:
    """Returned value ``n`` (0-based) of ``total``, by its name where the task gives one (``k_cache``)."""
    if n < len(names) and len(names) == total:
        return Problem("grader.returned_named", {"name": names[n]})
    return Problem("grader.returned_item", {"n": n + 1, "total": total})


def compare_outputs(expected: Any, got: Any, atol: float = 1e-5, rtol: float = 1e-4,
                    names: tuple[str, ...] = ()) -> Problem | None:
    """None when ``got`` is right; else the first thing that is wrong (``names``: of the returned values)."""
    if got is None and expected is not None:
        return Problem("grader.none")
    if isinstance(expected, torch.Tensor):
        if type(got).__name__ == "CausalBias":  # causal_lower_right(...): a tensor subclass that only SDPA reads
            return Problem("grader.causal_bias")
        if _model_output(got):
            return Problem("grader.model_output", {"got": _type_name(got)})
        if not isinstance(got, torch.Tensor):
            return Problem("grader.not_tensor", {"got": _type_name(got)})
        if got.shape != expected.shape:
            return Problem("grader.shape", {"expected": _shape(expected.shape), "got": _shape(got.shape)})
        if got.dtype != expected.dtype:
            dtype = Problem("grader.dtype", {"expected": str(expected.dtype), "got": str(got.dtype)})
            if expected.dtype == torch.bool and _is_additive_mask(got, expected):
                return Problem("grader.additive_for_bool", detail=dtype)
            return dtype
        if got.device != expected.device:
            return Problem("grader.device", {"expected": str(expected.device), "got": str(got.device)})
        return compare_values(expected, got, atol, rtol)
    if _holds_tensors(expected):  # several tensors, e.g. (output, k_cache, v_cache): one by one
        if not isinstance(got, (list, tuple)):
            return Problem("grader.wrong_type", {"expected": _type_name(expected), "got": _type_name(got)})
        if len(got) != len(expected):
            return Problem("grader.length", {"expected": len(expected), "got": len(got)})
        for n, (e, g) in enumerate(zip(expected, got)):
            problem = compare_outputs(e, g, atol, rtol)
            if problem is not None:
                item = returned(n, len(expected), names)
                return Problem(item.key, item.params, detail=problem)
        return None
    outputs = [g for g in (got if isinstance(got, (list, tuple)) else [got]) if _model_output(g)]
    if outputs and not any(_model_output(e) for e in (expected if isinstance(expected, (list, tuple)) else [expected])):
        return Problem("grader.model_output_in_answer", {"got": _type_name(outputs[0])})
    expected_plain, got_plain = _plain(expected), _plain(got)
    if isinstance(expected_plain, list) and not isinstance(got_plain, list):
        return Problem("grader.wrong_type", {"expected": _type_name(expected), "got": _type_name(got)})
    found = _first_difference(expected_plain, got_plain)
    if found is None:
        return None
    where, e, g = found
    if where.startswith("float:"):
        return Problem("grader.float_for_int", {"index": where.removeprefix("float:") or "", "got": _short(g)})
    if where == "len":
        return Problem("grader.length", {"expected": e, "got": g})
    if where:
        return Problem("grader.item", {"index": where, "expected": _short(e), "got": _short(g)})
    return Problem("grader.value", {"expected": _short(e), "got": _short(g)})


def compare_values(expected: torch.Tensor, got: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4
                   ) -> Problem | None:
    """Values of two tensors of the same shape: exact for bool and integer, else with tolerances."""
    e, g = expected.detach().cpu(), got.detach().cpu()
    if e.numel() == 0:
        return None
    if e.dtype == torch.bool or not e.is_floating_point():
        wrong = e != g
        if not wrong.any():
            return None
        first = int(wrong.flatten().nonzero()[0])
        return Problem("grader.values_exact", {
            "index": _index(first, e.shape), "expected": _value(e.flatten()[first].item()),
            "got": _value(g.flatten()[first].item()), "n": int(wrong.sum()), "total": e.numel()})
    e64, g64 = e.double(), g.double()
    new_nan = g64.isnan() & ~e64.isnan()
    if new_nan.any():
        first = int(new_nan.flatten().nonzero()[0])
        return Problem("grader.nan", {"index": _index(first, e.shape), "n": int(new_nan.sum()),
                                      "expected": _value(e64.flatten()[first].item())})
    close = torch.isclose(g64, e64, atol=atol, rtol=rtol, equal_nan=True)
    if close.all():
        return None
    diff = (g64 - e64).abs().nan_to_num(nan=math.inf).masked_fill(close, 0)
    first = int(diff.flatten().argmax())
    return Problem("grader.values", {
        "index": _index(first, e.shape), "expected": _value(e64.flatten()[first].item()),
        "got": _value(g64.flatten()[first].item()), "n": int((~close).sum()), "total": e.numel()})


def same_output(a: Any, b: Any, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Do two outputs say the same thing? Values only (dtype and device ignored), NaN equals NaN."""
    try:
        if _holds_tensors(a) or _holds_tensors(b):
            return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                    and all(same_output(x, y, atol, rtol) for x, y in zip(a, b)))
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
                return False
            a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
            return bool(torch.isclose(a64, b64, atol=atol, rtol=rtol, equal_nan=True).all())
        return bool(_plain(a) == _plain(b))
    except Exception:  # noqa: BLE001 - meta tensors, odd types: not the same
        return False
