"""What one learner's call does besides returning: inputs edited in place, a torch API the task
forbids (``Task.forbidden``), global state changed (torch patched, the default dtype, the global RNG
reseeded) and calls of the course's own copy of the task. :class:`Watch` collects it for one case.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import state
from .course_copies import Traps
from .frames import _called_by_learner
from .model import Case, Problem, Task
from .patches import patched_names, restore_torch, torch_attributes


@dataclass
class Watch:
    """What one learner's call did besides returning: inputs changed, forbidden APIs used, global
    state changed (torch patched, the default dtype, the global RNG reseeded), the course's own copy
    of the task called, and what the task's ``call`` noted (a model left in training mode)."""

    changed: list[str] = field(default_factory=list)  # names of the inputs edited in place
    forbidden: list[str] = field(default_factory=list)  # names of Task.forbidden that were used
    side: list[Problem] = field(default_factory=list)  # side effects and course copies, in the order seen

    def problems(self, task: Task) -> list[Problem]:
        out = [Problem("grader.changed_input", {"name": name}) for name in self.changed]
        return out + [Problem(f"grader.forbidden.{task.id}.{name}") for name in self.forbidden] + self.side

    def add(self, problem: Problem) -> None:
        if all(p.key != problem.key for p in self.side):
            self.side.append(problem)


_SEEDERS = (("torch", "manual_seed"), ("torch", "seed"), ("torch", "set_rng_state"), ("torch.random", "manual_seed"),
            ("torch.random", "seed"), ("torch.random", "set_rng_state"), ("torch.cuda", "manual_seed"),
            ("torch.cuda", "manual_seed_all"))


class _Guard:
    """Around one learner's call: torch's namespaces and global state (default dtype and device, grad mode,
    threads, the generator's seed, function modes left entered) as they were (what changed is named and put
    back), and the course's copies of the task refused in every thread (:mod:`.course_copies`)."""

    def __init__(self, protected: dict, found: list[Problem]):
        self.protected, self.found = protected, found

    def _add(self, problem: Problem) -> None:
        if all(p.key != problem.key for p in self.found):
            self.found.append(problem)

    def _seeder(self, module, name, original):
        def seeder(*args, **kwargs):
            if _called_by_learner(sys._getframe()):
                self._add(Problem("grader.reseeds_rng", {"name": f"{module.__name__}.{name}"}))
            return original(*args, **kwargs)

        return seeder

    def __call__(self, call):
        import importlib

        seeders = []
        for module_name, name in _SEEDERS:
            module = importlib.import_module(module_name)
            original = getattr(module, name, None)
            if original is not None:
                seeders.append((module, name, original))
                setattr(module, name, self._seeder(module, name, original))
        before, settings = torch_attributes(), state.snapshot()
        try:
            with Traps(self.protected, self.found):
                return call()
        finally:
            patched = patched_names(before)
            if patched:
                self._add(Problem("grader.patched_torch", {"name": patched[0]}))
                restore_torch(before)
            for module, name, original in seeders:
                setattr(module, name, original)
            for problem in state.changes(settings):
                self._add(problem)
            state.restore(settings)


def _tested_call(tests: dict[str, Callable], found: list[str], func, args, kwargs):
    """``func(*args, **kwargs)``, after each test not yet in ``found`` has looked at the call (and added its name
    to ``found`` if the call is what it forbids)."""
    for name, test in tests.items():
        if name not in found:
            try:
                if test(func, args, kwargs):
                    found.append(name)
            except Exception:  # noqa: BLE001 - a test that cannot read this call says nothing
                pass
    return func(*args, **kwargs)


class _ForbiddenApis(TorchFunctionMode):
    def __init__(self, tests: dict[str, Callable], found: list[str]):
        super().__init__()
        self.tests, self.found = tests, found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return _tested_call(self.tests, self.found, func, args, kwargs or {})


class _ForbiddenOps(TorchDispatchMode):
    """``Task.forbidden_ops``: tested on every ATen operator the call runs, whatever route reached it."""

    def __init__(self, tests: dict[str, Callable], found: list[str]):
        super().__init__()
        self.tests, self.found = tests, found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _tested_call(self.tests, self.found, func, args, kwargs or {})


def input_names(task: Task, case: Case) -> list[str]:
    """The learner-facing names of the case's positional arguments."""
    names = list(getattr(task, "input_names", None) or [])
    if not names and task.call is None:
        try:
            names = list(inspect.signature(task.reference).parameters)
        except (TypeError, ValueError):
            names = []
    return [names[n] if n < len(names) else f"#{n + 1}" for n in range(len(case.args))]


def _changed(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
            return True
        if before.is_meta:
            return False
        return not bool(torch.equal(before, after) or
                        (before.is_floating_point() and torch.equal(before.isnan(), after.isnan())
                         and torch.equal(before.nan_to_num(0.0), after.nan_to_num(0.0))))
    if isinstance(before, (list, tuple)):
        return len(before) != len(after) or any(_changed(b, a) for b, a in zip(before, after))
    if isinstance(before, dict):
        return any(_changed(v, after.get(k)) for k, v in before.items())
    return False
