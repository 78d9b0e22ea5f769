"""The course's grader: run a learner's function on fresh cases, compare, name known mistakes.

In an exercise notebook::

    from attnlab.grader import check, summary
    check("ch1.causal_mask", build_causal_mask)   # prints points and one line per failed case
    summary()                                     # the total of every check run in this kernel

From a shell (runs the notebook in a fresh kernel; needs nbclient and ipykernel)::

    python -m attnlab.grader grade exercises/de/01-causal-mask.ipynb
    python -m attnlab.grader grade exercises/de        # every notebook in the folder

How a task is graded (see docs/exercises.md for writing one):

* Each task (``attnlab/exercises/chN.py``) has a reference function, a case
  generator (sizes that differ from the worked example in the notebook) and
  known-wrong variants, the *mutants*. Every case is worth one point.
* The learner's function runs on each case under a time limit, with the
  torch RNG seeded per case and the notebook's own RNG state left untouched.
* Its output is compared with the reference's: exactly for booleans and
  integers, with tolerances for floats. When they differ, the output is
  compared with each mutant's output on the same case; a match names the
  mistake. Otherwise the feedback says what is wrong (None, type, shape,
  dtype, device, NaN, values), with what was expected and what came back.
* An output that equals the learner's output on another case whose expected
  answer differs is reported as hard-coded; an output that changes between
  two calls with the same input is reported as random.

Time limit: on the main thread of a Unix process (a Jupyter kernel, Colab,
the command line) a SIGALRM timer interrupts the learner's code and stops it,
so an endless loop costs the limit and nothing more. Elsewhere (Windows, or
called from a thread) the function runs in a daemon thread that is abandoned
after the limit: the notebook goes on, but the runaway thread keeps a CPU busy
until the kernel restarts. A single long C call (one huge matmul) is only
interrupted when it returns, in both cases.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .i18n import get_language, tr

DEFAULT_TIME_LIMIT = 10.0  # seconds per call of the learner's function
LOG_ENV = "ATTNLAB_GRADER_LOG"  # the command line reads every check from this file


# --------------------------------------------------------------------------
# What a chapter module declares


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

    def run(self, fn: Callable, case: Case, seed: int | None = None) -> Any:
        args, kwargs = _clone(case.args), _clone(case.kwargs)
        caller = self.call or (lambda f, *a, **k: f(*a, **k))
        with _rng_forked(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(case.seed if seed is None else seed)
            return caller(fn, *args, **kwargs)

    def difference(self, expected: Any, got: Any) -> "Problem | None":
        if self.compare is not None:
            return self.compare(expected, got)
        return compare_outputs(expected, got, atol=self.atol, rtol=self.rtol)

    def make_cases(self) -> list[Case]:
        generator = torch.Generator().manual_seed(self.seed)
        return self.cases(generator)


@dataclass
class Problem:
    """A message key of messages.toml and its values; ``detail`` adds what came back."""

    key: str
    params: dict = field(default_factory=dict)
    detail: "Problem | None" = None

    def text(self, lang: str | None = None) -> str:
        main = tr(self.key, lang=lang, **self.params)
        if self.detail is not None:
            main = tr("grader.with_detail", lang=lang, problem=main, detail=self.detail.text(lang))
        return main

    def as_dict(self) -> dict:
        out = {"key": self.key, "params": self.params}
        if self.detail is not None:
            out["detail"] = self.detail.as_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Problem":
        detail = data.get("detail")
        return cls(data["key"], dict(data.get("params", {})), cls.from_dict(detail) if detail else None)


@dataclass
class Failure:
    case: int  # 1-based
    label: str
    problem: Problem

    def text(self, lang: str | None = None) -> str:
        return tr("grader.case", lang=lang, n=self.case, case=self.label, problem=self.problem.text(lang))


@dataclass
class Result:
    task: str
    points: int
    total: int
    failures: list[Failure] = field(default_factory=list)
    problem: Problem | None = None  # the whole check failed (unknown task, not a function)

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
                numbers = ", ".join(str(f.case) for f in failures)
                lines.append("  " + tr("grader.cases", lang=lang, numbers=numbers, problem=text))
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"task": self.task, "points": self.points, "total": self.total,
                "failures": [{"case": f.case, "label": f.label, "problem": f.problem.as_dict()}
                             for f in self.failures],
                "problem": self.problem.as_dict() if self.problem else None}

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        failures = [Failure(f["case"], f["label"], Problem.from_dict(f["problem"])) for f in data["failures"]]
        problem = Problem.from_dict(data["problem"]) if data.get("problem") else None
        return cls(data["task"], data["points"], data["total"], failures, problem)


def task_title(task_id: str, lang: str | None = None) -> str:
    key = f"grader.task.{task_id}"
    from .i18n import catalog

    return tr(key, lang=lang) if key in catalog() else task_id


# --------------------------------------------------------------------------
# Time limit and isolation


class TimeLimitExceeded(BaseException):
    """Raised into the learner's code when its time is up (a BaseException, so a
    learner's ``except Exception`` cannot swallow it)."""


