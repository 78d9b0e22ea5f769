"""The layout rules of docs/decisions.md ("A layout that shows the course's parts"): no module of
the course's code over about 400 lines, what draws apart from what computes, and a layout page
(docs/layout.md, linked from the README) that names what is in the tree.

Reads the files only (well under a second)."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CODE = ("attnlab", "tools", "benchmarks")
MAX_LINES = 400
SETUP = ROOT / "attnlab" / "__init__.py"  # attnlab.setup() sets the drawing up for a notebook (fonts, PNG, dpi)
# A module over the limit, with the reason it stays one module (docs/decisions.md repeats them).
LONGER = {
    "attnlab/gpt.py": "one idea, the course's model: its config, norm, KV cache, blocks and GPT; the cache is how "
                      "SelfAttention and GPT run, and the grader's course-copy lists name these classes by path",
    "attnlab/exercises/ch4.py": "chapter 4's tasks share the model builders of their cases; each task keeps its "
                                "mutant catalog beside it (docs/exercises.md)",
}


def modules(*folders: str) -> list[pathlib.Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def relative(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_of_the_course_is_over_about_400_lines():
    lengths = {relative(p): len(p.read_text("utf-8").splitlines()) for p in modules(*CODE)}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONGER}
    assert too_long == {}, f"split these (or list them in LONGER with the reason): {too_long}"
    assert set(LONGER) <= set(lengths), "LONGER names a module that is gone"
    stale = {name for name in LONGER if lengths[name] <= MAX_LINES}
    assert stale == set(), f"no longer over {MAX_LINES} lines: take them out of LONGER: {stale}"


def imported_modules(path: pathlib.Path) -> set[str]:
    """The dotted names ``path`` imports, relative imports resolved against its package."""
    package = relative(path.parent).split("/")
    names = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_no_computing_module_imports_what_draws():
    # attnlab/__init__.py's setup() registers the fonts and shows figures as PNG: it sets the
    # drawing up for a notebook, so it may reach into attnlab.figures; nothing that computes may
    figures = ROOT / "attnlab" / "figures"
    offenders = {}
    for path in modules("attnlab"):
        if path.is_relative_to(figures) or path == SETUP:
            continue
        drawn = sorted(name for name in imported_modules(path) if name.startswith("attnlab.figures"))
        if drawn:
            offenders[relative(path)] = drawn
    assert offenders == {}


def test_every_figure_module_lives_in_attnlab_figures():
    # a module that imports matplotlib draws: it belongs in attnlab/figures (the grader's and the
    # auditor's modules included)
    figures = ROOT / "attnlab" / "figures"
    drawing = [relative(p) for p in modules("attnlab") if not p.is_relative_to(figures) and p != SETUP
               and any(name.split(".")[0] == "matplotlib" for name in imported_modules(p))]
    assert drawing == []


LAYOUT = ROOT / "docs" / "layout.md"


def layout_section() -> str:
    """The tree in docs/layout.md: its first fenced block (the prose around it does not count)."""
    return LAYOUT.read_text("utf-8").split("```\n", 2)[1]


def test_the_readme_links_the_layout_page():
    assert "(docs/layout.md)" in (ROOT / "README.md").read_text("utf-8")


def test_the_layout_page_names_every_module_and_package_of_the_tree():
    section = layout_section()
    named = {word.rstrip("/,.:;)").rsplit("/", 1)[-1].removesuffix(".py") for word in re.findall(r"[\w./-]+", section)}
    missing = []
    for folder in ("attnlab", "attnlab/figures", "tools", "benchmarks"):
        for path in sorted((ROOT / folder).iterdir()):
            if path.name.startswith(("_", ".")) or path.name == "__pycache__":
                continue
            if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
                name = path.stem if path.suffix == ".py" else path.name
                if name not in named:
                    missing.append(relative(path))
    assert missing == [], "name these in docs/layout.md"


def test_every_path_the_layout_page_names_exists():
    section = layout_section()
    paths = {word.rstrip(",.:;)") for word in re.findall(r"(?<![\w`])(?:attnlab|tools|benchmarks|tests|docs)/[\w./{},-]*", section)}
    gone = [p for p in sorted(paths) if "{" not in p and not (ROOT / p).exists()]
    assert gone == []


def test_nothing_imports_a_folder_of_attnlab_that_is_not_a_package():
    # attnlab/fonts/ and attnlab/data/ hold files; Python imports such a folder as an empty
    # namespace package, so `from attnlab import fonts` (the old module, now attnlab.figures.fonts)
    # would import without error and fail only where it is used
    folders = {p.name for p in (ROOT / "attnlab").iterdir() if p.is_dir() and not (p / "__init__.py").exists()}
    wrong = []
    for path in modules("attnlab", "tools", "benchmarks", "tests"):
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[0] == "attnlab" and len(parts) > 1 and parts[1] in folders:
                wrong.append(f"{relative(path)}: {name}")
    assert wrong == []
