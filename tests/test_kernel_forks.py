"""The kernels the suite forks from a server that has imported torch (tools/kernel_forks.py) behave
as kernels started the ordinary way: same directory, search path, environment, signal handlers,
parent watch and matplotlib backend; an interrupt reaches the code a cell runs; a kernel ends
with the process Jupyter started, even when that process is killed; a request from another
environment gets an ordinary kernel. nbval runs every notebook in such kernels (conftest.py)."""

import json
import os
import pathlib
import sys
import time

import pytest
from jupyter_client.manager import start_new_kernel

from tools.kernel_fork_servers import KernelForks

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters" / "en"

PROBE = """
import json, os, signal, sys
import matplotlib
from ipykernel.kernelapp import IPKernelApp
print(json.dumps({
    "cwd": os.getcwd(), "path": sys.path, "argv0": sys.argv[0], "env": dict(os.environ),
    "parent_handle": IPKernelApp.instance().parent_handle, "backend": matplotlib.get_backend(),
    "handlers": {name: str(signal.getsignal(getattr(signal, name))) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD", "SIGPIPE")},
    "session_leader": os.getsid(0) == os.getpid(), "pid": os.getpid(),
    "torch_imported": "torch" in sys.modules, "numpy_draw": __import__("numpy").random.randint(2**31),
}))
"""


def run(client, code, timeout=60):
    """What ``code`` printed, and the reply's status."""
    out = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(
        m["content"]["text"]) if m["msg_type"] == "stream" and m["content"]["name"] == "stdout" else None)
    return "".join(out), reply["content"]["status"]


@pytest.fixture(scope="module")
def forks():
    # One set of servers for this file's tests, as a worker of make test has one: each test's kernels
    # are new, and a server that has handed out, interrupted and lost kernels must serve the next
    # test as well (a server per test cost about 3 s of CPU each for its imports).
    import tempfile

    folder = tempfile.mkdtemp(prefix="attnlab-forks-test-")  # short: a Unix socket's path has at most 107 bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("JUPYTER_PATH", raising=False)
        forks = KernelForks(folder)
    yield forks
    forks.close()


def kernel(monkeypatch, jupyter_path=None, env=None):
    if jupyter_path is None:
        monkeypatch.delenv("JUPYTER_PATH", raising=False)
    else:
        monkeypatch.setenv("JUPYTER_PATH", jupyter_path)
    return start_new_kernel(kernel_name="python3", cwd=str(CHAPTERS), env=env or dict(os.environ))


def probe(manager, client):
    try:
        printed, status = run(client, PROBE)
        assert status == "ok", printed
        return json.loads(printed)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def test_a_forked_kernel_sees_what_an_ordinary_kernel_sees(forks, monkeypatch):
    ordinary = probe(*kernel(monkeypatch))
    assert not ordinary["torch_imported"]
    forks.use()
    jupyter_path = os.environ["JUPYTER_PATH"]
    forked = probe(*kernel(monkeypatch, jupyter_path))
    second = probe(*kernel(monkeypatch, jupyter_path))
    assert forked["torch_imported"] and second["torch_imported"]  # it came from the server
    assert forked["pid"] != second["pid"]
    for key in ("cwd", "path", "argv0", "parent_handle", "backend", "handlers", "session_leader"):
        assert forked[key] == ordinary[key], key
    assert forked["parent_handle"] == os.getpid()  # it watches this process, as an ordinary kernel does
    differs = {name for name in set(forked["env"]) | set(ordinary["env"])
               if forked["env"].get(name) != ordinary["env"].get(name)}
    assert differs <= {"JUPYTER_PATH"}, differs
    assert forked["numpy_draw"] != second["numpy_draw"]  # numpy's global generator: fresh entropy in each


def test_an_interrupt_stops_a_cell_of_a_forked_kernel_which_then_goes_on(forks, monkeypatch):
    forks.use()
    manager, client = kernel(monkeypatch, os.environ["JUPYTER_PATH"])
    try:
        # stop_on_error=False: after an error reply ipykernel aborts, for an instant, every request that
        # reaches it ("aborted"; ipykernel's _abort_queues), which once caught the next cell on a loaded machine
        msg_id = client.execute("import time\ntime.sleep(120)", stop_on_error=False)
        while not (lambda m: m["msg_type"] == "execute_input" and m["parent_header"].get("msg_id") == msg_id)(
                client.get_iopub_msg(timeout=60)):
            pass  # until the cell runs: an idle kernel ignores SIGINT
        time.sleep(0.5)
        start = time.monotonic()
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        assert time.monotonic() - start < 10
        assert run(client, "print(6 * 7)") == ("42\n", "ok")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    assert not manager.is_alive()


def test_a_busy_forked_kernel_ends_when_the_process_jupyter_started_is_killed(forks, monkeypatch):
    forks.use()
    manager, client = kernel(monkeypatch, os.environ["JUPYTER_PATH"])
    try:
        printed, _ = run(client, "import os, subprocess, sys\n"
                                 "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                                 "print(os.getpid(), child.pid)")
        pids = [int(pid) for pid in printed.split()]
        client.execute("sum(range(10**13))")  # C code that holds the GIL: no thread of the kernel runs
        time.sleep(1)
    finally:
        client.stop_channels()
    manager.shutdown_kernel(now=True)  # SIGKILL to the launcher's process group, as Jupyter does
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in pids if alive(pid)] == []  # the kernel and what it started


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = pathlib.Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().rsplit(")", 1)[1].split()[0] == "Z")  # a zombie has ended


def test_a_kernel_from_another_environment_is_started_the_ordinary_way(forks, monkeypatch):
    forks.use()
    jupyter_path = os.environ["JUPYTER_PATH"]
    other = dict(os.environ, ATTNLAB_TORCH_THREADS="3")  # a variable torch or attnlab may read on import
    facts = probe(*kernel(monkeypatch, jupyter_path, env=other))
    assert not facts["torch_imported"] and facts["env"]["ATTNLAB_TORCH_THREADS"] == "3"
    assert "no server for the environment" in (pathlib.Path(forks.folder) / "ordinary.log").read_text("utf-8")


def test_the_suite_runs_its_notebooks_in_forked_kernels():
    # a notebook under the repository (so the root conftest.py applies), run by nbval as make test
    # runs it: its stored output says torch was imported before its first line
    import subprocess

    import nbformat

    folder = ROOT / "_build" / "kernel-forks-probe"
    folder.mkdir(parents=True, exist_ok=True)
    cell = nbformat.v4.new_code_cell("import sys\nprint('torch' in sys.modules)", execution_count=1,
                                     outputs=[nbformat.v4.new_output("stream", name="stdout", text="True\n")])
    nbformat.write(nbformat.v4.new_notebook(cells=[cell], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), folder / "probe.ipynb")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "ATTNLAB_KERNEL_FORKS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                           "_build/kernel-forks-probe/probe.ipynb"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:]
