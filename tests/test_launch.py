"""Launch paths: the Colab setup cell, launch URLs, and the GitHub workflows.

The Colab cell runs here against a simulated ``google.colab`` module: it
would pip-install the course package from the repository in ``_config.yml``
and switch on Colab's widget manager, and it does nothing anywhere else.
"""

import pathlib
import re
import subprocess
import sys
import types

import nbformat
import pytest
import yaml

from tools import notebooks

ROOT = notebooks.ROOT
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text("utf-8"))
NOTEBOOKS = sorted({p for s in notebooks.find_sources() if s.meta.get("kind") != "page"
                    for p in (s.output_path(lang) for lang in notebooks.LANGUAGES)}
                   | {p for lang in notebooks.LANGUAGES for p in (ROOT / "solutions" / lang).glob("*.ipynb")})


class FakeColab:
    """``google.colab`` with an ``output`` module that records the widget-manager call."""

    def __init__(self, monkeypatch):
        self.enabled = 0
        google = types.ModuleType("google")
        colab = types.ModuleType("google.colab")
        output = types.ModuleType("google.colab.output")
        output.enable_custom_widget_manager = self.enable
        google.colab, colab.output = colab, output
        for name, module in [("google", google), ("google.colab", colab), ("google.colab.output", output)]:
            monkeypatch.setitem(sys.modules, name, module)

    def enable(self):
        self.enabled += 1


class FakePip:
    def __init__(self, monkeypatch, returncode=0, stderr=""):
        self.calls = []
        self.returncode, self.stderr = returncode, stderr
        monkeypatch.setattr(subprocess, "run", self)

    def __call__(self, args, **kwargs):
        self.calls.append(args)
        return subprocess.CompletedProcess(args, self.returncode, "", self.stderr)


def colab_code(lang="de"):
    return notebooks.colab_cell(lang).source  # what every notebook holds (checked below)


def attnlab_installed(monkeypatch, installed):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real(name, *a) if installed else None) if name == "attnlab" else real(name, *a))


def test_on_colab_the_cell_installs_the_package_from_the_repository_and_enables_widgets(monkeypatch):
    colab, pip = FakeColab(monkeypatch), FakePip(monkeypatch)
    attnlab_installed(monkeypatch, False)
    exec(colab_code(), {})
    url, branch = CONFIG["repository"]["url"], CONFIG["repository"]["branch"]
    assert pip.calls == [[sys.executable, "-m", "pip", "install", "--quiet", f"attnlab @ git+{url}@{branch}"]]
    assert colab.enabled == 1


def test_on_colab_an_installed_package_is_not_installed_again(monkeypatch):
    colab, pip = FakeColab(monkeypatch), FakePip(monkeypatch)
    attnlab_installed(monkeypatch, True)
    exec(colab_code("zh"), {})
    assert pip.calls == [] and colab.enabled == 1


def test_a_failed_install_shows_what_pip_said(monkeypatch):
    FakeColab(monkeypatch)
    FakePip(monkeypatch, returncode=1, stderr="ERROR: could not resolve host")
    attnlab_installed(monkeypatch, False)
    with pytest.raises(RuntimeError, match="could not resolve host"):
        exec(colab_code("en"), {})


def test_elsewhere_the_cell_does_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    pip = FakePip(monkeypatch)
    namespace = {}
    exec(colab_code(), namespace)
    assert pip.calls == [] and "output" not in namespace


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_every_notebook_starts_with_the_colab_cell_hidden_on_the_site(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.id for c in code[:2]] == ["colab", "setup"]  # before anything imports attnlab
    assert code[0].metadata["tags"] == ["remove-cell"]  # not on the static site
    assert code[0].metadata["cellView"] == "form"  # Colab shows its title, code folded
    assert code[0].outputs == []  # it did nothing where the notebook was executed
    assert code[0].source == colab_code(path.parent.name)


def committed_files() -> set[str]:
    return set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.splitlines())


def toc_files(toc) -> list[str]:
    found = []
    if isinstance(toc, dict):
        if "file" in toc:
            found.append(toc["file"])
        if "root" in toc:
            found.append(toc["root"])
        for value in toc.values():
            found += toc_files(value)
    elif isinstance(toc, list):
        for item in toc:
            found += toc_files(item)
    return found


