"""What a chapter module declares (:class:`Task`, :class:`Case`) and what grading returns
(:class:`Problem`, :class:`Failure`, :class:`Result`), with their texts in every language."""

from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..i18n import tr
from .contract import Contract, same_layout_clone  # noqa: F401 - Contract: the type of Task.contract
from .patches import pristine_torch


@dataclass
class Case:
    """One graded call: ``fn(*args, **kwargs)``; worth one point."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""  # shown in feedback, e.g. "T=9" (sizes, no words)
    seed: int = 0  # torch.manual_seed before each call (dropout and other randomness)
    judge: Callable[[Callable[[int], Any]], "Problem | None"] | None = None
    """Instead of comparing with the reference: ``judge(run)`` where ``run(seed)``
    calls the learner's function on this case; returns a Problem or None."""


@dataclass
class Task:
    """A graded task: the learner writes a function that must behave like ``reference``."""

    id: str  # "ch1.causal_mask"; messages: grader.task.<id>, grader.mutant.<id>.<name>
    exercise: str  # slug of the exercise notebook, "01-causal-mask"
    reference: Callable
    cases: Callable[[torch.Generator], list[Case]]
    mutants: dict[str, Callable] = field(default_factory=dict)  # name -> known-wrong function
    alternatives: list[Callable] = field(default_factory=list)  # other correct ways (tests give them full marks)
    call: Callable[..., Any] | None = None  # call(fn, *args, **kwargs); default fn(*args, **kwargs)
    compare: Callable[[Any, Any], "Problem | None"] | None = None  # default compare_outputs
    atol: float = 1e-5
    rtol: float = 1e-4
    seed: int = 0  # the case generator's seed: the same cases on every run
    forbidden: dict[str, Callable[[Any, tuple, dict], bool]] = field(default_factory=dict)
    """APIs the task says not to use: ``{name: test(func, args, kwargs)}`` over every torch call
    the learner's function makes; a call that passes a test costs the case its point, with the
    message ``grader.forbidden.<id>.<name>``."""
    inputs_may_change: bool = False  # False: editing an input tensor in place costs the point
    device_probe: bool = True  # also run one case on the meta device (a CPU tensor mixed in shows)
    input_names: tuple[str, ...] = ()  # names of the case's arguments in messages (default: the reference's)
    course_copies: tuple[str, ...] = ()
    """Dotted names of the course's own functions that do what the task asks ("attnlab.multihead.split_heads"):
    a call of one of them from the learner's code costs the case its point (``grader.course_copy``). The
    grader's own references (``attnlab.exercises``) are refused in every task."""
    repeat: bool = True  # call once more on a case with the same shapes and new values (a result kept between calls shows)
    contract: "Contract | None" = None
    """The task's domain and promises (:class:`attnlab.grader.contract.Contract`): inputs drawn from it on every
    check, called in a row, compared again after the later calls, shrunk when one fails; worth one point, and one
    more for the gradients where it names inputs that must get them."""
    output_names: tuple[str, ...] = ()  # names of the returned values in messages ("out", "k_cache", "v_cache")
    forbidden_ops: dict[str, Callable[[Any, tuple, dict], bool]] = field(default_factory=dict)
    """Like ``forbidden``, but tested on every ATen operator the call runs (``torch.ops.aten...`` and any route
    to it): ``{name: test(op, args, kwargs)}``, message ``grader.forbidden.<id>.<name>``."""

    def points(self) -> int:
        """The task's points: one per case, one for the drawn inputs, one for the gradients."""
        extra = 0 if self.contract is None else 1 + bool(self.contract.grads)
        return len(self.make_cases()) + extra

    def run(self, fn: Callable, case: Case, seed: int | None = None) -> Any:
        return self.run_with_inputs(fn, case, seed)[0]

    def run_with_inputs(self, fn: Callable, case: Case, seed: int | None = None,
                        args: tuple | None = None, kwargs: dict | None = None,
                        around: Callable[[Callable[[], Any]], Any] | None = None,
                        learner: bool = False, grad: bool = False) -> tuple[Any, tuple, dict]:
        """``(output, args, kwargs)``: the arguments as the function left them (fresh copies of the
        case's, or of ``args``/``kwargs``); ``around(call)`` wraps the call (the time limit)."""
        args = clone(case.args if args is None else args)
        kwargs = clone(case.kwargs if kwargs is None else kwargs)
        caller = self.call or (lambda f, *a, **k: f(*a, **k))
        # The learner's code runs with gradients on, as in a notebook cell (an answer may use autograd);
        # the reference and the mutants without (``learner=False``), on the torch the course imported.
        grad_mode = torch.enable_grad() if learner or grad else torch.no_grad()
        pristine = contextlib.nullcontext() if learner else pristine_torch()
        with rng_forked(), grad_mode, pristine, default_dtype(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seed_rng(case.seed if seed is None else seed)
            call = lambda: caller(fn, *args, **kwargs)  # noqa: E731
            return (call() if around is None else around(call)), args, kwargs

    def difference(self, expected: Any, got: Any) -> "Problem | None":
        from .compare import compare_outputs

        if self.compare is not None:
            return self.compare(expected, got)
        return compare_outputs(expected, got, atol=self.atol, rtol=self.rtol, names=self.output_names)

    def make_cases(self, seed: int | None = None) -> list[Case]:
        """The cases; with another ``seed``, cases of the same sizes and new values. They are the same on every
        call (a seeded generator), so each task makes them once per process and hands out copies: building the
        models of exercises 4, 5 and 10 costs a second or more, and every check and test asks again."""
        seed = self.seed if seed is None else seed
        key = (self.id, self.cases, seed)
        if key not in _CASES:
            generator = torch.Generator().manual_seed(seed)
            with pristine_torch(), default_dtype(), torch.random.fork_rng(devices=[]):
                _CASES[key] = self.cases(generator)
        with pristine_torch():  # a learner's function may change what it is handed (a config): copies
            return copy.deepcopy(_CASES[key])


_CASES: dict[tuple, list[Case]] = {}  # (task id, case function, seed): the cases as first made


def seed_rng(seed: int) -> None:
    """``torch.manual_seed(seed)``; on a machine without an accelerator, the CPU generator alone,
    which is all torch.manual_seed changes there. It also queues the seed for CUDA, XPU and MTIA in
    case one starts later, and records the caller's stack for each (``traceback.format_stack``):
    0.5 ms a call at the depth of a pytest test, a tenth of the grader's time in the test suite."""
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype = torch.float32):
    """Grade under torch's usual default dtype, whatever a notebook cell set (and restore it)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


class Refusal(Exception):
    """Raised by a task's ``call`` to refuse an answer with a named problem (not an error of the learner's code)."""

    def __init__(self, problem: "Problem"):
        super().__init__(problem.key)
        self.problem = problem


_NOTES: list[list] = []  # the problems noted by a task's call during the learner's call (innermost last)


def note(problem: "Problem") -> None:
    """From a task's ``call``: a mistake seen besides the output (a model left in training mode)."""
    if _NOTES and all(p.key != problem.key for p in _NOTES[-1]):
        _NOTES[-1].append(problem)


