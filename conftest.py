"""Suite-wide hooks (at the repository root, so they reach the notebooks nbval collects in
chapters/ and solutions/ too, not only the tests in tests/)."""

import os
import pathlib
import sys

import pytest

from tools import numeric_paths

ROOT = pathlib.Path(__file__).resolve().parent
ORIGINAL_PATH_VARIABLES = {name: os.environ[name] for name in numeric_paths.VARIABLES if name in os.environ}
TURN = numeric_paths.rotation()
ORIGINAL_JUPYTER_PATH = os.environ.get("JUPYTER_PATH")
FORKS = "ATTNLAB_KERNEL_FORKS"  # 0: every notebook in a kernel started the ordinary way


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Before pytest sets up the item's collectors: nbval starts a notebook's kernel in its file's
    # setup, and the kernel inherits os.environ, so each language's notebooks run on their own
    # numeric path, in a kernel forked from a server that has imported torch under that path
    # (tools/kernel_forks.py; where a kernel is named, as the Binder run names its venv's, forked
    # only if that kernel's spec is the fork launcher).
    # Every other test gets the environment the run started with.
    _torch_on_one_thread()
    is_notebook = type(item).__module__ == "nbval.plugin"
    path = numeric_paths.notebook_path(pathlib.Path(str(item.fspath)), ROOT, TURN) if is_notebook else None
    numeric_paths.apply(path, ORIGINAL_PATH_VARIABLES)
    _restore("JUPYTER_PATH", ORIGINAL_JUPYTER_PATH)
    if is_notebook and forks_wanted():
        named = item.config.option.nbval_kernel_name
        forks = named_kernel_forks(named) if named else kernel_forks()
        if forks is not None:
            forks.use()


_one_thread = []


def _torch_on_one_thread():
    """The tests' own torch work (the grader's cases above all) runs on one thread, as every
    notebook does (attnlab.setup). With torch's default of one thread per core, each worker's
    OpenMP threads waited for a core the other worker held: test_grader.py beside a busy core took
    99.5 s and 96 s of CPU on two threads, 69.7 s and 47 s on one (docs/decisions.md, issue 31).
    Set once, when the first test finds torch imported; a test that sets another count puts
    back what it found (test_gpt.py)."""
    torch = sys.modules.get("torch")
    if torch is not None and not _one_thread:
        torch.set_num_threads(1)
        _one_thread.append(True)


