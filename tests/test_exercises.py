"""Exercise sources -> stub notebooks (exercises/<lang>/) and solutions (solutions/<lang>/).

The generator's checks (stale, missing language, code drift, orphans) cover both;
the grader's honesty is tested in test_grader.py.
"""

import re
import shutil

import nbformat
import pytest
import yaml

from attnlab import i18n
from attnlab.exercises import all_tasks, exercise_tasks
from tools import notebooks, site

EXERCISES = [s for s in notebooks.find_sources() if notebooks.is_exercise(s)]
LANGS = notebooks.LANGUAGES


def test_every_exercise_has_a_stub_and_a_solution_in_every_language():
    assert [s.slug for s in EXERCISES] == ["01-causal-mask", "02-multi-head-attention", "03-sdpa-flash-attention",
                                           "04-teacher-forcing", "05-is-my-model-causal",
                                           "06-kv-cache", "07-bidirectional-attention",
                                           "08-masks-in-real-models", "09-ring-attention",
                                           "10-auditing-a-real-model", "11-backward-pass", "12-decoding-faster"]
    for source in EXERCISES:
        for lang in LANGS:
            assert source.output_path(lang) == notebooks.ROOT / "exercises" / lang / f"{source.slug}.ipynb"
            assert source.output_path(lang).exists() and notebooks.solution_path(source, lang).exists()


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("source", EXERCISES, ids=lambda s: s.slug)
def test_stub_has_localized_todos_no_solution_and_no_outputs(source, lang):
    stub = nbformat.read(source.output_path(lang), as_version=4)
    solution = nbformat.read(notebooks.solution_path(source, lang), as_version=4)
    assert stub.metadata["attnlab"] == {"source": source.rel, "language": lang, "notebook": "exercise"}
    assert solution.metadata["attnlab"]["notebook"] == "solution"
    todo = i18n.tr("grader.stub.todo", lang=lang)
    message = i18n.tr("grader.stub.raise", lang=lang)
    regions = sum(len(notebooks.solution_regions(c.text)) for c in source.cells if c.kind == "code")
    stub_code = "\n".join(c.source for c in stub.cells if c.cell_type == "code")
    assert stub_code.count(f"# {todo}") == regions == stub_code.count(f'raise NotImplementedError("{message}")')
    for nb in (stub, solution):
        text = "\n".join(c.source for c in nb.cells)
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert all(not c.outputs and c.execution_count is None for c in stub.cells if c.cell_type == "code")
    assert all(c.execution_count is not None for c in solution.cells if c.cell_type == "code")
    assert [c.id for c in stub.cells] == [c.id for c in solution.cells]


def test_a_region_becomes_todo_and_raise_at_its_indent_and_the_rest_stays():
    code = ("def f(x):\n"
            "    # en: double it\n    # de: verdoppeln\n    # zh: 翻倍\n"
            "    # BEGIN SOLUTION\n    y = 2 * x\n    return y\n    # END SOLUTION\n"
            "\n\nprint(f)\n# BEGIN SOLUTION\nz = 1\n# END SOLUTION")
    de = notebooks.localize_code(code, "de")
    assert notebooks.exercise_code(de, "de", solution=False) == (
        "def f(x):\n    # verdoppeln\n"
        "    # TODO: Schreib hier deinen Code (und lösche die raise-Zeile)\n"
        '    raise NotImplementedError("du bist dran: Schreib diesen Teil")\n'
        "\n\nprint(f)\n"
        "# TODO: Schreib hier deinen Code (und lösche die raise-Zeile)\n"
        'raise NotImplementedError("du bist dran: Schreib diesen Teil")')
    assert notebooks.exercise_code(de, "de", solution=True) == (
        "def f(x):\n    # verdoppeln\n    y = 2 * x\n    return y\n\n\nprint(f)\nz = 1")


def write_exercise(tmp_path, code):
    path = tmp_path / "exercises" / "src" / "99-test.md"
    path.parent.mkdir(parents=True)
    path.write_text("---\nkind: notebook\n---\n\n::::{lang} en\n# Hi\n::::\n::::{lang} de\n# Hallo\n::::\n"
                    "::::{lang} zh\n# 你好\n::::\n\n```{code-cell}\n" + code + "\n```\n", "utf-8")
    return notebooks.parse_source(path)