@contextlib.contextmanager
def noting():
    found: list = []
    _NOTES.append(found)
    try:
        yield found
    finally:
        _NOTES.remove(found)


@contextlib.contextmanager
def rng_forked():
    """Run with the torch RNG forked: the notebook's random numbers stay as they were."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield


def clone(value: Any) -> Any:
    """Fresh copies of every tensor, so a learner's in-place edit cannot change a case; a tensor keeps its
    layout (a slice, a transposed or strided view stays one: the contract's inputs come in such layouts)."""
    if isinstance(value, torch.Tensor):
        return same_layout_clone(value)
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


@dataclass
class Problem:
    """A message key of messages.toml and its values; ``detail`` adds what came back, ``also``
    names further mistakes found in the same case."""

    key: str
    params: dict = field(default_factory=dict)
    detail: "Problem | None" = None
    also: list["Problem"] = field(default_factory=list)

    def text(self, lang: str | None = None) -> str:
        main = tr(self.key, lang=lang, **self.params)
        if self.detail is not None:
            main = tr("grader.with_detail", lang=lang, problem=main, detail=self.detail.text(lang))
        for other in self.also:
            main = tr("grader.also", lang=lang, problem=main, other=other.text(lang))
        return main

    def keys(self) -> set[str]:
        """This key and those of the further mistakes."""
        return {self.key}.union(*(other.keys() for other in self.also))

    def as_dict(self) -> dict:
        out = {"key": self.key, "params": self.params}
        if self.detail is not None:
            out["detail"] = self.detail.as_dict()
        if self.also:
            out["also"] = [other.as_dict() for other in self.also]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Problem":
        detail = data.get("detail")
        return cls(data["key"], dict(data.get("params", {})), cls.from_dict(detail) if detail else None,
                   [cls.from_dict(other) for other in data.get("also", [])])


@dataclass
class Failure:
    case: int  # 1-based
    label: str
    problem: Problem
    drawn: str = ""  # "drawn": the point of the inputs drawn from the contract; "grads": of the gradients

    def text(self, lang: str | None = None) -> str:
        if self.drawn:
            key = f"grader.case_{self.drawn}" + ("" if self.label else "_bare")
            return tr(key, lang=lang, n=self.case, case=self.label, problem=self.problem.text(lang))
        return tr("grader.case", lang=lang, n=self.case, case=self.label, problem=self.problem.text(lang))


@dataclass
class Result:
    task: str
    points: int
    total: int
    failures: list[Failure] = field(default_factory=list)
    problem: Problem | None = None  # the whole check failed (unknown task, not a function, cell stopped)

    @property
    def passed(self) -> bool:
        return self.total > 0 and self.points == self.total

    def text(self, lang: str | None = None) -> str:
        title = task_title(self.task, lang)
        mark = "✓" if self.passed else "✗"
        lines = [f"{mark} " + tr("grader.score", lang=lang, task=title, points=self.points, total=self.total)]
        if self.problem is not None:
            lines.append("  " + self.problem.text(lang))
        groups: dict[str, list[Failure]] = {}  # the same message for several cases: one line
        for failure in self.failures:
            groups.setdefault(failure.problem.text(lang), []).append(failure)
        for text, failures in groups.items():
            if len(failures) == 1:
                lines.append("  " + failures[0].text(lang))
            else:
                numbers = tr("grader.list_sep", lang=lang).join(str(f.case) for f in failures)
                lines.append("  " + tr("grader.cases", lang=lang, numbers=numbers, problem=text))
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"task": self.task, "points": self.points, "total": self.total,
                "failures": [{"case": f.case, "label": f.label, "problem": f.problem.as_dict(), "drawn": f.drawn}
                             for f in self.failures],
                "problem": self.problem.as_dict() if self.problem else None}

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        failures = [Failure(f["case"], f["label"], Problem.from_dict(f["problem"]), f.get("drawn", ""))
                    for f in data["failures"]]
        problem = Problem.from_dict(data["problem"]) if data.get("problem") else None
        return cls(data["task"], data["points"], data["total"], failures, problem)


