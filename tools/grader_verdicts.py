"""Write docs/grader-verdicts.md: every learner answer of issue 33 in tests/grader_answers.py
(``NEW_WRONG``, ``NEW_RIGHT``) and of issue 50 (``ISSUE50_WRONG``) run through ``attnlab.grader.grade``,
in English, the drawn inputs from seed 0.

    .venv/bin/python -m tools.grader_verdicts          # rewrite the file
    .venv/bin/python -m tools.grader_verdicts --check  # exit 1 if the file would change
    .venv/bin/python -m tools.grader_verdicts --before verdicts.tsv  # with the verdicts of an older grader

``--before``: a file of tab-separated lines ``task, answer, verdict`` written by an older grader on the same
answers (made for the grader of 334120d with its tree checked out beside this one); the
issue-50 table then shows both.

tests/test_grader.py asserts the same verdicts (each wrong answer loses points and gets its key in
every language, each right one full marks); this page shows them to a reader.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "grader-verdicts.md"
HEAD = """# Grader verdicts on learner answers (issues 33 and 50)

Each answer below is in `tests/grader_answers.py` (`NEW_WRONG`, `NEW_RIGHT`) and was run through
`attnlab.grader.grade` (what `check()` prints), in English; the tests assert the same verdicts and
that the named message appears in en, de and zh. `expected` is the message key the answer must get.
Written by `.venv/bin/python -m tools.grader_verdicts`.
"""


BEFORE_MEASURED = ("full marks to 70 of the 80 answers the set held when it was written (commit 81ee7dd); "
                   "the answers added since were not run through it")


def _keys(problem, task_id: str) -> list[str]:
    """The problem's key, then its detail's, then the further mistakes', in that order."""
    found = [problem.key]
    for other in ([problem.detail] if problem.detail else []) + problem.also:
        found += _keys(other, task_id)
    return found


def _named(result, task_id: str) -> list[str]:
    names: list[str] = []
    for failure in result.failures:
        for key in _keys(failure.problem, task_id):
            short = key.replace(f"grader.mutant.{task_id}.", "mutant:")
            if short not in names:
                names.append(short)
    return names


def rows() -> dict[str, list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from grader_answers import NEW_RIGHT, NEW_WRONG  # noqa: E402 - the tests' answers

    from attnlab import grader, i18n
    from attnlab.exercises import all_tasks

    i18n.set_language("en")
    out: dict[str, list[str]] = {}
    for task_id, task in all_tasks().items():
        answers = [(what, fn, key, "wrong") for what, fn, key in NEW_WRONG.get(task_id, [])]
        answers += [(what, fn, None, "right") for what, fn in NEW_RIGHT.get(task_id, [])]
        for what, fn, key, kind in answers:
            result = grader.grade(task_id, fn)
            named = _named(result, task_id)
            every = {k for f in result.failures for k in _keys(f.problem, task_id)}
            expected = result.passed if kind == "right" else (not result.passed and (key is None or key in every))
            shown = ", ".join(f"`{k}`" for k in named[:4]) or "—"
            out.setdefault(task.exercise, []).append(
                f"| `{task_id}` | {what} | {kind} | {result.points}/{result.total} | {shown} | {'yes' if expected else 'NO'} |")
    return out


CLASSES = {1: "state across calls", 2: "sizes and dtypes", 3: "copies and cheats", 4: "numerics",
           5: "autograd cut", 6: "edges", 7: "side effects", 8: "randomness", 9: "layout"}


def issue50_rows(before: dict[tuple[str, str], str]) -> tuple[list[str], int, int, int]:
    """The issue-50 answers: ``(rows, full marks now, full marks before, answers)``."""
    from grader_answers import ISSUE50_WRONG  # noqa: E402 - the tests' answers

    from attnlab import grader

    out, now, then = [], 0, 0
    for task_id, answers in ISSUE50_WRONG.items():
        for cls, what, fn, key in answers:
            result = grader.grade(task_id, fn, seed=0)
            keys = {k for f in result.failures for k in _keys(f.problem, task_id)}
            wanted = key if isinstance(key, tuple) else (key,)
            expected = not result.passed and (key is None or any(k in keys for k in wanted))
            earlier = before.get((task_id, what), "—")
            now += result.passed
            then += bool(earlier) and earlier.split("/")[0] == earlier.split("/")[-1]
            shown = ", ".join(f"`{k}`" for k in _named(result, task_id)[:3]) or "—"
            then_cell = f" {earlier} |" if before else ""
            out.append(f"| `{task_id}` | {cls} {CLASSES[cls]} | {what} |{then_cell} {result.points}/{result.total} | "
                       f"{shown} | {'yes' if expected else 'NO'} |")
    return out, now, then, len(out)


def text(before: dict[tuple[str, str], str] | None = None) -> str:
    parts = [HEAD]
    wrong = 0
    for exercise, lines in sorted(rows().items()):
        parts.append(f"## {exercise}\n\n| task | answer | kind | verdict | named (first keys) | as expected |\n"
                     "|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n")
        wrong += sum(line.endswith("| NO |") for line in lines)
    parts.append(f"Answers not graded as expected: {wrong}.\n")
    lines, now, then, n = issue50_rows(before or {})
    if before:
        intro = ("Each is one of the issue's classes; `before` is the verdict of the grader of 334120d (no contract), "
                 "`after` this grader's, drawn inputs from seed 0.\n\n"
                 "| task | class | answer | before | after | named (first keys) | as expected |\n|---|---|---|---|---|---|---|\n")
    else:
        intro = ("Each is one of the issue's classes; `verdict` is this grader's, drawn inputs from seed 0. "
                 f"The grader of 334120d (no contract) gave {BEFORE_MEASURED} (`--before` adds its verdict per answer).\n\n"
                 "| task | class | answer | verdict | named (first keys) | as expected |\n|---|---|---|---|---|---|\n")
    parts.append("## Issue 50: answers right on the cases, wrong on the task's contract\n\n" + intro + "\n".join(lines) + "\n")
    parts.append(f"Issue 50: full marks for {now} of {n} wrong answers now"
                 + (f", {then} before." if before else ".") + "\n")
    return "\n".join(parts)


def _before(path: str | None) -> dict[tuple[str, str], str]:
    if not path:
        return {}
    verdicts = {}
    for line in pathlib.Path(path).read_text("utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            verdicts[(parts[0], parts[1])] = parts[2]
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/grader-verdicts.md would change")
    parser.add_argument("--before", help="verdicts of an older grader on the issue-50 answers (tab-separated)")
    args = parser.parse_args(argv)
    os.environ.setdefault("ATTNLAB_GRADER_SEED", "0")  # the same drawn inputs as the tests'
    new = text(_before(args.before))
    if args.check:
        same = DOC.read_text("utf-8") == new
        print("docs/grader-verdicts.md is up to date" if same else "docs/grader-verdicts.md is stale")
        return 0 if same else 1
    DOC.write_text(new, "utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
