"""Binder and offline: a fresh venv made only from binder/ runs the notebooks, with the network off.

The venv is created from ``binder/requirements.txt`` (plus ``ipykernel``, which
Binder's base image has). What this venv can show that the main suite cannot is
that the runtime packages alone are enough, and that nothing is fetched: so it
imports every module that any notebook imports (read from the code cells of every
chapter and solution), and nbval runs a smoke subset of English notebooks in a
kernel from that venv, comparing stored outputs as the main suite does: chapter 1
(widgets, fonts), 4 (the tokenizer's data files, training), 8 (FlexAttention), 9
(processes talking over loopback), 10 when it exists (transformers) and solution 1
(the grader). The main suite runs every other notebook, in every language, with nbval;
running all of them a second time here cost about 160 s of a 2-core CI machine for
no new evidence (docs/decisions.md, "Binder"). The smoke notebooks' cells run once per
suite: here, each reported as an item of its own
(``test_the_smoke_notebook_cell_passes_in_the_binder_venv[chapters/en/...::Cell N]``), and the
root conftest.py leaves the same cells out of the main suite's nbval run when these items are
collected (they took about 55 s there a second time). It
runs inside a network namespace that has only loopback (``unshare -n``, or
``unshare -rn`` without root), so a notebook that fetched anything would fail;
where namespaces are not permitted the offline test is skipped with the reason
and the notebooks run with the network on.

The index line of the requirements (PyTorch's CPU wheel index) is left out
here: CI reaches only PyPI, and pip finds the same ``torch==…+cpu`` wheel
through the machine's own settings (a local wheel folder here,
``PIP_EXTRA_INDEX_URL`` in the GitHub workflow).
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest

from tools.kernel_fork_servers import kernel_spec

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
INDEX_OPTIONS = ("--extra-index-url", "--index-url", "-i ")
LO_UP = 'ip link set lo up && exec "$@"'
IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if pathlib.Path(p).exists()), "ip")
INTERFACES = "import socket; print(sorted(name for _, name in socket.if_nameindex()))"


SMOKE_NOTEBOOKS = ("chapters/en/01-*.ipynb", "chapters/en/04-*.ipynb", "chapters/en/08-*.ipynb",
                   "chapters/en/09-*.ipynb", "chapters/en/10-*.ipynb", "solutions/en/01-*.ipynb")


def smoke_notebooks() -> list[str]:
    """The English notebooks nbval runs in the Binder venv (see the module docstring)."""
    return [path.relative_to(ROOT).as_posix() for pattern in SMOKE_NOTEBOOKS for path in sorted(ROOT.glob(pattern))]


def smoke_cells() -> list[str]:
    """The nbval items of the smoke notebooks, named as nbval names them: ``NOTEBOOK::Cell N`` for
    the N-th code cell (the Binder run checks that it ran exactly these)."""
    cells = []
    for rel in smoke_notebooks():
        code = [c for c in json.loads((ROOT / rel).read_text("utf-8"))["cells"] if c["cell_type"] == "code"]
        cells += [f"{rel}::Cell {n}" for n in range(len(code))]
    return cells


OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR) (\S.*?::Cell \d+)(?: - .*)?$")


def cell_outcomes(output: str) -> dict[str, str]:
    """``{nbval item: "PASSED" | "FAILED" | "ERROR"}`` from the short summary of ``pytest -rA``."""
    return {found.group(2): found.group(1) for found in map(OUTCOME.match, output.splitlines()) if found}


def imported_modules() -> list[str]:
    """Every module (dotted name) that a code cell of a chapter or solution notebook imports."""
    import ast

    names = set()
    for path in sorted(ROOT.glob("chapters/*/*.ipynb")) + sorted(ROOT.glob("solutions/*/*.ipynb")):
        for cell in json.loads(path.read_text("utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            try:
                tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module)
    return sorted(n for n in names if not n.startswith("google"))  # google.colab: only on Colab (the first cell)


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.split(";")[0].strip()
    return pins


def binder_requirements() -> list[str]:
    return [line.strip() for line in (BINDER / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def offline_prefix() -> tuple[list[str] | None, str]:
    """The command prefix that runs a command with only loopback, or None and why not."""
    reasons = []
    for flags in (["-n"], ["-rn"]):  # as root; as a user, in a user namespace
        prefix = ["unshare", *flags, "--", "sh", "-c", LO_UP.replace("ip ", f"{IP} ", 1), "sh"]
        try:
            probe = subprocess.run([*prefix, sys.executable, "-c", INTERFACES], capture_output=True, text=True,
                                   timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:
            reasons.append(f"unshare {' '.join(flags)}: {error}")
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "['lo']":
            return prefix, ""
        reasons.append(f"unshare {' '.join(flags)}: {(probe.stderr or probe.stdout).strip()[-200:]}")
    return None, "network namespaces are not permitted here (" + "; ".join(reasons) + ")"


@dataclass
class BinderRun:
    offline: bool
    why_not_offline: str
    interfaces: str
    install_bytes: int
    install_seconds: float
    returncode: int
    output: str
    imports: subprocess.CompletedProcess
    ordinary_kernels: int  # kernels started the ordinary way, not forked


def folder_bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def binder_run(tmp_path_factory) -> BinderRun:
    tmp = tmp_path_factory.mktemp("binder")
    requirements = tmp / "requirements.txt"
    requirements.write_text("\n".join(line for line in binder_requirements() if not line.startswith(INDEX_OPTIONS)))
    venv = tmp / "venv"
    # PYTHONDONTWRITEBYTECODE left out: with --no-compile below, a kernel would otherwise compile
    # torch's modules from source again in every process (5.3 s instead of 2.1 s of CPU to start)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ATTNLAB_WIDGETS", "PYTHONDONTWRITEBYTECODE")}
    start = time.monotonic()
    # without pip of its own (ensurepip cost about 6 s of CPU): this venv's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = None
    for what in (["-r", str(requirements)], [f"ipykernel=={lock_pins()['ipykernel']}"]):  # Binder's, then the kernel
        # --no-compile: no .pyc for the thousands of .py files of torch and friends; the modules a kernel
        # imports compile when first imported and are written then (once per run, not per kernel)
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                              "--disable-pip-version-check", "--no-compile", *what],
                             cwd=ROOT, env=env, capture_output=True, text=True)  # cwd: "-e ." is the repository
        assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-3000:]
        if site_packages is None:
            site_packages = next(venv.glob("lib/python*/site-packages"))
            install_bytes = folder_bytes(site_packages) - sum(folder_bytes(p) for p in site_packages.glob("pip*"))
            install_seconds = time.monotonic() - start
    # The venv's kernel, forked from a server in that venv that has imported torch and the course
    # (tools/kernel_forks.py; the nested run's root conftest.py starts it inside the network
    # namespace), or the ordinary kernel of this venv where ATTNLAB_KERNEL_FORKS=0.
    kernel = tmp / "jupyter" / "kernels" / "binder"
    kernel.mkdir(parents=True)
    forks = tempfile.mkdtemp(prefix="attnlab-binder-forks-")  # short: a Unix socket's path has ~100 bytes
    spec = kernel_spec(forks, str(python), "Binder venv") if os.environ.get("ATTNLAB_KERNEL_FORKS", "1") != "0" else {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Binder venv",
        "language": "python"}
    (kernel / "kernel.json").write_text(json.dumps(spec))
    prefix, why_not = offline_prefix()
    # -rA: a summary line per item, read by cell_outcomes (COLUMNS: no line cut short). One process:
    # two xdist workers cost two more interpreters with pytest and nbval (and two fork servers)
    # for notebooks that take about 45 s together, while the main run's workers keep both cores busy.
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
               "--nbval", "--nbval-kernel-name", "binder", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
               *smoke_notebooks()]
    env.update(JUPYTER_PATH=str(tmp / "jupyter"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), COLUMNS="400")
    interfaces = ""
    if prefix:
        interfaces = subprocess.run([*prefix, str(python), "-c", INTERFACES], capture_output=True, text=True,
                                    env=env).stdout.strip()
        command = [*prefix, *command]
    imports = subprocess.run([*(prefix or []), str(python), "-c", f"import {', '.join(imported_modules())}"],
                             cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    try:
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        ordinary = pathlib.Path(forks, "ordinary.log")  # kernels that found no server (tools/kernel_forks.py)
        ordinary_kernels = len(ordinary.read_text().splitlines()) if ordinary.exists() else 0
    finally:
        shutil.rmtree(forks, ignore_errors=True)
    return BinderRun(prefix is not None, why_not, interfaces, install_bytes, install_seconds,
                     run.returncode, run.stdout + run.stderr, imports, ordinary_kernels)


def test_binder_files_pin_the_cpu_torch_and_the_lock_versions():
    assert (BINDER / "runtime.txt").read_text().strip() == f"python-{sys.version_info.major}.{sys.version_info.minor}"
    lines = binder_requirements()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert "-e ." in lines  # repo2docker then installs after copying the repository
    pins = dict(line.split("==") for line in lines if "==" in line)
    assert pins["torch"].endswith("+cpu")  # never the multi-gigabyte CUDA build
    lock = lock_pins()
    for name, version in pins.items():
        assert lock[name.lower()] == version.removesuffix("+cpu"), name
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["audit"]  # chapter 10 needs the extra
    names = {re.split(r"[<>=!\s;\[]", dep, 1)[0].lower() for dep in runtime}
    assert names == set(pins), "binder/requirements.txt pins exactly the runtime dependencies of pyproject.toml"


def test_the_smoke_subset_covers_what_only_a_binder_venv_can_fail_on():
    notebooks = smoke_notebooks()
    assert len(notebooks) >= 5 and all(path.startswith(("chapters/en/", "solutions/en/")) for path in notebooks)
    modules = imported_modules()
    assert {"attnlab", "torch", "attnlab.figures.widgets", "attnlab.grader"} <= set(modules), modules
    assert not [m for m in modules if m.split(".")[0] in ("tools", "tests", "benchmarks")], \
        "a notebook imports the authoring tools, which Binder does not install"


def test_a_fresh_venv_from_the_binder_files_imports_everything_and_runs_the_smoke_notebooks(binder_run):
    print(f"\nbinder/requirements.txt: {binder_run.install_bytes / 2**20:.0f} MiB installed "
          f"(site-packages without pip), in {binder_run.install_seconds:.0f} s; "
          f"{binder_run.ordinary_kernels} kernels not forked")
    assert binder_run.imports.returncode == 0, (
        "a module some notebook imports is missing from binder/requirements.txt:\n" + binder_run.imports.stderr[-3000:])
    assert binder_run.returncode == 0, binder_run.output[-6000:]
    passed = re.search(r"(\d+) passed", binder_run.output)
    assert passed and int(passed.group(1)) > 0 and " failed" not in binder_run.output, binder_run.output[-3000:]
    assert binder_run.install_bytes < 1.5 * 2**30, "the Binder environment grew past 1.5 GiB"
    # it ran exactly the cells the items below stand for, so none is left out of the suite
    assert sorted(cell_outcomes(binder_run.output)) == sorted(smoke_cells()), binder_run.output[-3000:]


@pytest.mark.parametrize("cell", smoke_cells())
def test_the_smoke_notebook_cell_passes_in_the_binder_venv(binder_run, cell):
    # the main suite's nbval item for this cell, run once, in the Binder venv's kernel (module docstring)
    outcome = cell_outcomes(binder_run.output).get(cell)
    if outcome != "PASSED":
        named = [line for line in binder_run.output.splitlines() if cell in line]  # nbval's lines about it
        pytest.fail(f"{cell}: {outcome or 'not run'} in the Binder venv\n" + "\n".join(named[:20])
                    + "\n...\n" + binder_run.output[-3000:])


def test_the_binder_notebooks_and_imports_run_with_the_network_switched_off(binder_run):
    if not binder_run.offline:
        pytest.skip(binder_run.why_not_offline)
    assert binder_run.interfaces == "['lo']"  # what the kernels saw: loopback only
    assert binder_run.returncode == 0, binder_run.output[-6000:]
