"""The course's grader: run a learner's function on fresh cases, compare, name known mistakes.

In an exercise notebook::

    from attnlab.grader import check, summary
    check("ch1.causal_mask", build_causal_mask)   # prints points and one line per failed case
    summary()                                     # the total of every check run in this kernel

From a shell (runs the notebook in a fresh kernel; needs nbclient and ipykernel)::

    python -m attnlab.grader grade exercises/de/01-causal-mask.ipynb
    python -m attnlab.grader grade exercises/de        # every notebook in the folder

One idea per module (docs/exercises.md explains how to write a task):

* :mod:`.model` — what a chapter module declares (``Task``, ``Case``) and what grading returns
  (``Problem``, ``Failure``, ``Result``);
* :mod:`.timelimit` — the time limit a learner's code cannot defeat;
* :mod:`.compare` — comparing an output with the reference's, in words a learner reads;
* :mod:`.judge` — grading a task: the cases, the known mistakes (mutants), inputs edited in place,
  forbidden APIs, tensors made on the wrong device;
* :mod:`.watch` — what one learner's call does besides returning (inputs edited, forbidden APIs,
  torch patched, the RNG reseeded, the course's copy called);
* :mod:`.frames` — whose code a stack frame runs: the learner's, the course's, torch's, a library's;
* :mod:`.course_copies` — the course's copies of an answer a learner may not call;
* :mod:`.learner_function` — what a learner's function names and keeps, read without running it;
* :mod:`.tensors` — the tensors inside a value: listed, moved to the probe's device, their NaNs;
* :mod:`.notebook` — ``check`` and ``summary``;
* :mod:`.cli` — ``python -m attnlab.grader grade``.

The mutants stay beside each task in ``attnlab/exercises/chN.py`` (or its module of ``chN/``).
"""

from .compare import BLOCKED_AT_MOST, compare_outputs, compare_values, same_output
from .contract import LAYOUTS, VIEWABLE, Contract, Draw
from .judge import DEFAULT_TIME_LIMIT, grade
from .model import Case, Failure, Problem, Refusal, Result, Task, note, task_title, watched_models
from .notebook import LOG_ENV, check, report_text, summary
from .timelimit import TimeLimitExceeded, call_with_time_limit
from .cli import grade_notebook, main, notebook_report  # noqa: E402 - after what it uses

__all__ = ["BLOCKED_AT_MOST", "Case", "Contract", "Draw", "LAYOUTS", "VIEWABLE", "DEFAULT_TIME_LIMIT", "Failure", "LOG_ENV", "Problem", "Refusal", "Result", "Task",
           "note", "watched_models",
           "TimeLimitExceeded", "call_with_time_limit", "check", "compare_outputs", "compare_values",
           "grade", "grade_notebook", "main", "notebook_report", "report_text", "same_output", "summary",
           "task_title"]
