"""What a task promises, and inputs drawn from that promise.

A task declares its contract (:class:`Contract`): ``draw(d)`` builds one input of the task's domain from the
choices a :class:`Draw` ``d`` makes (sizes with their edge values, dtypes, layouts such as transposes and
slices, the values themselves), which inputs must get gradients, how many inputs to draw. The grader draws
several inputs on every check (the first with every size at its smallest edge, the second at its largest,
then random ones, then the first random one again with one choice at a time drawn anew), calls the
learner's function on all of them in a row and shrinks a failing input to a small one (:mod:`.drawn`).

A :class:`Draw` records its choices, so an input can be drawn again with one choice changed (a neighbour,
or a smaller size while shrinking) and described in a label (``T=1, block=1, scores: transposed``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .tensors import _tensors

LAYOUTS = ("contiguous", "offset", "rows", "strided", "transposed")
"""How a drawn tensor may lie in memory: ``offset`` (a slice of a larger buffer, storage offset above 0),
``rows`` (every other entry of its first axis, as ``x[::2]``), ``strided`` (every other element of its last
axis), ``transposed`` (its last two axes swapped in memory). Elements in the gaps are NaN (or a large
number): code that assumes a contiguous input reads them. ``view`` on the last axis works on all but the
last two (use ``VIEWABLE`` where the course's own answer splits the last axis with ``view``)."""
VIEWABLE = ("contiguous", "offset", "rows")


@dataclass
class Choice:
    kind: str  # "size", "choice", "values", "layout"
    name: str
    value: Any
    options: tuple = ()  # size: (low, high, edges); choice and layout: the options

    def smaller(self) -> list:
        """Values to try while shrinking, smallest first."""
        if self.kind == "size":
            low = self.options[0]
            return [v for v in dict.fromkeys((low, (self.value + low) // 2, self.value - 1)) if low <= v < self.value]
        if self.kind in ("choice", "layout") and self.options and self.value != self.options[0]:
            return [self.options[0]]
        return []


@dataclass
class Contract:
    """A task's domain and promises; the grader draws inputs from it (docs/exercises.md, "The contract")."""

    draw: Callable[["Draw"], Any]
    """``draw(d) -> Case``: one input from the choices of ``d`` (sizes, dtypes, layouts, values)."""
    examples: int = 6  # inputs drawn per check: the low edges, the high edges, then random ones
    neighbours: bool = True  # then the first random input again with each choice drawn anew, alone
    grads: tuple[str, ...] = ()  # inputs (by name) whose gradients must equal the reference's
    shrink_calls: int = 16  # at most this many calls to shrink a failing input


class Draw:
    """The choices of one drawn input. ``schedule``: ``"low"`` (every size at its smallest edge, first
    options, contiguous), ``"high"`` (largest edges, last options) or ``"random"``. ``replay``: the choices
    of an earlier input, made again in order except ``override`` (``{index: value}``) and ``fresh`` (the
    indices drawn anew)."""

    def __init__(self, seed: int | str, schedule: str = "random", replay: list[Choice] | None = None,
                 override: dict[int, Any] | None = None, fresh: set[int] | None = None,
                 device: torch.device | str | None = None):
        self.seed = seed
        self.random = random.Random(seed)
        self.schedule = schedule
        self.replay = replay or []
        self.override = override or {}
        self.fresh = fresh or set()
        self.choices: list[Choice] = []
        self.device = torch.device(device) if device is not None else _case_device()

    # --- the choices
    def _choose(self, kind: str, name: str, options: tuple, new: Callable[[], Any], valid: Callable[[Any], bool],
                fit: Callable[[Any], Any] = lambda v: v) -> Any:
        k = len(self.choices)
        old = self.replay[k] if k < len(self.replay) and self.replay[k].name == name else None
        if k in self.override:
            value = fit(self.override[k])
        elif old is not None and k not in self.fresh:
            value = old.value if valid(old.value) else fit(old.value)
        elif old is not None:  # drawn anew: another value than before, where there is one (a size far from it)
            value = new()
            for _ in range(12):
                if value != old.value and not (kind == "size" and _near(value, old.value)):
                    break
                value = new()
            if value == old.value:
                others = [v for v in options if v != old.value] if kind != "size" else []
                value = self.random.choice(others) if others else value
        else:
            value = new()
        self.choices.append(Choice(kind, name, value, options))
        return value

    def size(self, name: str, low: int, high: int, edges: tuple[int, ...] = ()) -> int:
        """An integer size in ``[low, high]``, or one of ``edges`` (which may lie above ``high``: a large
        size tried at the edges only). ``low`` is always an edge."""
        points = sorted({low, *(e for e in edges if e >= low)})
        top = max(high, points[-1])

        def new():
            if self.schedule == "low":
                return low
            if self.schedule == "high":
                return top
            inner = points[1:] or points  # the smallest size has an input of its own (the "low" one)
            if self.random.random() < 0.2 or high <= low:
                return self.random.choice(inner)
            if self.random.random() < 0.5:  # half uniform, half log-uniform: small sizes often, large ones too
                return self.random.randint(low, high)
            return int(round(math.exp(self.random.uniform(math.log(low + 0.5), math.log(high + 0.5)))))

        fit = lambda v: min(max(int(v), low), top)  # noqa: E731
        return self._choose("size", name, (low, high, tuple(points)), new, lambda v: low <= v <= top, fit)

    def choice(self, name: str, options) -> Any:
        """One of ``options`` (the first is the plainest: shrinking goes there)."""
        options = tuple(options)

        def new():
            if self.schedule == "low":
                return options[0]
            if self.schedule == "high":
                return options[-1]
            return self.random.choice(options)

        return self._choose("choice", name, options, new, lambda v: v in options, lambda v: options[0])

    def flag(self, name: str) -> bool:
        return self.choice(name, (False, True))

    def generator(self, name: str = "values") -> torch.Generator:
        """A torch generator for the values of an input (drawn anew: same sizes, new values)."""
        seed = self._choose("values", name, (), lambda: self.random.randrange(2**31), lambda v: True)
        return torch.Generator().manual_seed(seed)

    def layout(self, name: str, tensor: torch.Tensor, layouts=LAYOUTS) -> torch.Tensor:
        """``tensor`` with the same values, in one of ``layouts`` (see :data:`LAYOUTS`)."""
        usable = tuple(lay for lay in layouts if lay != "transposed" or tensor.dim() >= 2)
        if not usable or tensor.numel() == 0:
            return tensor.to(self.device)
        kind = self.choice(f"{name}:layout", usable)
        self.choices[-1].kind = "layout"
        return in_layout(tensor.to(self.device), kind)

    # --- values
    def normal(self, name: str, shape, dtype=torch.float32, scale: float = 1.0, layouts=LAYOUTS) -> torch.Tensor:
        values = torch.randn(tuple(shape), generator=self.generator(name), dtype=torch.float64) * scale
        return self.layout(name, values.to(dtype), layouts)

    def integers(self, name: str, shape, low: int, high: int, dtype=torch.long, layouts=LAYOUTS) -> torch.Tensor:
        values = torch.randint(low, high, tuple(shape), generator=self.generator(name), dtype=torch.long)
        return self.layout(name, values.to(dtype), layouts)

    def bools(self, name: str, shape, p: float = 0.5, layouts=LAYOUTS) -> torch.Tensor:
        values = torch.rand(tuple(shape), generator=self.generator(name)) < p
        return self.layout(name, values, layouts)

    # --- reading the choices back
    def describe(self) -> str:
        """``T=1, block=4, dtype=float16, scores: transposed``: what a learner needs to see of the input."""
        parts = []
        for c in self.choices:
            if c.kind in ("size", "choice"):
                parts.append(f"{c.name}={_show(c.value)}")
            elif c.kind == "layout" and c.value != "contiguous":
                parts.append(f"{c.name.removesuffix(':layout')}: {c.value}")
        return ", ".join(parts)

    def shrinking(self, choices: list[Choice]):
        """Replays of ``choices`` with one choice smaller each, smallest first (what shrinking tries)."""
        for k, c in enumerate(choices):
            for value in c.smaller():
                yield {k: value}


def _near(a: int, b: int) -> bool:
    """Sizes within a factor of 2 of each other (a neighbour should change a size enough to matter)."""
    return max(a, b) < 2 * max(min(a, b), 1)


def _show(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _case_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _junk(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return torch.iinfo(dtype).max


def in_layout(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor``'s values in ``layout``; the elements of the buffer outside the view are junk."""
    if layout == "contiguous" or tensor.numel() == 0:
        return tensor.contiguous()
    if layout == "offset":
        buffer = torch.full((tensor.numel() + 5,), _junk(tensor.dtype), dtype=tensor.dtype, device=tensor.device)
        out = buffer[5:].view(tensor.shape)
    elif layout == "rows":
        if tensor.dim() == 0:
            return tensor.contiguous()
        buffer = torch.full((2 * tensor.shape[0], *tensor.shape[1:]), _junk(tensor.dtype), dtype=tensor.dtype,
                            device=tensor.device)
        out = buffer[::2]
    elif layout == "strided":
        shape = (*tensor.shape[:-1], 2 * tensor.shape[-1]) if tensor.dim() else (2,)
        buffer = torch.full(shape, _junk(tensor.dtype), dtype=tensor.dtype, device=tensor.device)
        out = buffer[..., ::2] if tensor.dim() else buffer[0]
    elif layout == "transposed":
        return tensor.transpose(-2, -1).contiguous().transpose(-2, -1)
    else:
        raise ValueError(layout)
    out.copy_(tensor)
    return out


def same_layout_clone(tensor: torch.Tensor) -> torch.Tensor:
    """A copy that keeps the strides and storage offset (and the junk between), unlike ``clone()``, which
    makes a slice or a strided view contiguous."""
    if tensor.is_contiguous() and tensor.storage_offset() == 0 or tensor.is_meta or tensor.is_sparse:
        return tensor.clone()
    try:
        out = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        return out.set_(tensor.untyped_storage().clone(), tensor.storage_offset(), tensor.shape, tensor.stride())
    except Exception:  # noqa: BLE001 - an odd tensor (a subclass, a view of a view of ...): values are what matter
        return tensor.clone()


def _largest(tensors: list) -> float:
    return max([float(t[t.isfinite()].abs().max()) if t.isfinite().any() else 0.0 for t in tensors] or [0.0])


def tolerances(expected: Any, atol: float, rtol: float, inputs: Any = ()) -> tuple[float, float]:
    """The task's tolerances for a drawn input: ``atol`` scaled by the largest finite output (rounding grows
    with the numbers summed) and at least a few steps of the dtype at the largest input (scores near 1000 in
    float32 are 2.4e-4 apart: two right formulas differ by that), widened for float16 and bfloat16."""
    floats = [t.detach() for t in _tensors(expected) if t.is_floating_point() and not t.is_meta and t.numel()]
    dtypes = {t.dtype for t in floats}
    top = _largest(floats)
    atol = atol * max(1.0, top)
    given = [t.detach() for t in _tensors(inputs) if t.is_floating_point() and not t.is_meta and t.numel()]
    if given and floats and all(t.dtype == torch.float32 for t in floats):
        atol = max(atol, 8 * torch.finfo(torch.float32).eps * _largest(given) * max(1.0, top))
    if torch.bfloat16 in dtypes:
        return max(atol, 4e-2 * max(1.0, top)), max(rtol, 4e-2)
    if torch.float16 in dtypes:
        return max(atol, 5e-3 * max(1.0, top)), max(rtol, 5e-3)
    return atol, rtol


__all__ = ["Choice", "Contract", "Draw", "LAYOUTS", "VIEWABLE", "in_layout", "same_layout_clone", "tolerances", "field"]
