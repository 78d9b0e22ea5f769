"""The command line: ``python -m attnlab.grader grade NOTEBOOK|FOLDER`` runs each notebook in a
fresh kernel (nbclient) and collects its checks into a report in the notebook's language.

A check whose cell did not finish says why: stopped by ``--cell-timeout`` (the cell was
interrupted), the cell raised (an earlier cell failed, say), or it never ran."""

from __future__ import annotations

import json
import os
import re
import sys
import time

from ..i18n import get_language, tr
from .model import Problem, Result, task_title
from .notebook import LOG_ENV, report_text

CHECK_CALL = re.compile(r"""check\(\s*["']([\w.]+)["']""")


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
    from ..exercises import exercise_tasks, find_task

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
    results: dict[str, Result] = {}
    for task_id in expected_tasks or list(found):
        if task_id in found:
            results[task_id] = found[task_id]
        else:
            task = find_task(task_id)
            n = task.points() if task is not None else 0
            results[task_id] = Result(task_id, 0, n, problem=unfinished_check(nb, task_id, cell_timeout))
    return {"notebook": str(path), "exercise": exercise, "language": lang,
            "points": sum(r.points for r in results.values()), "total": sum(r.total for r in results.values()),
            "tasks": {t: r.as_dict() for t, r in results.items()}}


def unfinished_check(nb, task_id: str, cell_timeout: int) -> Problem:
    """Why the check of ``task_id`` left no result: its cell was stopped, raised, or never ran."""
    for cell in nb.cells:
        if cell.cell_type != "code" or task_id not in CHECK_CALL.findall(cell.source):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and errors[0].get("ename") == "KeyboardInterrupt":
            return Problem("grader.cli.cell_timeout", {"seconds": cell_timeout})
        if errors:
            message = (errors[0].get("evalue") or "").strip().splitlines()
            message = message[0][:159] if message else ""
            return Problem("grader.cli.cell_raised", {"error": errors[0].get("ename", "?"), "message": message})
        break
    return Problem("grader.not_checked")


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
