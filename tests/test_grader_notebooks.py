"""The grader on whole notebooks, each run in a fresh kernel (the command line's way):
every stub scores zero, progress over a folder with solved tasks, a check that fights its
time limit and a cell stopped by the cell time limit. (That every solution gets full marks,
in every language, nbval shows: it runs every solution notebook and compares each check's
stored "n/n points" line.)

Kept apart from test_grader.py so that pytest-xdist (--dist loadfile) runs the two
files on different workers. Every notebook here costs a kernel start, so the stubs run
in every exercise for English and for one exercise in German and Chinese (the stubs of
one exercise share their code across languages; only the TODO texts differ), and the
progress test grades a folder of three notebooks.
"""

import json
import pathlib
import shutil
import subprocess
import sys

import nbformat
import pytest

from attnlab import grader
from attnlab.exercises import all_tasks, exercise_tasks

# the command line's kernels are forked from a server that has imported torch, as nbval's are
# (tools/kernel_forks.py; tests/test_kernel_forks.py shows they behave as ordinary ones)
pytestmark = pytest.mark.usefixtures("forked_kernels")

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXERCISES = sorted({task.exercise for task in all_tasks().values()})


def grade_cli(*args, cwd=ROOT):
    run = subprocess.run([sys.executable, "-m", "attnlab.grader", "grade", *map(str, args)], cwd=cwd,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_command_line_scores_every_stub_zero_without_crashing_and_writes_json(tmp_path):
    # Every English stub, graded from the command line in its own kernel: zero points, each task
    # failing only because it is not implemented yet, and the report files written. That every
    # solution gets full marks is shown by nbval, which runs every solution notebook in every
    # language and compares each check's stored "n/n points" line; grading the English solutions
    # here again cost 11 more kernels (103 to 120 s) for no other evidence. The command line's
    # points for solved tasks: test_progress_over_a_folder_with_a_few_tasks_solved.
    out = grade_cli(ROOT / "exercises" / "en", "--out", tmp_path)
    progress = json.loads((tmp_path / "progress.json").read_text("utf-8"))
    assert progress["points"] == 0 and progress["total"] > 0
    for exercise in EXERCISES:
        graded = json.loads((tmp_path / f"{exercise}.grade.json").read_text("utf-8"))
        assert graded["language"] == "en" and graded["points"] == 0 and graded["total"] > 0
        assert list(graded["tasks"]) == exercise_tasks(exercise)
        for result in graded["tasks"].values():
            failures = grader.Result.from_dict(result).failures
            assert failures and {f.problem.key for f in failures if not f.drawn} == {"grader.not_implemented"}, exercise
        assert (tmp_path / f"{exercise}.grade.txt").read_text("utf-8").startswith(f"Grades for {exercise}")
        assert f"{exercise}: 0/{graded['total']} points" in out


@pytest.mark.parametrize("lang", ["de", "zh"])
def test_a_german_and_a_chinese_stub_score_zero_without_crashing(lang):
    # The stubs of one exercise share their code across languages; only the TODO texts differ.
    graded = grader.grade_notebook(ROOT / "exercises" / lang / f"{EXERCISES[0]}.ipynb")
    assert graded["language"] == lang and graded["points"] == 0 and graded["total"] > 0
    for result in graded["tasks"].values():
        failures = grader.Result.from_dict(result).failures
        assert failures and {f.problem.key for f in failures if not f.drawn} == {"grader.not_implemented"}


def solve(nb, solution, task_cells):
    """Copy the solution's code into the stub's cells with these ids."""
    for cell in nb.cells:
        if cell.id in task_cells:
            cell.source = next(c.source for c in solution.cells if c.id == cell.id)


def test_progress_over_a_folder_with_a_few_tasks_solved(tmp_path):
    folder = tmp_path / "exercises" / "de"
    folder.mkdir(parents=True)
    for exercise in EXERCISES[:3]:
        shutil.copy(ROOT / "exercises" / "de" / f"{exercise}.ipynb", folder)
    nb = nbformat.read(folder / "01-causal-mask.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / "de" / "01-causal-mask.ipynb", as_version=4)
    definitions = [c.id for c in nb.cells if c.cell_type == "code" and c.source.startswith("def ")]
    solve(nb, solution, definitions[:2])  # the causal mask and the masked softmax
    nbformat.write(nb, folder / "01-causal-mask.ipynb")
    out = grade_cli(folder)
    print(out)
    tasks = [task for task in all_tasks().values() if task.exercise in EXERCISES[:3]]
    first, second = (sum(t.points() for t in tasks if t.exercise == e) for e in EXERCISES[:2])
    solved = sum(t.points() for t in tasks if t.id in ("ch1.causal_mask", "ch1.masked_softmax"))
    assert f"01-causal-mask: {solved}/{first} Punkte" in out
    assert "✓ Kausale Maske: 5/5" in out and "✗ Maskenkonventionen: 0/7" in out
    assert f"02-multi-head-attention: 0/{second} Punkte" in out
    assert out.strip().endswith(f"Gesamt: {solved}/{sum(t.points() for t in tasks)} Punkte")
    assert (folder / "progress.json").exists() and (folder / "01-causal-mask.grade.txt").exists()


DEFIES_THE_LIMIT = """def build_causal_mask(T):
    while True:
        try:
            [][0]
        except:
            continue

check("ch1.causal_mask", build_causal_mask, time_limit=0.2)"""

STUCK_IN_C = """import time

def masked_softmax(scores, allowed):
    time.sleep(3600)

masked_softmax(None, None)  # the learner's own try, outside check's time limit: only the cell limit stops it
check("ch1.masked_softmax", masked_softmax)"""


CELL_TIMEOUT = 15  # seconds: the stuck cell waits this long; every other cell of chapter 1 takes under 2 here (30 s cost 15 s more of idle wall time)


def test_the_time_limit_holds_in_a_kernel_and_a_stopped_cell_is_reported_as_stopped(tmp_path):
    """From the command line: a retry loop behind a bare except stops at check's own limit (its
    cases report the timeout); a learner's own call that never returns, outside check, is
    interrupted by --cell-timeout, and its task is reported as stopped by the cell time limit, not
    as "did not run"; later checks still count."""
    nb = nbformat.read(ROOT / "solutions" / "en" / "01-causal-mask.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.id == "code-005":
            cell.source = DEFIES_THE_LIMIT
        if cell.id == "code-008":
            cell.source = STUCK_IN_C
    path = tmp_path / "01-causal-mask.ipynb"
    nbformat.write(nb, path)
    graded = grader.grade_notebook(path, cell_timeout=CELL_TIMEOUT)
    tasks = {t: grader.Result.from_dict(r) for t, r in graded["tasks"].items()}
    # the cases report the timeout; the drawn inputs' point is not tried before the cases pass (issue 50)
    assert {f.problem.key for f in tasks["ch1.causal_mask"].failures} == {"grader.timeout", "grader.drawn_skipped"}
    stopped = tasks["ch1.masked_softmax"]
    assert stopped.points == 0 and stopped.problem is not None and stopped.problem.key == "grader.cli.cell_timeout"
    assert f"stopped after {CELL_TIMEOUT} s by the cell time limit" in grader.notebook_report(graded)
    assert tasks["ch1.future_weight"].passed and tasks["ch1.convert_mask"].passed


def test_without_nbclient_the_command_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nbclient", None)
    with pytest.raises(SystemExit, match="pip install nbclient ipykernel"):
        grader.grade_notebook(ROOT / "exercises" / "en" / "01-causal-mask.ipynb")