def task_title(task_id: str, lang: str | None = None) -> str:
    from ..i18n import catalog

    key = f"grader.task.{task_id}"
    return tr(key, lang=lang) if key in catalog() else task_id


@contextlib.contextmanager
def watched_models(*models):
    """Around the learner's use of the models a task hands over: a module switched from eval to training mode
    (``grader.left_in_training``) or from training to eval mode (``grader.left_in_eval``: the caller's training
    would go on without dropout; ``eval_mode(model)`` restores the mode), a setting of a module changed
    (``Dropout.p`` set to 0: ``grader.changed_model_attribute``) or a weight changed (``grader.changed_weights``)
    is noted."""
    modes = [[m.training for m in model.modules()] for model in models]
    settings = [[_settings(m) for m in model.modules()] for model in models]
    states = [{k: v.detach().clone() for k, v in model.state_dict().items()} for model in models]
    try:
        yield
    finally:
        for model, before, state, was in zip(models, modes, states, settings):
            if any(m.training and not then for m, then in zip(model.modules(), before)):
                note(Problem("grader.left_in_training"))
            elif any(then and not m.training for m, then in zip(model.modules(), before)):
                note(Problem("grader.left_in_eval"))
            for (name, module), old in zip(model.named_modules(), was):
                new = _settings(module)
                changed = [key for key in old if new.get(key, _UNSET) != old[key]]
                if changed:
                    note(Problem("grader.changed_model_attribute", {
                        "name": f"{name}.{changed[0]}" if name else changed[0], "before": old[changed[0]],
                        "after": new.get(changed[0], "-")}))
                    break
            now = model.state_dict()
            for name, value in state.items():
                current = now.get(name)
                if value.is_meta or (current is not None and current.is_meta):
                    continue
                if current is None or current.shape != value.shape or not torch.equal(current.detach(), value):
                    note(Problem("grader.changed_weights", {"name": name}))
                    break


_UNSET = object()  # a setting the module no longer has


def _settings(module) -> dict:
    """A module's plain settings (``p`` of a Dropout, ``eps`` of a norm), not its mode."""
    return {k: v for k, v in vars(module).items()
            if isinstance(v, (bool, int, float, str)) and k != "training" and not k.startswith("_")}
