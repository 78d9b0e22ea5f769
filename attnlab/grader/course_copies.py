"""The course's copies of a task's answer, refused while a learner's function runs: in every thread and
through any wrapper (``functools.partial``, a decorator, ``cProfile``, an executor, a dynamic import).

While a learner's call runs, each protected function (the grader's references, mutants and alternatives,
the course functions a task names in ``Task.course_copies``, the grader's own entry points) has its code
replaced by a trap (``function.__code__``: every reference to the function object sees it, whatever name or
module it was reached through). The trap runs the original code, and first looks at who called: up the
stack, past torch's, the libraries' and the grader's frames, the first frame that is the course's
(``attnlab``) allows the call (``GPT.forward`` runs ``Block.forward``); a frame of the learner's code, or the
top of a thread's stack with no course frame on it (a thread the learner's call started), refuses it:
``grader.course_copy``. After the call the original code is put back.

Not enforced (docs/exercises.md, "The course's own code"): a thread still running after the learner's call
returned, a copy of a protected function's code object made by the learner, reading the grader's data.
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

from .frames import frame_kind
from .model import Problem, Task

_TRAP = "__attnlab_grader_trap__"  # the name the trap code calls, set in each protected function's globals
_ORIGINALS: dict[int, tuple[types.FunctionType, types.CodeType, str]] = {}  # key -> (function, its code, name)
_TRAPS: dict[types.FunctionType, tuple[int, types.CodeType]] = {}  # function -> (its key, its trap code)
_TRAP_CODES: set[types.CodeType] = set()
_active: list["Traps"] = []  # the traps installed now (one learner call; nested calls add theirs)


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for part in parts[n:]:
            obj = vars(obj)[part] if isinstance(obj, type) and part in vars(obj) else getattr(obj, part)
        return obj
    raise ImportError(dotted)


def _functions(obj, name: str, into: dict) -> None:
    """The plain functions of ``obj`` (a function, a method, a class's methods but ``__init__``)."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, type):
        for attr, value in vars(obj).items():
            if attr != "__init__" and (isinstance(value, (types.FunctionType, staticmethod, classmethod, property))):
                _functions(value, f"{name}.{attr}", into)
        return
    if isinstance(obj, functools.partial):
        obj = obj.func
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        into.setdefault(obj, name)


_ANSWERS: dict[str, dict] = {}  # module name -> {function: dotted name}: the grader's answers of one chapter


def protected(task: Task) -> dict:
    """``{function: dotted name}`` the learner may not call in ``task``: the grader's answers of every
    chapter module already imported (a module nobody imported cannot be called), the task's
    ``course_copies``, and the grader's functions that compute or hand out expected outputs."""
    from .. import exercises

    found: dict = {}
    for chapter in exercises.CHAPTERS:
        module = sys.modules.get(f"{exercises.__name__}.{chapter}")
        if module is None or not hasattr(module, "TASKS"):
            continue
        if module.__name__ not in _ANSWERS:
            answers = _ANSWERS[module.__name__] = {}
            for other in module.TASKS:
                for fn in [other.reference, *other.mutants.values(), *other.alternatives]:
                    name = getattr(fn, "__name__", "")
                    _functions(fn, f"{module.__name__}.{name}" if name.isidentifier() else module.__name__, answers)
        for fn, name in _ANSWERS[module.__name__].items():
            found.setdefault(fn, name)
    for dotted in task.course_copies:
        _functions(_resolve(dotted), dotted, found)
    for fn, name in _grader_entries().items():
        found.setdefault(fn, name)
    return found


@functools.lru_cache(maxsize=1)
def _grader_entries() -> dict:
    from . import judge, model

    found: dict = {}
    for obj, name in ((judge.output_of, "attnlab.grader.judge.output_of"), (judge.grade, "attnlab.grader.grade"),
                      (model.Task.run, "attnlab.grader.Task.run"),
                      (model.Task.run_with_inputs, "attnlab.grader.Task.run_with_inputs"),
                      (model.Task.make_cases, "attnlab.grader.Task.make_cases"),
                      (judge.Grader.output_of, "attnlab.grader.judge.Grader.output_of")):
        _functions(obj, name, found)
    return found


def handed_in(fn: Any, functions: dict) -> str | None:
    """The dotted name when ``fn`` itself is a protected function (or a partial, a bound method, a wrapper
    of one, or a class whose ``forward`` or ``__call__`` is one): handed in as the answer."""
    seen = 0
    while seen < 8:
        seen += 1
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__") and not isinstance(fn, type):
            fn = fn.__wrapped__
        else:
            break
    if isinstance(fn, type):
        for attr in ("forward", "__call__"):
            method = getattr(fn, attr, None)
            method = getattr(method, "__func__", method)
            if method in functions:
                return functions[method]
        return None
    return functions.get(fn) if isinstance(fn, types.FunctionType) else None


def _trap_for(fn: types.FunctionType) -> tuple[int, types.CodeType]:
    """``(key, trap code)`` of ``fn``: one per function object (closures of one factory share their code, not
    their cells)."""
    if fn not in _TRAPS:
        code = fn.__code__
        key = len(_TRAPS) + 1
        free = code.co_freevars
        name = code.co_name if code.co_name.isidentifier() else "answer"
        source = (f"def _outer({', '.join(free)}):\n    def {name}(*args, **kwargs):\n"
                  f"        {'; '.join(free) if free else 'pass'}\n        return {_TRAP}({key}, args, kwargs)\n"
                  f"    return {name}\n")
        namespace: dict = {}
        exec(compile(source, code.co_filename, "exec"), namespace)  # noqa: S102 - our own two lines
        trap = namespace["_outer"](*([None] * len(free))).__code__
        if trap.co_freevars != free:
            raise ValueError(f"cannot trap {code.co_name}")
        _TRAPS[fn] = (key, trap)
        _TRAP_CODES.add(trap)
    return _TRAPS[fn]


def _dispatch(key: int, args: tuple, kwargs: dict):
    fn, code, name = _ORIGINALS[key]
    if _active and _refused(sys._getframe(2)):
        _active[-1].refuse(name)
    original = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    original.__kwdefaults__ = fn.__kwdefaults__
    return original(*args, **kwargs)


def _refused(frame) -> bool:
    """Is the protected function called (from ``frame`` up) by the learner's code rather than the course's?"""
    while frame is not None:
        kind = frame_kind(frame.f_code.co_filename)
        if kind == "course":
            return False
        if kind == "learner":
            return True
        frame = frame.f_back
    return True  # a thread with no course frame on it: started by the learner's call


class Traps:
    """Install the traps on ``functions`` for one learner call; what they refuse goes to ``found``."""

    def __init__(self, functions: dict, found: list[Problem]):
        self.functions, self.found = functions, found
        self.installed: list[tuple[types.FunctionType, types.CodeType]] = []

    def refuse(self, name: str) -> None:
        if all(p.key != "grader.course_copy" for p in self.found):
            self.found.append(Problem("grader.course_copy", {"name": name}))

    def __enter__(self):
        _active.append(self)
        for fn, name in self.functions.items():
            code = fn.__code__
            if code in _TRAP_CODES:
                continue  # already trapped by an outer call
            try:
                key, trap = _trap_for(fn)
            except (ValueError, SyntaxError):
                continue
            _ORIGINALS[key] = (fn, code, name)
            fn.__globals__.setdefault(_TRAP, _dispatch)
            fn.__code__ = trap
            self.installed.append((fn, code))
        return self

    def __exit__(self, *exc) -> None:
        for fn, code in reversed(self.installed):
            fn.__code__ = code
        self.installed.clear()
        _active.remove(self)
