"""The course's copies of a task's answer: the code objects of the grader's references, mutants and
alternatives (and of the course functions a task names, ``Task.course_copies``) that a learner may
not call, and whether a learner's function can reach any of them at all (what it names).
"""

from __future__ import annotations

import os

from .learner_function import _names_used
from .model import Task


def _code_objects(obj, name: str, into: dict) -> None:
    if isinstance(obj, type):
        for attr, value in vars(obj).items():
            if attr == "__init__":  # building the object is not the task (a learner's subclass may use it)
                continue
            if callable(value) and hasattr(value, "__code__") or isinstance(value, (staticmethod, classmethod, property)):
                _code_objects(getattr(value, "__func__", getattr(value, "fget", value)), f"{name}.{attr}", into)
        return
    if isinstance(obj, property):
        obj = obj.fget
    code = getattr(obj, "__code__", None)
    if code is None:
        return
    stack = [code]
    while stack:  # the function and the functions it defines (a mutant factory's inner function)
        current = stack.pop()
        into.setdefault(current, name)
        stack.extend(c for c in current.co_consts if hasattr(c, "co_code"))


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for part in parts[n:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


_ANSWER_KEY: dict = {}  # module name -> {code object: name}: the functions of one attnlab.exercises module


def course_copy_codes(task: Task) -> dict:
    """``{code object: dotted name}`` of the course's functions the learner may not call in ``task``:
    those of the task's own and every other task module already imported (the grader's answers; a
    module nobody imported cannot be called, and importing all eleven cost seconds per kernel)."""
    import sys

    from .. import exercises

    codes: dict = {}
    for chapter in exercises.CHAPTERS:
        module = sys.modules.get(f"{exercises.__name__}.{chapter}")
        if module is None:
            continue
        if module.__name__ not in _ANSWER_KEY:
            key = _ANSWER_KEY[module.__name__] = {}
            for other in module.TASKS:  # the references, and the mutants and alternatives beside them
                for fn in [other.reference, *other.mutants.values(), *other.alternatives]:
                    name = getattr(fn, "__name__", "")
                    _code_objects(fn, f"{module.__name__}.{name}" if name.isidentifier() else module.__name__, key)
        for code, name in _ANSWER_KEY[module.__name__].items():
            codes.setdefault(code, name)  # the first chapter to define a code object names it, as before
    for dotted in task.course_copies:
        _code_objects(_resolve(dotted), dotted, codes)
    return codes


def _may_call_course(fn, task: Task) -> bool:
    """Watch for calls of the course's copies only where the learner's code can reach them: it names
    something of attnlab, or the task hands over the course's objects whose methods are copies
    (a block, a model). Elsewhere the profile hook would only cost time."""
    if any(name.split(".")[-2][:1].isupper() for name in task.course_copies):
        return True
    try:
        for value in _names_used(fn):
            module = value.__name__ if isinstance(value, type(os)) else getattr(value, "__module__", None)
            if not isinstance(module, str):
                module = getattr(type(value), "__module__", "")
            if module.startswith("attnlab") or isinstance(value, type) and any(
                    base.__module__.startswith("attnlab") for base in value.__mro__):
                return True
        return False
    except Exception:  # noqa: BLE001 - an object we cannot read: watch it
        return True