def call_with_time_limit(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``, stopped after ``seconds`` (SIGALRM on the main thread, else a daemon thread)."""
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        def on_alarm(signum, frame):
            raise TimeLimitExceeded

        previous = signal.signal(signal.SIGALRM, on_alarm)
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
        start = time.monotonic()
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer_delay:  # someone else's timer (pytest-timeout, ...) keeps running
                signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - start), 1e-3),
                                 outer_interval)
    outcome: dict[str, Any] = {}
    grad_enabled = torch.is_grad_enabled()  # grad mode is per thread

    def target():
        try:
            with torch.set_grad_enabled(grad_enabled):
                outcome["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error

    worker = threading.Thread(target=target, daemon=True, name="attnlab-grader-call")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeLimitExceeded
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@contextlib.contextmanager
def _rng_forked():
    """Run with the torch RNG forked: the notebook's random numbers stay as they were."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        yield


def _clone(value: Any) -> Any:
    """Fresh copies of every tensor, so a learner's in-place edit cannot change a case."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------
# Comparing outputs


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


def _plain(x: Any) -> Any:
    """Python values for comparison: tuples -> lists, 0-d tensors and integral floats -> numbers."""
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
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
    return None if expected == got else (where, expected, got)


def _holds_tensors(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) or _holds_tensors(v) for v in x)


def compare_outputs(expected: Any, got: Any, atol: float = 1e-5, rtol: float = 1e-4) -> Problem | None:
    """None when ``got`` is right; else the first thing that is wrong."""
    if got is None and expected is not None:
        return Problem("grader.none")
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return Problem("grader.not_tensor", {"got": _type_name(got)})
        if got.shape != expected.shape:
            return Problem("grader.shape", {"expected": _shape(expected.shape), "got": _shape(got.shape)})
        if got.dtype != expected.dtype:
            return Problem("grader.dtype", {"expected": str(expected.dtype), "got": str(got.dtype)})
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
                return Problem("grader.returned_item", {"n": n + 1, "total": len(expected)}, detail=problem)
        return None
    expected_plain, got_plain = _plain(expected), _plain(got)
    if isinstance(expected_plain, list) and not isinstance(got_plain, list):
        return Problem("grader.wrong_type", {"expected": _type_name(expected), "got": _type_name(got)})
    found = _first_difference(expected_plain, got_plain)
    if found is None:
        return None
    where, e, g = found
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


# --------------------------------------------------------------------------
# Grading


def _failed_call(error: BaseException, time_limit: float) -> Problem:
    if isinstance(error, TimeLimitExceeded):
        return Problem("grader.timeout", {"seconds": _value(float(time_limit))})
    if isinstance(error, NotImplementedError):
        return Problem("grader.not_implemented")
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if len(message) > 160:
        message = message[:159] + "…"
    return Problem("grader.raised", {"error": type(error).__name__, "message": message})


def grade(task_id: str, fn: Any, time_limit: float = DEFAULT_TIME_LIMIT) -> Result:
    """Grade ``fn`` on the cases of task ``task_id``; never raises (except KeyboardInterrupt)."""
    from .exercises import all_tasks

    tasks = all_tasks()
    if task_id not in tasks:
        return Result(task_id, 0, 0, problem=Problem("grader.unknown_task", {
            "task": task_id, "tasks": ", ".join(sorted(tasks))}))
    task = tasks[task_id]
    cases = task.make_cases()
    if not callable(fn):
        return Result(task_id, 0, len(cases), problem=Problem("grader.not_callable", {"got": _type_name(fn)}))

    def call(f: Callable, case: Case, seed: int | None = None) -> Any:
        return call_with_time_limit(lambda: task.run(f, case, seed), time_limit)

    outputs: list[Any] = []
    problems: list[Problem | None] = []
    expected: list[Any] = []
    for case in cases:
        if case.judge is not None:
            expected.append(None)
            outputs.append(None)
            try:
                problems.append(case.judge(lambda seed, case=case: call(fn, case, seed)))
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # noqa: BLE001 - the learner's code, whatever it raises
                problems.append(_failed_call(error, time_limit))
            continue
        reference = task.run(task.reference, case)
        expected.append(reference)
        try:
            got = call(fn, case)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001
            outputs.append(None)
            problems.append(_failed_call(error, time_limit))
            continue
        outputs.append(got)
        try:
            problems.append(_diagnose(task, fn, case, reference, got, call))
        except KeyboardInterrupt:
            raise
        except Exception:  # noqa: BLE001 - an output the comparison cannot even read
            problems.append(Problem("grader.unreadable", {"got": _type_name(got)}))
    # Hard-coded: the same answer as on another case whose expected answer differs.
    for i, problem in enumerate(problems):
        if problem is None or problem.key.startswith("grader.mutant.") or cases[i].judge is not None:
            continue
        if outputs[i] is None:
            continue
        for j in range(len(cases)):
            if (j != i and cases[j].judge is None and outputs[j] is not None
                    and same_output(outputs[i], outputs[j]) and not same_output(expected[i], expected[j])):
                problems[i] = Problem("grader.hardcoded", {"other": j + 1}, detail=problem)
                break
    failures = [Failure(n + 1, case.label, p) for n, (case, p) in enumerate(zip(cases, problems)) if p is not None]
    return Result(task_id, len(cases) - len(failures), len(cases), failures)


def _diagnose(task: Task, fn: Callable, case: Case, reference: Any, got: Any,
              call: Callable[..., Any]) -> Problem | None:
    problem = task.difference(reference, got)
    if problem is None:
        return None
    for name, mutant in task.mutants.items():
        try:
            wrong = task.run(mutant, case)
        except Exception:  # noqa: BLE001 - a mutant that cannot run on this case says nothing
            continue
        if not same_output(wrong, reference) and same_output(got, wrong):
            return Problem(f"grader.mutant.{task.id}.{name}", detail=problem)
    innermost = problem
    while innermost.key == "grader.returned_item" and innermost.detail is not None:
        innermost = innermost.detail
    if innermost.key in ("grader.values", "grader.values_exact", "grader.nan"):
        try:
            again = call(fn, case, case.seed + 1)
        except BaseException:  # noqa: BLE001
            again = None
        if again is not None and not same_output(got, again, atol=0, rtol=0):
            return Problem("grader.random_output", detail=problem)
    return problem


# --------------------------------------------------------------------------
# In the notebook

_session: dict[str, Result] = {}  # task id -> the latest result in this kernel


def check(task_id: str, fn: Any, time_limit: float = DEFAULT_TIME_LIMIT) -> None:
    """Grade ``fn`` for task ``task_id`` and print the points and one line per failed case.

    Never raises: whatever the learner's code does, the notebook goes on.
    """
    try:
        result = grade(task_id, fn, time_limit=time_limit)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - a bug in the grader must not stop the notebook
        result = Result(task_id, 0, 0, problem=Problem("grader.internal_error", {
            "error": f"{type(error).__name__}: {error}"}))
    _session[task_id] = result
    _log(result)
    print(result.text(), flush=True)


def _log(result: Result) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"language": get_language(), **result.as_dict()}, ensure_ascii=False) + "\n")


def summary() -> None:
    """Print the points of every task of the exercises checked in this kernel, and the total."""
    from .exercises import all_tasks, exercise_tasks

    tasks = all_tasks()
    exercises = sorted({tasks[t].exercise for t in _session if t in tasks})
    results = {t: _session.get(t) for e in exercises for t in exercise_tasks(e)}
    print(report_text(results, get_language()), flush=True)


def report_text(results: dict[str, Result | None], lang: str) -> str:
    """Per task points (``None``: never checked) and the total, in ``lang``."""
    from .exercises import all_tasks

    tasks = all_tasks()
    lines = []
    points = total = 0
    for task_id, result in results.items():
        if result is None:
            n = len(tasks[task_id].make_cases()) if task_id in tasks else 0
            result = Result(task_id, 0, n, problem=Problem("grader.not_checked"))
        points += result.points
        total += result.total
        lines.append(result.text(lang))
    lines.append(tr("grader.total", lang=lang, points=points, total=total))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# From the command line


def grade_notebook(path, cell_timeout: int = 120) -> dict:
    """Run the notebook at ``path`` in a fresh kernel and collect its checks.

    Returns ``{"notebook", "exercise", "language", "points", "total", "tasks": {id: Result dict}}``.
    Cells that raise do not stop the run (each later check still counts).
    """
    import pathlib
    import tempfile

    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        raise SystemExit(tr("grader.cli.needs_nbclient")) from None
    from .exercises import all_tasks, exercise_tasks

    path = pathlib.Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    meta = nb.metadata.get("attnlab", {})
    lang = meta.get("language", get_language())
    exercise = pathlib.Path(meta.get("source", path.name)).stem
    expected_tasks = exercise_tasks(exercise)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = pathlib.Path(tmp) / "checks.jsonl"
        log_path.touch()
        previous = os.environ.get(LOG_ENV)
        os.environ[LOG_ENV] = str(log_path)  # the kernel inherits it
        try:
            client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                                    interrupt_on_timeout=True, record_timing=False,
                                    resources={"metadata": {"path": str(path.parent)}})
            # The kernel's own log (e.g. ipykernel's warning about TCP without encryption) goes to a
            # file, not to the learner's terminal; it is shown only when the run itself fails.
            kernel_log = pathlib.Path(tmp) / "kernel.log"
            with kernel_log.open("w") as log:
                try:
                    client.execute(stderr=log)
                except Exception:
                    log.flush()
                    sys.stderr.write(kernel_log.read_text(errors="replace")[-4000:])
                    raise
        finally:
            if previous is None:
                os.environ.pop(LOG_ENV, None)
            else:
                os.environ[LOG_ENV] = previous
        checks = [json.loads(line) for line in log_path.read_text("utf-8").splitlines() if line.strip()]
    found = {c["task"]: Result.from_dict(c) for c in checks}
    if checks:
        lang = checks[-1].get("language", lang)
    tasks = all_tasks()
    results: dict[str, Result] = {}
    for task_id in expected_tasks or list(found):
        if task_id in found:
            results[task_id] = found[task_id]
        else:
            n = len(tasks[task_id].make_cases()) if task_id in tasks else 0
            results[task_id] = Result(task_id, 0, n, problem=Problem("grader.not_checked"))
    return {"notebook": str(path), "exercise": exercise, "language": lang,
            "points": sum(r.points for r in results.values()), "total": sum(r.total for r in results.values()),
            "tasks": {t: r.as_dict() for t, r in results.items()}}


def notebook_report(graded: dict) -> str:
    results = {t: Result.from_dict(r) for t, r in graded["tasks"].items()}
    lang = graded["language"]
    return tr("grader.cli.report_title", lang=lang, exercise=graded["exercise"]) + "\n" + report_text(results, lang)


def _progress_bar(points: int, total: int, width: int = 10) -> str:
    filled = round(width * points / total) if total else 0
    return "█" * filled + "░" * (width - filled)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import pathlib

    parser = argparse.ArgumentParser(prog="python -m attnlab.grader",
                                     description="Grade exercise notebooks in a fresh kernel.")
    sub = parser.add_subparsers(dest="command", required=True)
    grade_parser = sub.add_parser("grade", help="grade one notebook or every notebook in a folder")
    grade_parser.add_argument("path", help="an exercise notebook (.ipynb) or a folder of them")
    grade_parser.add_argument("--out", help="folder for the reports (default: next to each notebook)")
    grade_parser.add_argument("--cell-timeout", type=int, default=120, help="seconds per cell (default 120)")
    args = parser.parse_args(argv)

    target = pathlib.Path(args.path)
    notebooks = sorted(target.glob("*.ipynb")) if target.is_dir() else [target]
    if not notebooks or not all(p.exists() for p in notebooks):
        print(f"no notebook at {target}", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    everything = []
    for path in notebooks:
        start = time.perf_counter()
        graded = grade_notebook(path, cell_timeout=args.cell_timeout)
        graded["seconds"] = round(time.perf_counter() - start, 1)
        everything.append(graded)
        folder = out_dir or path.parent
        text = notebook_report(graded)
        (folder / f"{path.stem}.grade.txt").write_text(text + "\n", "utf-8")
        (folder / f"{path.stem}.grade.json").write_text(
            json.dumps(graded, indent=1, ensure_ascii=False) + "\n", "utf-8")
        if len(notebooks) == 1:
            print(text)
            print(tr("grader.cli.written", lang=graded["language"],
                     path=str(folder / f"{path.stem}.grade.{{txt,json}}")))
        else:
            lang = graded["language"]
            print(f"{_progress_bar(graded['points'], graded['total'])} "
                  + tr("grader.cli.progress", lang=lang, exercise=graded["exercise"],
                       points=graded["points"], total=graded["total"]), flush=True)
            for task_id, result in graded["tasks"].items():
                mark = "✓" if result["total"] and result["points"] == result["total"] else "✗"
                print(f"    {mark} {task_title(task_id, lang)}: {result['points']}/{result['total']}", flush=True)
    if len(notebooks) > 1:
        lang = everything[0]["language"]
        points, total = sum(g["points"] for g in everything), sum(g["total"] for g in everything)
        print(tr("grader.total", lang=lang, points=points, total=total))
        folder = out_dir or target
        (folder / "progress.json").write_text(json.dumps(
            {"points": points, "total": total, "exercises": everything}, indent=1, ensure_ascii=False) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    from attnlab.grader import main as _main  # one module object, also for the task registry

    sys.exit(_main())
