"""Launch paths: the Colab setup cell, launch URLs, the GitHub workflows (the Pages job included),
and the README as the front door: its two commands, its links, its licence and citation files.

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


README = (ROOT / "README.md").read_text("utf-8")


def readme_commands() -> list[str]:
    """The README's set-up commands as written: the one shell block under "## Two commands"."""
    section = README.split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the README's set-up section holds exactly one shell block"
    return [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.strip()]


def readme_test_command() -> str:
    commands = readme_commands()
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
                                "defaults", "continue-on-error", "permissions", "concurrency", "environment"}, (path, name)
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


# --------------------------------------------------------------------------
# The README: two commands that are the Makefile's and CI's, links derived from _config.yml, the
# chapters, the licences and the citation.

def make_dry_run(*args: str) -> str:
    return subprocess.run(["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_the_readmes_two_commands_are_the_makefile_targets_the_suite_and_ci_run():
    book, test = readme_commands()
    assert (book, test) == ("make book", "make test")
    makefile = (ROOT / "Makefile").read_text("utf-8")
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    assert {"book", "site", "serve", "test"} <= set(phony)
    # make book = make site (the build CI's site job runs and the Pages job publishes) + make serve
    assert re.search(r"^book: site serve\b", makefile, re.M)
    assert "python -m tools.site build" in make_dry_run("site") and "python -m tools.site serve" in make_dry_run("serve")
    jobs = load_workflow(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]
    assert any(step.get("run", "").startswith("make site") for step in jobs["site"]["steps"])
    # make test is what .ci/run and the cpu job run, and runs pytest over the suite with nbval
    assert (ROOT / ".ci" / "run").read_text().strip().endswith(test)
    assert test in [step.get("run") for step in jobs["cpu"]["steps"]]
    assert re.search(r"-m pytest .*--nbval.*\stests chapters/en", make_dry_run("test", "VENV=/nonexistent-venv"), re.S)


def test_the_readmes_other_python_works_with_any_venv_name():
    # `make book PYTHON=python3.13 VENV=.venv-3.13`: that venv, made by that Python, runs the build
    # (tools/site/ leaves every venv inside the repository out of the Sphinx builds: test_venv.py)
    line = re.search(r"Another Python: `(make book [^`]+)`", README).group(1)
    variables = dict(word.split("=", 1) for word in line.split()[2:])
    commands = make_dry_run("site", *line.split()[2:])
    venv = variables["VENV"]
    assert f"{variables['PYTHON']} -m venv {venv}" in commands
    assert f"{venv}/bin/python -m tools.site build" in commands


def test_the_readme_is_a_short_front_page():
    lines = README.splitlines()
    assert len(lines) <= 150, len(lines)
    for heading in ("## Read it, run it", "## Chapters", "## Two commands", "## How grading works", "## Contributing",
                    "## Licence", "## How to cite"):
        assert heading in lines, heading


def readme_links() -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", README)


def test_the_readmes_read_online_binder_and_colab_links_derive_from_the_repository():
    from tools.site import published

    url, branch = CONFIG["repository"]["url"], CONFIG["repository"]["branch"]
    read_online = re.search(r"\*\*Read online\*\*: \[[^\]]+\]\(([^)]+)\)", README).group(1)
    assert read_online == published.pages_url() == "https://attnlab.github.io/causal-attention/"
    owner, name = published.owner_and_name(url)
    nb = "chapters/en/01-causal-mask.ipynb"  # the launch buttons' own forms (test_site.py reads them on the pages)
    assert f"{CONFIG['launch_buttons']['binderhub_url']}/v2/gh/{owner}/{name}/{branch}?urlpath=lab/tree/{nb}" in readme_links()
    assert f"{CONFIG['launch_buttons']['colab_url']}/github/{owner}/{name}/blob/{branch}/{nb}" in readme_links()
    assert all(link.startswith(read_online) for link in readme_links() if ".github.io" in link)


@pytest.mark.parametrize("url", ["https://github.com/attnlab/causal-attention", "https://github.com/Some-Org/some.repo",
                                 "https://github.com/someone/someone.github.io", "https://github.com/a/b/tree/main"])
def test_the_pages_address_splits_the_repository_as_the_launch_buttons_do(url):
    from sphinx_book_theme.header_buttons.launch import _split_repo_url

    from tools.site import published

    assert published.owner_and_name(url) == _split_repo_url(url)
    owner, name = _split_repo_url(url)
    expected = (f"https://{owner.lower()}.github.io/" if name.lower() == f"{owner.lower()}.github.io"
                else f"https://{owner.lower()}.github.io/{name}/")
    assert published.pages_url(url) == expected
    with pytest.raises(ValueError):
        published.pages_url("https://gitlab.com/a/b")


# Chapter 12 is being written beside this change; its link is in the README already and must
# resolve once its source exists.
PENDING = {"chapters/src/12-decoding-faster.md": [f"chapters/{lang}/12-decoding-faster.ipynb" for lang in ("en", "de", "zh")]}


def test_every_chapter_is_linked_from_the_readme_in_every_language_and_every_local_link_resolves():
    links = set(readme_links())
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text("utf-8"))
    chapters = [f for f in toc_files(toc["parts"][0]) if f.startswith("chapters/en/")]
    assert len(chapters) >= 13
    for page in chapters:
        suffix = ".ipynb" if (ROOT / f"{page}.ipynb").exists() else ".md"
        for lang in notebooks.LANGUAGES:
            assert page.replace("/en/", f"/{lang}/") + suffix in links, page
    waiting = {path for source, paths in PENDING.items() if not (ROOT / source).exists() for path in paths}
    local = [link.split("#")[0] for link in links if not re.match(r"^[a-z]+:", link)]
    assert [link for link in local if not (ROOT / link).exists() and link not in waiting] == []
    assert "chapters/en/12-decoding-faster.ipynb" in links


def test_licences_and_citation_agree_with_the_project():
    import tomllib

    from tools.site import published

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert (ROOT / "LICENSE").read_text("utf-8").startswith("MIT License\n")  # what GitHub detects
    assert pyproject["license"]["text"].startswith("MIT")
    content = (ROOT / "LICENSE-CONTENT.md").read_text("utf-8")
    assert "CC BY 4.0" in content and "https://creativecommons.org/licenses/by/4.0/" in content
    assert "(attnlab/fonts/OFL.txt)" in content and "SIL OPEN FONT LICENSE" in (ROOT / "attnlab/fonts/OFL.txt").read_text()
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text("utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["message"] and citation["authors"]
    assert citation["title"] == CONFIG["title"] and citation["version"] == pyproject["version"]
    assert citation["repository-code"] == CONFIG["repository"]["url"] and citation["url"] == published.pages_url()
    assert set(citation["license"]) == {"MIT", "CC-BY-4.0"}
    for link in ("LICENSE", "LICENSE-CONTENT.md", "attnlab/fonts/OFL.txt", "CITATION.cff"):
        assert f"({link})" in README, link
    assert f"({published.pages_url()})" not in README or citation["repository-code"] in README


def test_the_footer_names_the_licences_and_the_citation_in_each_language():
    from tools.site import footer, published

    committed = committed_files() | {"LICENSE", "LICENSE-CONTENT.md", "CITATION.cff"}  # new in this change
    texts = {}
    for lang in notebooks.LANGUAGES:
        text = footer.footer_html(lang)
        links = re.findall(r'href="([^"]+)"', text)
        files = [link.removeprefix(published.file_url("")) for link in links if link.startswith(CONFIG["repository"]["url"])]
        assert sorted(files) == ["CITATION.cff", "LICENSE", "LICENSE-CONTENT.md", "attnlab/fonts/OFL.txt"], lang
        assert set(files) <= committed
        assert "CC BY 4.0" in text and "MIT" in text and "OFL" in text
        texts[lang] = re.sub(r"<[^>]+>", "", text)
    assert len(set(texts.values())) == 3 and "课程" in texts["zh"] and "Zitieren" in texts["de"]


MAIN_ONLY = "github.event_name == 'push' && github.ref == 'refs/heads/main'"


def test_the_pages_job_publishes_what_make_site_builds_from_main_only():
    # what the job uploads is make site's output folder (test_site.py checks that folder's root page
    # and languages in the suite's own build); the PDFs are printed before it, so the site offers them
    from tools import site

    jobs = load_workflow(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]
    steps = jobs["site"]["steps"]
    runs = [step.get("run", "") for step in steps]
    build = runs.index("make site PYTHON=python3.13")
    pdf = next(i for i, run in enumerate(runs) if run.startswith("make pdf"))
    upload = next(i for i, step in enumerate(steps) if step.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert pdf < build < upload
    assert steps[pdf]["if"] == steps[upload]["if"] == MAIN_ONLY and "if" not in steps[build]
    assert (ROOT / steps[upload]["with"]["path"]).resolve() == site.HTML.resolve()
    assert jobs["site"]["env"]["ATTNLAB_CHROMIUM"] == "/usr/bin/google-chrome"  # make pdf's browser on Ubuntu
    pages = jobs["pages"]
    assert pages["if"] == MAIN_ONLY and pages["needs"] == "site"
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages" and "steps.deployment.outputs.page_url" in pages["environment"]["url"]
    assert [(step.get("id"), step["uses"].split("@")[0]) for step in pages["steps"]] == [("deployment", "actions/deploy-pages")]


def test_the_readmes_picture_is_a_committed_png_of_an_explorer():
    # GitHub shows a README's image from the repository: a relative path to a committed PNG (not an
    # LFS pointer), with an alt text that says what it shows; tools/readme_picture.py takes it
    from PIL import Image

    alt, path = re.search(r"!\[([^\]]+)\]\((docs/images/[\w.-]+\.png)\)", README).groups()
    assert len(alt) > 40 and "explorer" in alt
    data = (ROOT / path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 300_000
    assert path in committed_files()
    with Image.open(ROOT / path) as picture:
        assert 500 <= picture.width <= 1000 and 400 <= picture.height <= 1000