def _restore(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def forks_wanted() -> bool:
    return os.environ.get(FORKS, "1") != "0"


_forks = []


def kernel_forks():
    """This test process's kernel fork servers (tools/kernel_forks.py), started on first use."""
    if not _forks:
        import tempfile

        from tools.kernel_fork_servers import KernelForks

        _forks.append(KernelForks(tempfile.mkdtemp(prefix="attnlab-forks-")))
    return _forks[0]


_named_forks = {}


def named_kernel_forks(name):
    """The fork servers for the kernel spec ``name`` where its command is the launcher of
    tools/kernel_forks.py (the Binder test's venv kernel), started here, in this run's network
    namespace and environment; None where it is an ordinary kernel (or none: nbval says so)."""
    if name not in _named_forks:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        from tools.kernel_fork_servers import KernelForks, launcher_of

        try:
            found = launcher_of(KernelSpecManager().get_kernel_spec(name).argv)
        except NoSuchKernel:
            found = None
        _named_forks[name] = KernelForks(found[1], python=found[0], spec=False) if found else None
    return _named_forks[name]


@pytest.fixture
def forked_kernels(monkeypatch):
    """The ``python3`` kernel of every notebook run under this test is forked (tools/kernel_forks.py),
    as nbval's are; ATTNLAB_KERNEL_FORKS=0 leaves the ordinary kernel."""
    if forks_wanted():
        monkeypatch.setenv("JUPYTER_PATH", os.environ.get("JUPYTER_PATH", ""))  # put back after the test
        kernel_forks().use()


def pytest_sessionfinish(session):
    for forks in [*_forks, *filter(None, _named_forks.values())]:
        forks.close()


def pytest_report_header(config):
    paths = ", ".join(f"{lang}: {numeric_paths.path_for(lang, TURN)}" for lang in numeric_paths.LANGUAGES)
    return f"notebook numeric paths ({numeric_paths.ROTATION}={TURN}): {paths}"


# --------------------------------------------------------------------------
# Scheduling: pytest-xdist (make test: -n 2 --dist loadfile --no-loadscope-reorder) hands whole
# files to the two workers in collection order, so the files that take longest go first and the
# short ones fill the gaps at the end (longest first: the two workers finish close together).
# Seconds from a fresh-clone run on the 2-core Intel Xeon (pytest's --durations, summed per
# file; docs/decisions.md, "How the suite spends its two cores"); a file missing here keeps its
# place after these.
SLOW_FIRST = (
    "tests/test_site_pages.py",        # every page: about 265 s (the site: make test's background build, or built here)
    "tests/test_binder.py",            # a fresh venv from binder/ and its smoke notebooks: 133 to 176 s
    "tests/test_grader_notebooks.py",  # every English stub from the command line, progress, the cell limit: 260 s
    "tests/test_grader.py",            # 793 graded cases: about 310 s
    "tests/test_site_fonts.py",        # every Chinese page in a browser without CJK fonts: about 100 s
    "tests/test_site.py",
    "chapters/de/04-teacher-forcing.ipynb",
    "chapters/de/09-ring-attention.ipynb",
    "chapters/zh/04-teacher-forcing.ipynb",
)


def _relative(item) -> str:
    path = pathlib.Path(str(item.fspath)).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


# The English smoke notebooks' cells run once per suite, in the Binder venv's kernel
# (tests/test_binder.py, one item per cell): where those items were collected, the main nbval run
# leaves the same cells out. trylast: after -k and -m have chosen what runs.
BINDER_CELLS = ("tests/test_binder.py", "test_the_smoke_notebook_cell_passes_in_the_binder_venv")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    in_binder = {item.callspec.params["cell"] for item in items
                 if (_relative(item), getattr(item, "originalname", None)) == BINDER_CELLS}
    twice = [item for item in items if type(item).__module__ == "nbval.plugin" and item.nodeid in in_binder]
    if twice:
        config.hook.pytest_deselected(items=twice)
        left_out = set(map(id, twice))
        items[:] = [item for item in items if id(item) not in left_out]
    rank = {name: n for n, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(_relative(item), len(rank)))  # stable: a file's items keep their order


# --------------------------------------------------------------------------
# A failure is printed when it happens, not only in the summary at the end: a run stopped by a
# time limit (CI's) still shows what failed, and where the time went (items over a minute).
SLOW_ITEM_SECONDS = 60
_config = []


def pytest_configure(config):
    _config.append(config)


def pytest_runtest_logreport(report):
    config = _config[-1] if _config else None
    # the controller prints, not each xdist worker (a worker's config has workerinput; the
    # environment would not do: a pytest started inside a worker's test inherits its variables)
    if config is None or hasattr(config, "workerinput"):
        return
    _record_duration(report)
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        lines = (crash.message if crash else str(report.longrepr)).strip().splitlines() or ["?"]
        terminal.write_line(f"\nFAILED {report.nodeid} ({report.when}, {report.duration:.0f} s): {lines[0][:300]}")
    elif report.duration > SLOW_ITEM_SECONDS:
        terminal.write_line(f"\nslow: {report.nodeid} ({report.when}) {report.duration:.0f} s")


# --------------------------------------------------------------------------
# Where the time goes, per file and per worker (issue 31): the controller sums each file's
# setup, call and teardown seconds as the workers report them, prints the ten most expensive
# files and each worker's busy seconds after pytest's own --durations list, and writes all of it
# to _build/test-durations.json for the next person who wants to balance the two workers.
_file_seconds: dict[str, float] = {}
_file_worker: dict[str, str] = {}
_file_span: dict[str, tuple[float, float]] = {}  # first start, last stop (seconds since the epoch)
_slow_items: list[tuple[float, str, str]] = []  # (seconds, node id, phase) of every phase over a second
_worker_seconds: dict[str, float] = {}


def _record_duration(report):
    name = report.nodeid.split("::", 1)[0]
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    _file_seconds[name] = _file_seconds.get(name, 0.0) + report.duration
    _file_worker[name] = worker
    _worker_seconds[worker] = _worker_seconds.get(worker, 0.0) + report.duration
    if report.duration > 1:
        _slow_items.append((report.duration, report.nodeid, report.when))
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if start is not None and stop is not None:
        first, last = _file_span.get(name, (start, stop))
        _file_span[name] = (min(first, start), max(last, stop))


def pytest_terminal_summary(terminalreporter):
    if not _file_seconds or hasattr(terminalreporter.config, "workerinput"):
        return
    import json

    ranked = sorted(_file_seconds.items(), key=lambda item: -item[1])
    terminalreporter.section("the ten most expensive files (seconds of their items, summed)")
    for name, seconds in ranked[:10]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}  ({_file_worker[name]})")
    busy = ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(_worker_seconds.items()))
    terminalreporter.write_line(f"busy per worker: {busy}; all files: {sum(_file_seconds.values()):.0f} s")
    out = ROOT / "_build" / "test-durations.json"
    out.parent.mkdir(exist_ok=True)
    begin = min((span[0] for span in _file_span.values()), default=0.0)
    out.write_text(json.dumps({"workers": _worker_seconds,
                               "files": [{"file": n, "seconds": round(s, 2), "worker": _file_worker[n],
                                          **({"from": round(_file_span[n][0] - begin, 1),
                                              "to": round(_file_span[n][1] - begin, 1)} if n in _file_span else {})}
                                         for n, s in ranked],
                               "items over a second": [{"item": item, "phase": phase, "seconds": round(s, 2)}
                                                       for s, item, phase in sorted(_slow_items, reverse=True)]},
                              indent=1) + "\n")
