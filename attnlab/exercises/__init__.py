"""The graded tasks of the exercise notebooks, one module per chapter.

Each module ``chN`` defines ``TASKS``, a list of :class:`attnlab.grader.Task`
(reference, case generator, mutants, alternative correct solutions): a file
``chN.py``, or a package ``chN/`` whose modules hold the tasks that share code
(its ``__init__.py`` gathers their ``TASKS``). A new chapter adds its module
name to ``CHAPTERS``; docs/exercises.md shows how.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

import torch

CHAPTERS = ("ch1", "ch2", "ch3",
            "ch4", "ch5",  # exercises 4 and 5
            "ch6", "ch7",
            "ch8", "ch9",  # exercises 8 and 9
            "ch10",  # exercise 10 (needs attnlab[audit])
            "ch11",  # exercise 11
            "ch12")  # exercise 12


@lru_cache(maxsize=None)
def chapter_tasks(name: str) -> dict:
    """``{task id: Task}`` of one chapter module (``"ch4"``), in notebook order. Only that module
    is imported: a check in exercise 4 does not pay for chapter 10's transformers or chapter 3's
    ``torch.nn.attention.bias`` (which imports torch._dynamo), several seconds per kernel."""
    if name not in CHAPTERS:
        raise KeyError(name)
    module = importlib.import_module(f"{__name__}.{name}")
    tasks = {}
    for task in module.TASKS:
        if task.id in tasks:
            raise ValueError(f"task id {task.id!r} is defined twice")
        if task.id.split(".", 1)[0] != name or _chapter_of(task.exercise) != name:
            raise ValueError(f"task {task.id!r} of exercise {task.exercise!r} does not belong in {name}.py")
        tasks[task.id] = task
    return tasks


@lru_cache(maxsize=1)
def all_tasks() -> dict:
    """``{task id: Task}`` over every chapter module, in notebook order."""
    tasks = {}
    for name in CHAPTERS:
        tasks.update(chapter_tasks(name))
    return tasks


def _chapter_of(exercise: str) -> str | None:
    """The module of an exercise notebook's tasks: ``"04-teacher-forcing"`` -> ``"ch4"``."""
    number = exercise[:2]
    return f"ch{int(number)}" if number.isdigit() and f"ch{int(number)}" in CHAPTERS else None


def find_task(task_id: str):
    """The task ``task_id`` ("ch4.shifted_targets"), importing only its chapter's module; None if
    there is no such task."""
    name = task_id.split(".", 1)[0] if isinstance(task_id, str) else None
    return chapter_tasks(name).get(task_id) if name in CHAPTERS else None


def exercise_tasks(exercise: str) -> list[str]:
    """Ids of the tasks graded in the exercise notebook ``exercise`` ("01-causal-mask")."""
    name = _chapter_of(exercise)
    tasks = chapter_tasks(name) if name else {}
    return [task.id for task in tasks.values() if task.exercise == exercise]


def case_device() -> torch.device:
    """Where case tensors live: the GPU when there is one, so a forgotten ``device=`` shows."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def random_allowed(T_q: int, T_kv: int, generator: torch.Generator) -> torch.Tensor:
    """[T_q, T_kv] bool, random, with at least one allowed key in every row (no NaN rows)."""
    allowed = torch.rand(T_q, T_kv, generator=generator) < 0.5
    first = torch.randint(T_kv, (T_q,), generator=generator)
    allowed[torch.arange(T_q), first] = True
    return allowed


def square_rule(rule):
    """A mask function ``(T, param) -> [T, T]`` from one index rule ``rule(i, j, param)``, with
    queries ``i`` [T, 1] and keys ``j`` [1, T]: how mutants and alternatives of the [T, T] mask
    tasks are written (prefix-LM, sliding window)."""
    def mask(T, param):
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        return rule(i, j, param).expand(T, T).clone()

    return mask


def per_row_rule(rule):
    """A mask function ``x [B, T] -> [B, 1, T, T]`` from one index rule ``rule(x, b, q, kv)``, with
    ``b`` [B, 1, 1, 1], queries ``q`` [1, 1, T, 1] and keys ``kv`` [1, 1, 1, T], for masks that
    differ per row of a batch (``x`` = the padding's keep flags, or document ids)."""
    def mask(x):
        B, T = x.shape
        b = torch.arange(B, device=x.device)[:, None, None, None]
        q = torch.arange(T, device=x.device)[None, None, :, None]
        kv = torch.arange(T, device=x.device)[None, None, None, :]
        return rule(x, b, q, kv).expand(B, 1, T, T).clone()

    return mask


def tiles_draw(draw, name_d: str | None = "d", min_block: int = 1):
    """``(T, block, d)`` for the tile-counting tasks, each its own choice: ``T`` up to a long context (counts far
    above 2**31; the largest, 131073, and 4097 leave ragged tiles whose counts a float32 sum rounds), ``block`` with its edges at ``T`` (one tile), ``T + 1`` (one short tile), a divisor of ``T``
    (every tile whole) and at the smallest size that keeps the tiles per row at 48 or fewer."""
    T = draw.size("T", max(1, min_block), 1500, edges=(max(1, min_block), 64, 4096, 4097, 131072, 131073))
    low = max(min_block, -(-T // 48))
    divisor = next((b for b in range(max(low, int(T ** 0.5)), T + 1) if T % b == 0), T)
    block = draw.size("block", low, max(low, min(64, T + 3)), edges=(low, divisor, T, T + 1))
    d = draw.size(name_d, 1, 128, edges=(1, 256)) if name_d else None
    return T, block, d
