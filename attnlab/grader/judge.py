"""Grading one task: the learner's function on every case, under the time limit, compared with
the reference; a wrong answer named by the known mistake (mutant) it matches.

Besides the output, every call is watched for three things a comparison of outputs cannot see:

* an input tensor edited in place (the caller's data changed: a real data bug);
* a torch API the task says not to use (``Task.forbidden``);
* a tensor made on the CPU while the inputs are elsewhere: one case runs again with its tensors
  on PyTorch's ``meta`` device (shapes and dtypes, no data), where mixing in a CPU tensor fails
  the way it fails on a GPU. What ``meta`` cannot run (reading values with ``.item()``) is not
  held against the learner.

What a call does besides returning is watched by :mod:`.watch` (whose frames are the learner's:
:mod:`.frames`; the course's copies of the answer: :mod:`.course_copies`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Callable

from .compare import _type_name, _value, returned, same_output
from .course_copies import handed_in, protected
from .drawn import DrawnInputs, run_seed
from .frames import frame_kind
from .learner_function import _keeps_tensors
from .mistakes import MistakeNames
from .model import Case, Failure, Problem, Refusal, Result, Task, noting
from .tensors import _nan_pattern, _tensors, _to_device
from .timelimit import TimeLimitExceeded, call_with_time_limit
from .watch import Watch, _changed, _ForbiddenApis, _ForbiddenOps, _Guard, input_names

DEFAULT_TIME_LIMIT = 10.0  # seconds per call of the learner's function
PROBE_DEVICE = "meta"
DEVICE_MIX = ("is not on the expected device", "Expected all tensors to be on the same device")
_OUTPUTS: dict[tuple[str, int, str], tuple[bool, Any]] = {}  # (task, case, mutant, "", "~twin" or "~meta"): output


class Grader(MistakeNames):
    """The learner's function ``fn`` on the cases of ``task``."""

    def __init__(self, task: Task, fn: Callable, time_limit: float, seed: int | None = None):
        self.task, self.fn, self.time_limit = task, fn, time_limit
        self.seed = run_seed(seed)  # the drawn inputs' (drawn.py)
        self.probe_meta = task.device_probe  # off once the reference cannot run on meta
        self.protected = protected(task)

    def call(self, case: Case, seed: int | None = None, watch: Watch | None = None,
             args: tuple | None = None, kwargs: dict | None = None) -> Any:
        """The learner's function on ``case`` under the time limit; ``watch`` collects what else it did."""
        task = self.task
        found: list[str] = []
        modes = ([_ForbiddenApis(task.forbidden, found)] if task.forbidden else []) + \
            ([_ForbiddenOps(task.forbidden_ops, found)] if task.forbidden_ops else [])
        side: list[Problem] = []
        guard = _Guard(self.protected, side)
        # the guard outside the time limit: what it puts back after the call cannot be cut short by the limit
        around = lambda call: guard(lambda: call_with_time_limit(call, self.time_limit))  # noqa: E731
        with noting() as noted:
            try:
                with contextlib.ExitStack() as stack:  # the modes entered and left outside the time limit
                    for mode in modes:
                        stack.enter_context(mode)
                    got, after, _ = task.run_with_inputs(self.fn, case, seed, args, kwargs, around, learner=True)
            finally:
                if watch is not None:
                    for problem in [*side, *noted]:
                        watch.add(problem)
        self.last_args = after  # the arguments as the function left them (kept: a later call may still edit them)
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
        where = learner_line(error)
        if where is not None:
            key = "grader.raised_at" if where["code"] else "grader.raised_line"
            return Problem(key, {"error": type(error).__name__, "message": message, **where})
        return Problem("grader.raised", {"error": type(error).__name__, "message": message})

    # --- the device probe
    def device_problem(self, case: Case) -> Problem | None:
        """``case`` again with its tensors on the meta device: a CPU tensor mixed in fails there."""
        task = self.task
        if not task.device_probe or case.judge is not None or not _tensors(case.args):
            return None
        args, kwargs = _to_device(case.args, PROBE_DEVICE), _to_device(case.kwargs, PROBE_DEVICE)
        key = (task.id, self.index[id(case)], "~meta")  # the reference on meta: once per case and process
        if key not in _OUTPUTS:
            try:
                expected = task.run_with_inputs(task.reference, case, args=args, kwargs=kwargs)[0]
                runs = bool(_tensors(expected)) and all(t.device.type == PROBE_DEVICE for t in _tensors(expected))
            except Exception:  # noqa: BLE001 - the reference needs values: no probe for this task
                runs = False
            _OUTPUTS[key] = (runs, None)
        if not _OUTPUTS[key][0]:
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
                if _keeps_tensors(self.fn):  # a result kept from an earlier call, on that call's device
                    return Problem("grader.memoized_device")
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
        total = len(cases)
        if task.contract is not None:  # the drawn inputs (and the gradients): once every case above passed
            points = [("drawn", None, "")] + ([("grads", None, "")] if task.contract.grads else [])
            if failures:
                points = [(what, Problem("grader.drawn_skipped"), "") for what, _, _ in points]
            else:
                history = [("grader.memoized_case", n + 1, got, want) for n, (got, want, ok) in
                           enumerate(zip(outputs, expected, called)) if ok and cases[n].judge is None]
                drawn, label, grads, grads_label = DrawnInputs(self, self.seed, history).run()
                points = [("drawn", drawn, label)] + ([("grads", grads, grads_label)] if task.contract.grads else [])
            for what, problem, label in points:
                total += 1
                if problem is not None:
                    failures.append(Failure(total, label, problem, drawn=what))
        return Result(task.id, total - len(failures), total, failures)


def learner_line(error: BaseException) -> dict | None:
    """``{"line": n, "code": "..."}``: the innermost line of the learner's own code in ``error``'s traceback
    (a notebook cell's line number, as Jupyter shows it), or None when the learner's code is not in it."""
    import linecache

    found = None
    tb = error.__traceback__
    while tb is not None:
        if frame_kind(tb.tb_frame.f_code.co_filename) == "learner":
            found = tb
        tb = tb.tb_next
    if found is None:
        return None
    code = linecache.getline(found.tb_frame.f_code.co_filename, found.tb_lineno).strip()
    if len(code) > 80:
        code = code[:79] + "…"
    return {"line": found.tb_lineno, "code": code}


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


def grade(task_id: str, fn: Any, time_limit: float = DEFAULT_TIME_LIMIT, seed: int | None = None) -> Result:
    """Grade ``fn`` on the cases of task ``task_id``; never raises (except KeyboardInterrupt)."""
    from ..exercises import all_tasks, find_task

    task = find_task(task_id)
    if task is None:
        return Result(task_id, 0, 0, problem=Problem("grader.unknown_task", {
            "task": task_id, "tasks": ", ".join(sorted(all_tasks()))}))
    if not callable(fn):
        return Result(task_id, 0, task.points(), problem=Problem("grader.not_callable", {"got": _type_name(fn)}))
    from . import state

    with state.clean():  # the cases and references in float32 on the CPU, whatever a notebook cell set
        grader = Grader(task, fn, time_limit, seed)
        name = handed_in(fn, grader.protected)
        if name is not None:  # the grader's answer (or the course's copy) itself handed in
            return Result(task_id, 0, task.points(), problem=Problem("grader.course_copy", {"name": name}))
        return grader.grade()