@pytest.mark.parametrize("code,error", [
    ("x = 1\n# BEGIN SOLUTION\ny = 2", "without # END SOLUTION"),
    ("# END SOLUTION", "without # BEGIN SOLUTION"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\nx\n# END SOLUTION", "inside another"),
    ("# BEGIN SOLUTION\n# END SOLUTION", "empty solution region"),
    ("x = 1", "at least one"),
])
def test_broken_solution_markers_are_rejected_with_file_and_line(tmp_path, code, error):
    source = write_exercise(tmp_path, code)
    assert notebooks.is_exercise(source)
    with pytest.raises(notebooks.SourceError, match=re.escape(error)) as caught:
        notebooks.render_exercise(source, "en", solution=False)
    assert "99-test.md" in str(caught.value)


def test_rendering_an_exercise_writes_stub_and_solution_in_three_languages(tmp_path):
    source = write_exercise(tmp_path, "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION")
    written = notebooks.render(source, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(
        f"{section}/{lang}/99-test.ipynb" for section in ("exercises", "solutions") for lang in LANGS)
    assert notebooks.is_stub(tmp_path / "exercises" / "en" / "99-test.ipynb")
    assert not notebooks.is_stub(tmp_path / "solutions" / "en" / "99-test.ipynb")


def copy_of_repository(tmp_path):
    for section in (*notebooks.SOURCE_DIRS, *notebooks.GENERATED_DIRS):
        for lang in LANGS:
            shutil.copytree(notebooks.ROOT / section / lang, tmp_path / section / lang)
    return tmp_path


def test_check_finds_stale_executed_drifting_missing_and_orphaned_exercises(tmp_path):
    root = copy_of_repository(tmp_path)
    assert notebooks.check(root) == []
    slug = EXERCISES[0].slug
    stub = nbformat.read(root / "exercises" / "en" / f"{slug}.ipynb", as_version=4)
    cell = next(c for c in stub.cells if c.cell_type == "code" and c.id not in ("colab", "setup"))
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    cell.execution_count = 1
    notebooks.write_notebook(stub, root / "exercises" / "en" / f"{slug}.ipynb")
    solution = nbformat.read(root / "solutions" / "de" / f"{slug}.ipynb", as_version=4)
    next(c for c in solution.cells if c.cell_type == "code" and c.id not in ("colab", "setup")).source += "\nx = 1"
    notebooks.write_notebook(solution, root / "solutions" / "de" / f"{slug}.ipynb")
    stub_zh = nbformat.read(root / "exercises" / "zh" / f"{slug}.ipynb", as_version=4)
    next(c for c in stub_zh.cells if c.cell_type == "code" and "NotImplementedError" in c.source).source += "\nprint(1)"
    notebooks.write_notebook(stub_zh, root / "exercises" / "zh" / f"{slug}.ipynb")
    (root / "solutions" / "zh" / f"{EXERCISES[1].slug}.ipynb").unlink()
    (root / "solutions" / "en" / "77-orphan.ipynb").write_text("{}")
    problems = notebooks.check(root)
    assert any(f"exercises/en/{slug}.ipynb: an exercise notebook must have no outputs" in p for p in problems)
    assert any(f"solutions/de/{slug}.ipynb: stale" in p for p in problems)
    assert any("solution code differs" in p for p in problems)
    assert any(f"exercises/zh/{slug}.ipynb: stale" in p for p in problems)
    assert any("exercise code differs" in p for p in problems)
    assert any(f"solutions/zh/{EXERCISES[1].slug}.ipynb: missing" in p for p in problems)
    assert any("solutions/en/77-orphan.ipynb: no source in exercises/src/" in p for p in problems)


@pytest.mark.parametrize("source", EXERCISES, ids=lambda s: s.slug)
def test_every_task_of_the_exercise_is_checked_once_and_the_notebook_ends_with_the_total(source):
    code = "\n".join(c.text for c in source.cells if c.kind == "code")
    checked = re.findall(r'^check\("([\w.]+)", \w+\)$', code, re.M)
    assert checked == exercise_tasks(source.slug)
    last = [c for c in source.cells if c.kind == "code"][-1]
    assert last.text == "summary()"


def test_every_task_belongs_to_an_exercise_source():
    slugs = {s.slug for s in EXERCISES}
    assert {task.exercise for task in all_tasks().values()} <= slugs


def test_toc_lists_chapters_exercises_and_solutions_under_captions_in_every_language():
    toc = yaml.safe_load((notebooks.ROOT / "_toc.yml").read_text("utf-8"))
    captions = [part["caption"] for part in toc["parts"]]
    assert captions == ["Chapters", "Exercises", "Solutions"]
    files = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    assert files["Exercises"] == [f"exercises/en/{s.slug}" for s in EXERCISES]
    assert files["Solutions"] == [f"solutions/en/{s.slug}" for s in EXERCISES]
    for lang in ("de", "zh"):
        _, toc_path = site.language_files(lang)
        localized = yaml.safe_load(toc_path.read_text("utf-8"))
        assert localized["root"] == f"chapters/{lang}/index"
        names = [part["caption"] for part in localized["parts"]]
        assert names == [site.PART_CAPTIONS[c][lang] for c in captions]
        for part in localized["parts"]:
            assert all(f"/{lang}/" in c["file"] and "/en/" not in c["file"] for c in part["chapters"])


def test_the_installed_package_carries_the_graded_tasks():
    """check() imports attnlab.exercises: a pip install (Colab) must ship every subpackage."""
    import tomllib

    config = tomllib.loads((notebooks.ROOT / "pyproject.toml").read_text("utf-8"))
    packages = set(config["tool"]["setuptools"]["packages"])
    found = {p.parent.relative_to(notebooks.ROOT).as_posix().replace("/", ".")
             for p in (notebooks.ROOT / "attnlab").rglob("__init__.py")}
    assert found <= packages


PREDICT = re.compile(r"^(\*\*)?(Predict first:|Überleg zuerst:|先预测一下(：|\*\*：))")  # zh: the colon after the bold (tests/test_zh_emphasis.py)
ANSWER = re.compile(r"^```\{dropdown\} (Answer|Antwort|答案)$")


@pytest.mark.parametrize("number", ["04", "06"])
def test_every_predict_first_prompt_of_exercises_4_and_6_has_its_answer(number):
    """A 'predict first' paragraph is followed by an Answer dropdown, in every language."""
    source = next(s.path for s in EXERCISES if s.path.name.startswith(number))
    lines = source.read_text(encoding="utf-8").splitlines()
    prompts = [n for n, line in enumerate(lines) if PREDICT.match(line)]
    assert len(prompts) >= 2 * len(LANGS) and len(prompts) % len(LANGS) == 0, prompts
    for n in prompts:
        following = next(line for line in lines[n + 1:] if line.strip())
        assert ANSWER.match(following), (source.name, n + 1, lines[n])


def test_every_exercise_introduction_states_the_policy_on_the_course_code_in_three_languages():
    """Issue 33: each intro names the course's own copies its tasks refuse, in en, de and zh."""
    import re

    from attnlab.exercises import all_tasks, exercise_tasks

    tasks = all_tasks()
    for source in sorted((notebooks.ROOT / "exercises" / "src").glob("*.md")):
        text = source.read_text("utf-8")
        for lang, heading in (("en", "**The course's own code.**"), ("de", "**Der Code des Kurses.**"),
                              ("zh", "**课程自带的代码。**")):
            block = re.search(r"::::\{lang\} " + lang + r"\n(.*?)\n::::\n", text, re.S).group(1)  # the intro
            assert heading in block and "attnlab.exercises" in block, (source.name, lang)
            for task_id in exercise_tasks(source.stem):
                for name in tasks[task_id].course_copies:
                    assert f"`{name}`" in block, (source.name, lang, name)
    docs = (notebooks.ROOT / "docs" / "exercises.md").read_text("utf-8")
    assert "course_copies" in docs and "The course's own code" in docs


def test_a_check_imports_only_its_own_chapters_tasks():
    # A check in exercise 4 needs chapter 4's tasks only: importing every chapter module cost each
    # kernel several seconds (chapter 10's transformers, chapter 3's torch.nn.attention.bias, which
    # imports torch._dynamo), in every solution notebook nbval runs and every notebook the command
    # line grades.
    import subprocess
    import sys

    code = ("import sys, attnlab; attnlab.setup('en')\n"
            "from attnlab.grader import check, summary\n"
            "def f(windows): raise NotImplementedError\n"
            "def g(windows): return attnlab.exercises.ch4.TASKS[0].reference(windows)  # names the course\n"
            "check('ch4.shifted_targets', f); check('ch4.shifted_targets', g); summary()\n"
            "from attnlab.exercises import exercise_tasks, find_task\n"
            "assert exercise_tasks('04-teacher-forcing')[0] == 'ch4.shifted_targets'\n"
            "print(sorted(m for m in sys.modules if m.startswith('attnlab.exercises.')))\n"
            "print('transformers' in sys.modules, 'torch._dynamo' in sys.modules)\n"
            "assert find_task('ch9.nothing') is None and find_task('nothing') is None\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[-2:] == ["['attnlab.exercises.ch4']", "False False"], run.stdout
    # every task still sits in the module of its own chapter and exercise (chapter_tasks checks it)
    assert sum(len(exercise_tasks(e)) for e in {t.exercise for t in all_tasks().values()}) == len(all_tasks())
