"""Grading one task: the learner's function on every case, under the time limit, compared with
the reference; a wrong answer named by the known mistake (mutant) it matches.

Besides the output, every call is watched for three things a comparison of outputs cannot see:

* an input tensor edited in place (the caller's data changed: a real data bug);
* a torch API the task says not to use (``Task.forbidden``);
* a tensor made on the CPU while the inputs are elsewhere: one case runs again with its tensors
  on PyTorch's ``meta`` device (shapes and dtypes, no data), where mixing in a CPU tensor fails
  the way it fails on a GPU. What ``meta`` cannot run (reading values with ``.item()``) is not
  held against the learner.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .compare import _holds_tensors, _type_name, _value, compare_outputs, same_output
from .model import (Case, Failure, Problem, Refusal, Result, Task, noting, patched_names, restore_torch,
                    torch_attributes)
from .timelimit import TimeLimitExceeded, call_with_time_limit

DEFAULT_TIME_LIMIT = 10.0  # seconds per call of the learner's function
PROBE_DEVICE = "meta"
DEVICE_MIX = ("is not on the expected device", "Expected all tensors to be on the same device")
_OUTPUTS: dict[tuple[str, int, str], tuple[bool, Any]] = {}  # (task, case, mutant or ""): output


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


# --- where a call comes from: the learner's code, or a library (torch, transformers) or the course
_LIBRARIES = tuple(os.path.realpath(p) for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                                 sysconfig.get_paths()["stdlib"]})
_COURSE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # .../attnlab
_TORCH = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep  # the separator: not torchvision's files
_KIND: dict[str, bool] = {}
_REAL: dict[str, str] = {}


def _real_path(filename: str) -> str:
    """A code object's file as a real path (cached): a venv reached through a symbolic link names
    torch's files by the link, and they must still read as torch's."""
    if filename not in _REAL:
        _REAL[filename] = os.path.realpath(filename) if not filename.startswith("<") else filename
    return _REAL[filename]


def _torch_file(filename: str) -> bool:
    """A file of torch itself (``module(x)``'s frames between the learner and ``forward``)."""
    return _real_path(filename).startswith(_TORCH)


def _learner_file(filename: str) -> bool:
    """True for code the learner wrote (a notebook cell, a script), not the course's, torch's or a library's."""
    if filename not in _KIND:
        real = _real_path(filename)
        _KIND[filename] = not (real.startswith(_COURSE) or real.startswith(_TORCH) or real.startswith(_LIBRARIES)
                               or filename.startswith("<frozen"))
    return _KIND[filename]


def _called_by_learner(frame) -> bool:
    """Is ``frame`` (the function called) called from the learner's code, directly or through torch
    (``module(x)`` runs ``forward`` from torch's ``Module.__call__``)?"""
    caller = frame.f_back
    while caller is not None and _torch_file(caller.f_code.co_filename):
        caller = caller.f_back
    return caller is not None and _learner_file(caller.f_code.co_filename)


def _learners_subclass(frame) -> bool:
    """A method of the course's class, run on an object of a class the learner derived from it."""
    if not frame.f_code.co_varnames or frame.f_code.co_varnames[0] != "self":
        return False
    cls = type(frame.f_locals.get("self"))
    module = sys.modules.get(cls.__module__)
    return module is not None and _learner_file(getattr(module, "__file__", None) or "<learner>")


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


_SEEDERS = (("torch", "manual_seed"), ("torch", "seed"), ("torch", "set_rng_state"), ("torch.random", "manual_seed"),
            ("torch.random", "seed"), ("torch.random", "set_rng_state"), ("torch.cuda", "manual_seed"),
            ("torch.cuda", "manual_seed_all"))


class _Guard:
    """Around one learner's call: torch's namespaces, the default dtype and the global RNG as they
    were (what changed is named and put back), and calls of the course's copy of the task."""

    def __init__(self, codes: dict, found: list[Problem]):
        self.codes, self.found = codes, found

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
        before, dtype = torch_attributes(), torch.get_default_dtype()
        codes = self.codes

        def profile(frame, event, arg):
            if event == "call" and frame.f_code in codes and (_called_by_learner(frame) or _learners_subclass(frame)):
                self._add(Problem("grader.course_copy", {"name": codes[frame.f_code]}))

        def profiled():
            old = sys.getprofile()
            sys.setprofile(profile)
            try:
                return call()
            finally:
                sys.setprofile(old)

        try:
            return profiled()
        finally:
            patched = patched_names(before)
            if patched:
                self._add(Problem("grader.patched_torch", {"name": patched[0]}))
                restore_torch(before)
            if torch.get_default_dtype() != dtype:
                self._add(Problem("grader.changed_default_dtype", {"dtype": str(torch.get_default_dtype())}))
                torch.set_default_dtype(dtype)
            for module, name, original in seeders:
                setattr(module, name, original)


class _ForbiddenApis(TorchFunctionMode):
    def __init__(self, tests: dict[str, Callable], found: list[str]):
        super().__init__()
        self.tests, self.found = tests, found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for name, test in self.tests.items():
            if name not in self.found:
                try:
                    if test(func, args, kwargs):
                        self.found.append(name)
                except Exception:  # noqa: BLE001 - a test that cannot read this call says nothing
                    pass
        return func(*args, **kwargs)


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


class Grader:
    """The learner's function ``fn`` on the cases of ``task``."""

    def __init__(self, task: Task, fn: Callable, time_limit: float):
        self.task, self.fn, self.time_limit = task, fn, time_limit
        self.probe_meta = task.device_probe  # off once the reference cannot run on meta
        self.codes = course_copy_codes(task) if _may_call_course(fn, task) else {}

    def call(self, case: Case, seed: int | None = None, watch: Watch | None = None,
             args: tuple | None = None, kwargs: dict | None = None) -> Any:
        """The learner's function on ``case`` under the time limit; ``watch`` collects what else it did."""
        task = self.task
        found: list[str] = []
        mode = _ForbiddenApis(task.forbidden, found) if task.forbidden else None
        side: list[Problem] = []
        guard = _Guard(self.codes, side)
        around = lambda call: call_with_time_limit(lambda: guard(call), self.time_limit)  # noqa: E731
        with noting() as noted:
            try:
                if mode is not None:
                    with mode:  # entered and left outside the time limit: the mode stack stays sound
                        got, after, _ = task.run_with_inputs(self.fn, case, seed, args, kwargs, around, learner=True)
                else:
                    got, after, _ = task.run_with_inputs(self.fn, case, seed, args, kwargs, around, learner=True)
            finally:
                if watch is not None:
                    for problem in [*side, *noted]:
                        watch.add(problem)
        if watch is not None:
            before = case.args if args is None else args
            if not task.inputs_may_change:
                for name, b, a in zip(input_names(task, case), before, after):
                    if _changed(b, a) and name not in watch.changed:
                        watch.changed.append(name)
            watch.forbidden.extend(name for name in found if name not in watch.forbidden)
        return got

    def failed_call(self, error: BaseException) -> Problem:
        if isinstance(error, Refusal):
            return error.problem
        if isinstance(error, TimeLimitExceeded):
            return Problem("grader.timeout", {"seconds": _value(float(self.time_limit))})
        if isinstance(error, NotImplementedError):
            return Problem("grader.not_implemented")
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        if len(message) > 160:
            message = message[:159] + "…"
        return Problem("grader.raised", {"error": type(error).__name__, "message": message})

    # --- the mistakes an output shows
    def output_of(self, name: str, fn: Callable, case: Case, index: int) -> Any:
        return output_of(self.task, name, fn, case, index)

    def mutant_outputs(self, case: Case) -> dict[str, Any]:
        outputs = {}
        for name, mutant in self.task.mutants.items():
            try:
                outputs[name] = self.output_of(name, mutant, case, self.index[id(case)])
            except Exception:  # noqa: BLE001 - a mutant that cannot run on this case says nothing
                continue
        return outputs

    def nan_fits(self, name: str, cases: list[Case], outputs: list[Any], called: list[bool]) -> bool:
        """Is the mutant ``name`` NaN exactly where the learner's output is, on every case both ran?"""
        mutant = self.task.mutants[name]
        for j, case in enumerate(cases):
            if case.judge is not None or not called[j]:
                continue
            try:
                wrong = self.output_of(name, mutant, case, j)
            except Exception:  # noqa: BLE001 - a mutant that cannot run on this case says nothing here
                continue
            mine, theirs = _nan_pattern(outputs[j]) or [], _nan_pattern(wrong) or []
            if len(mine) != len(theirs) or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(mine, theirs)):
                return False
        return True

    def mutant_matches(self, case: Case, reference: Any, got: Any) -> list[str]:
        return [name for name, wrong in self.mutant_outputs(case).items()
                if not same_output(wrong, reference) and same_output(got, wrong)]

    def additive_mask(self, case: Case, reference: Any, got: torch.Tensor, problem: Problem) -> Problem:
        """An additive mask where a bool one is asked: read it as a bool mask (0 = may read) and
        name what else is wrong with that pattern, if anything."""
        allowed = got == 0
        again = compare_outputs(reference, allowed, self.task.atol, self.task.rtol)
        if again is None:
            return problem
        names = self.mutant_matches(case, reference, allowed)
        other = Problem(f"grader.mutant.{self.task.id}.{names[0]}") if names else again
        return Problem(problem.key, problem.params, problem.detail, [other])

    def item_mutants(self, case: Case, reference: Any, got: Any) -> list[tuple[int, str]]:
        """Several returned values: the mistake each wrong one shows alone, ``[(item, name)]``."""
        if not (_holds_tensors(reference) and isinstance(got, (list, tuple)) and len(got) == len(reference)):
            return []
        outputs = self.mutant_outputs(case)
        found = []
        for n, (e, g) in enumerate(zip(reference, got)):
            if same_output(e, g):
                continue
            for name, wrong in outputs.items():
                if (isinstance(wrong, (list, tuple)) and len(wrong) == len(reference)
                        and not same_output(wrong[n], e) and same_output(wrong[n], g)):
                    found.append((n, name))
                    break
            else:
                found.append((n, None))  # wrong, but like no known mistake
        return found if any(name for _, name in found) else []

    def items_problem(self, task: Task, reference: Any, got: Any, named: list, problem: Problem) -> Problem:
        """One problem per wrong returned value: its mistake's name, or what is wrong with it."""
        problems = []
        for n, name in named:
            if name is not None:
                problems.append(Problem(f"grader.mutant.{task.id}.{name}"))
            else:
                inner = compare_outputs(reference[n], got[n], task.atol, task.rtol)
                problems.append(Problem("grader.returned_item", {"n": n + 1, "total": len(reference)}, detail=inner))
        first = next(i for i, (_, name) in enumerate(named) if name is not None)
        main = problems.pop(first)
        return Problem(main.key, main.params, problem, problems)

    def random_answer(self, case: Case, problem: Problem, got: Any) -> bool:
        innermost = problem
        while innermost.key == "grader.returned_item" and innermost.detail is not None:
            innermost = innermost.detail
        if innermost.key not in ("grader.values", "grader.values_exact", "grader.nan"):
            return False
        try:
            again = self.call(case, case.seed + 1)
        except BaseException:  # noqa: BLE001
            return False
        return again is not None and not same_output(got, again, atol=0, rtol=0)

    # --- the device probe
    def device_problem(self, case: Case) -> Problem | None:
        """``case`` again with its tensors on the meta device: a CPU tensor mixed in fails there."""
        task = self.task
        if not task.device_probe or case.judge is not None or not _tensors(case.args):
            return None
        args, kwargs = _to_device(case.args, PROBE_DEVICE), _to_device(case.kwargs, PROBE_DEVICE)
        try:
            expected = task.run_with_inputs(task.reference, case, args=args, kwargs=kwargs)[0]
        except Exception:  # noqa: BLE001 - the reference needs values: no probe for this task
            self.probe_meta = False
            return None
        if not _tensors(expected) or any(t.device.type != PROBE_DEVICE for t in _tensors(expected)):
            self.probe_meta = False
            return None
        try:
            got = self.call(case, args=args, kwargs=kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001
            if isinstance(error, RuntimeError) and any(text in str(error) for text in DEVICE_MIX):
                if _keeps_tensors(self.fn):  # made in an earlier call, on that call's device
                    return Problem("grader.memoized_device")
                return Problem("grader.device_mix")
            return None  # meta cannot run it (values read): not held against the learner
        for tensor in _tensors(got):
            if tensor.device.type != PROBE_DEVICE:
                return Problem("grader.device_mix_output", {"got": str(tensor.device)})
        return None

    # --- a second call with the same shapes and new values
    def repeat_problem(self, i: int, case: Case, got: Any, expected: Any) -> Problem | None:
        """Case ``i`` drawn again with the case generator seeded otherwise (same sizes, new values):
        an answer that keeps its first result for a shape, or any state between calls, shows."""
        task = self.task
        key = (task.id, i, "~twin")
        if key not in _OUTPUTS:
            twins = _twin_cases(task)
            twin = twins[i] if i < len(twins) else None
            if twin is None or twin.judge is not None or same_output(list(twin.args), list(case.args)):
                _OUTPUTS[key] = (False, None)
            else:
                try:
                    _OUTPUTS[key] = (True, (twin, task.run(task.reference, twin)))
                except Exception:  # noqa: BLE001
                    _OUTPUTS[key] = (False, None)
        ok, value = _OUTPUTS[key]
        if not ok:
            return None
        twin, reference = value
        try:
            again = self.call(twin)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001
            return Problem("grader.repeat_call", detail=self.failed_call(error))
        problem = task.difference(reference, again)
        if problem is None:
            return None
        if same_output(again, got) and not same_output(reference, expected):
            return Problem("grader.memoized", detail=problem)
        return Problem("grader.repeat_call", detail=problem)

    # --- all cases
    def grade(self) -> Result:
        task = self.task
        cases = task.make_cases()
        self.index = {id(case): n for n, case in enumerate(cases)}
        outputs: list[Any] = []
        expected: list[Any] = []
        problems: list[Problem | None] = []
        matches: list[list[str]] = []
        extras: list[list[Problem]] = []
        called: list[bool] = []  # the learner's call returned
        for case in cases:
            watch = Watch()
            matches.append([])
            if case.judge is not None:
                expected.append(None)
                outputs.append(None)
                called.append(False)
                try:
                    problems.append(case.judge(lambda seed, case=case: self.call(case, seed, watch)))
                except KeyboardInterrupt:
                    raise
                except BaseException as error:  # noqa: BLE001 - the learner's code, whatever it raises
                    problems.append(self.failed_call(error))
                extras.append(watch.problems(task))
                continue
            reference = self.output_of("", task.reference, case, self.index[id(case)])
            expected.append(reference)
            try:
                got = self.call(case, watch=watch)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # noqa: BLE001
                outputs.append(None)
                called.append(False)
                problems.append(self.failed_call(error))
                extras.append(watch.problems(task))
                continue
            outputs.append(got)
            called.append(True)
            try:
                problem = task.difference(reference, got)
                if problem is not None and problem.key == "grader.additive_for_bool":
                    problem = self.additive_mask(case, reference, got, problem)
                elif problem is not None:
                    matches[-1] = self.mutant_matches(case, reference, got)
                    if not matches[-1]:
                        named = self.item_mutants(case, reference, got)
                        if named:
                            problem = self.items_problem(task, reference, got, named, problem)
                        elif self.random_answer(case, problem, got):
                            problem = Problem("grader.random_output", detail=problem)
                problems.append(problem)
            except KeyboardInterrupt:
                raise
            except Exception:  # noqa: BLE001 - an output the comparison cannot even read
                problems.append(Problem("grader.unreadable", {"got": _type_name(got)}))
            extras.append(watch.problems(task))
        # NaN is named after a mutant only where the learner's NaNs are that mutant's on every case (an answer
        # that is NaN on every row is not "the maximum over blocked keys" because that mutant is NaN on one case).
        for i, names in enumerate(matches):
            if names and _nan_pattern(outputs[i]) is not None:
                matches[i] = [name for name in names if self.nan_fits(name, cases, outputs, called)]
        # One name per mistake: of the mutants that match a case, the one that matches most cases
        # (a window hard-coded to W = 3 is "W ignored" everywhere, not "one key too many" at W = 2).
        counts = Counter(name for names in matches for name in names)
        order = {name: n for n, name in enumerate(task.mutants)}
        for i, names in enumerate(matches):
            if names:
                best = max(names, key=lambda name: (counts[name], -order[name]))
                problems[i] = Problem(f"grader.mutant.{task.id}.{best}", detail=problems[i])
        # Hard-coded: the same answer as on another case whose expected answer differs (not where the
        # mistake is named already: by a mutant, or by the task's own judge, grader.<task id>.<name>).
        named = ("grader.mutant.", f"grader.{task.id}.")
        for i, problem in enumerate(problems):
            if problem is None or problem.key.startswith(named) or cases[i].judge is not None:
                continue
            if outputs[i] is None:
                continue
            for j in range(len(cases)):
                if (j != i and cases[j].judge is None and outputs[j] is not None
                        and same_output(outputs[i], outputs[j]) and not same_output(expected[i], expected[j])):
                    problems[i] = Problem("grader.hardcoded", {"other": j + 1}, detail=problem)
                    break
        # One call again with new values of the same shapes, on the first right case with tensors.
        if task.repeat:
            for i, case in enumerate(cases):
                if problems[i] is None and called[i] and case.judge is None and _tensors(case.args):
                    repeat = self.repeat_problem(i, case, outputs[i], expected[i])
                    if repeat is not None:
                        problems[i] = repeat
                    break
        # The device probe, on every case with tensors whose call returned.
        for i, case in enumerate(cases):
            if called[i] and self.probe_meta:
                device = self.device_problem(case)
                if device is not None:
                    extras[i].append(device)
        for i, more in enumerate(extras):
            own = [p for p in more if p.key.startswith(f"grader.{task.id}.")]
            if own and problems[i] is not None and cases[i].judge is not None:  # the task's own name comes first
                more = [p for p in more if p is not own[0]] + [problems[i]]
                problems[i] = None
                more = [own[0], *more]
            if more:
                if problems[i] is None:
                    problems[i] = Problem(more[0].key, more[0].params, more[0].detail, more[1:])
                else:
                    problems[i].also.extend(more)
        failures = [Failure(n + 1, case.label, p) for n, (case, p) in enumerate(zip(cases, problems)) if p is not None]
        return Result(task.id, len(cases) - len(failures), len(cases), failures)


def _nan_pattern(value: Any) -> list[torch.Tensor] | None:
    """Where the floating-point tensors in ``value`` are NaN (one bool tensor each); None when nothing is NaN."""
    try:
        pattern = [t.detach().isnan().cpu() for t in _tensors(value) if t.is_floating_point() and not t.is_meta]
    except Exception:  # noqa: BLE001
        return None
    return pattern if any(bool(p.any()) for p in pattern) else None


def output_of(task: Task, name: str, fn: Callable, case: Case, index: int) -> Any:
    """The output of the reference (``name`` "") or of the mutant ``name`` on case ``index`` of ``task``: each
    runs once per kernel (the cases are the same on every run, and so are their seeds); raises what it raised."""
    key = (task.id, index, name)
    if key not in _OUTPUTS:
        try:
            _OUTPUTS[key] = (True, task.run(fn, case))
        except Exception as error:  # noqa: BLE001
            _OUTPUTS[key] = (False, error)
    ok, value = _OUTPUTS[key]
    if not ok:
        raise value
    return value


_TWINS: dict[str, list[Case]] = {}


def _twin_cases(task: Task) -> list[Case]:
    if task.id not in _TWINS:
        try:
            _TWINS[task.id] = task.make_cases(seed=task.seed + 7919)
        except Exception:  # noqa: BLE001
            _TWINS[task.id] = []
    return _TWINS[task.id]


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


def grade(task_id: str, fn: Any, time_limit: float = DEFAULT_TIME_LIMIT) -> Result:
    """Grade ``fn`` on the cases of task ``task_id``; never raises (except KeyboardInterrupt)."""
    from ..exercises import all_tasks, find_task

    task = find_task(task_id)
    if task is None:
        return Result(task_id, 0, 0, problem=Problem("grader.unknown_task", {
            "task": task_id, "tasks": ", ".join(sorted(all_tasks()))}))
    if not callable(fn):
        return Result(task_id, 0, len(task.make_cases()), problem=Problem("grader.not_callable", {"got": _type_name(fn)}))
    from .model import default_dtype

    with default_dtype():  # the cases and references in float32, whatever a notebook cell set
        return Grader(task, fn, time_limit).grade()