def test_launch_urls_point_at_committed_notebooks():
    """What the rocket button opens: the .ipynb of every notebook page, in every language, committed."""
    repository = CONFIG["repository"]
    assert repository["url"].startswith("https://github.com/") and repository["branch"]
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert CONFIG["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    committed = committed_files()
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text("utf-8"))
    pages = [f for f in toc_files(toc) if (ROOT / f"{f}.ipynb").exists() or (ROOT / f"{f}.md").exists()]
    notebook_pages = [f for f in pages if (ROOT / f"{f}.ipynb").exists()]
    assert notebook_pages, "no notebook in the table of contents"
    for page in notebook_pages:
        for lang in notebooks.LANGUAGES:
            path = re.sub(r"(^|/)en/", rf"\1{lang}/", f"{page}.ipynb")
            assert path in committed, f"the launch buttons would open {path}, which is not committed"
    assert "binder/requirements.txt" in committed and "binder/runtime.txt" in committed


# --------------------------------------------------------------------------
# GitHub workflows: valid YAML of the right shape, running the README's commands.

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def readme_test_command() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"## The two commands.*?```sh\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make book", "make test"], commands
    return commands[1]


def load_workflow(path):
    doc = yaml.safe_load(path.read_text("utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def test_workflows_are_valid_and_well_formed():
    assert WORKFLOWS
    for path in WORKFLOWS:
        doc = load_workflow(path)
        assert doc["name"] and doc["on"], path
        assert isinstance(doc["jobs"], dict) and doc["jobs"], path
        for name, job in doc["jobs"].items():
            assert set(job) <= {"name", "runs-on", "needs", "if", "env", "steps", "timeout-minutes", "strategy",
                                "defaults", "continue-on-error", "permissions", "concurrency"}, (path, name)
            assert job["runs-on"] and job["steps"], (path, name)
            for step in job["steps"]:
                assert ("uses" in step) != ("run" in step), (path, name, step)
                assert set(step) <= {"name", "id", "if", "uses", "with", "run", "env", "shell",
                                     "working-directory", "continue-on-error", "timeout-minutes"}, step
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step


def test_the_cpu_job_runs_the_readme_test_command_with_a_browser_github_has():
    job = load_workflow(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]["cpu"]
    assert job["runs-on"].startswith("ubuntu-")
    runs = [step.get("run", "") for step in job["steps"]]
    assert readme_test_command() in runs
    assert (ROOT / ".ci" / "run").read_text().strip().endswith(readme_test_command())
    # no chromium deb on GitHub's Ubuntu: the workflow names the Chrome those images ship
    assert job["env"]["ATTNLAB_CHROMIUM"] == "/usr/bin/google-chrome"
    assert "download.pytorch.org/whl/cpu" in job["env"]["PIP_EXTRA_INDEX_URL"]
    makefile = (ROOT / "Makefile").read_text()
    browser_rule = re.search(r"^browser:.*?\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "ATTNLAB_CHROMIUM" in browser_rule  # the apt-get step is skipped when it is set
    # the suite chooses the notebooks' numeric paths itself (tools/numeric_paths.py): no step sets them
    from tools import numeric_paths

    for env in [job.get("env", {})] + [step.get("env", {}) for step in job["steps"]]:
        assert not set(numeric_paths.VARIABLES + [numeric_paths.ROTATION]) & set(env), env
    assert job["steps"][-2]["run"] == readme_test_command()  # the numeric path is printed before it
    assert "get_cpu_capability" in job["steps"][-3]["run"]


def test_the_gpu_job_runs_nbval_on_every_chapter_and_solution_with_cuda_torch():
    job = load_workflow(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]["gpu"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "tools/gpu_check.sh" in script
    assert "download.pytorch.org/whl/cpu" not in script and "+cpu" not in script
    check = (ROOT / "tools" / "gpu_check.sh").read_text()
    assert "--nbval" in check and "chapters" in check and "solutions" in check and "tests/test_gpu.py" in check


def test_the_gpu_stack_pins_the_lock_versions():
    lock = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            lock[name.lower().replace("_", "-")] = version.strip()
    pins = [line.split("==") for line in (ROOT / "requirements" / "gpu.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")]
    assert {"nbval", "ipykernel", "pytest"} <= {name for name, _ in pins}
    assert "torch" not in {name for name, _ in pins}  # the GPU machine brings its CUDA build
    for name, version in pins:
        assert lock[name.lower()] == version, name
