"""The notebook front end: ``check(task, fn)`` after each task, ``summary()`` at the end."""

from __future__ import annotations

import json
import os
from typing import Any

from ..i18n import get_language, tr
from .judge import DEFAULT_TIME_LIMIT, grade
from .model import Problem, Result

LOG_ENV = "ATTNLAB_GRADER_LOG"  # the command line reads every check from this file

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
    from ..exercises import exercise_tasks, find_task

    exercises = sorted({find_task(t).exercise for t in _session if find_task(t) is not None})
    results = {t: _session.get(t) for e in exercises for t in exercise_tasks(e)}
    print(report_text(results, get_language()), flush=True)


def report_text(results: dict[str, Result | None], lang: str) -> str:
    """Per task points (``None``: never checked) and the total, in ``lang``."""
    from ..exercises import find_task

    lines = []
    points = total = 0
    for task_id, result in results.items():
        if result is None:
            task = find_task(task_id)
            n = task.points() if task is not None else 0
            result = Result(task_id, 0, n, problem=Problem("grader.not_checked"))
        points += result.points
        total += result.total
        lines.append(result.text(lang))
    lines.append(tr("grader.total", lang=lang, points=points, total=total))
    return "\n".join(lines)
