"""Notebook kernels forked from a process that has already imported PyTorch (the test suite only).

Every notebook the suite runs starts a fresh kernel, and a fresh kernel spends about 2 s of CPU
before the notebook's first line of its own: the interpreter, ipykernel with IPython, zmq and
tornado, then ``import torch`` (1.2 s) and matplotlib. Over about 80 kernels a run, that was a
sixth of the suite's CPU time on two cores (issue 31). A **kernel fork server** pays it once: it
imports those modules and waits; each kernel is a ``fork()`` of it that goes on exactly as
``python -m ipykernel_launcher -f CONNECTION_FILE`` would, in the working directory and with the
environment that Jupyter gave the kernel. The course does the same for its ring-attention
processes (``attnlab.ring`` uses multiprocessing's "forkserver").

Two roles, one file (run as a script; ``launch`` uses only the standard library and starts in
milliseconds):

``python tools/kernel_forks.py serve SOCKET``
    imports ``PRELOAD``, listens on the Unix socket ``SOCKET`` and forks one kernel per request.
    It never computes anything, so no thread pool exists when it forks. It ends when the process
    that started it ends.
``python -S tools/kernel_forks.py launch SOCKET_DIR -f CONNECTION_FILE``
    the kernel spec's command: Jupyter starts, signals and kills this small process as if it were
    the kernel. It asks the server whose environment is its own for a kernel, hands it its
    standard streams, passes on every signal to the kernel's process group and exits with the
    kernel's exit status; the kernel ends when this process ends, even by SIGKILL. When no server
    with exactly this environment runs, it **becomes** the ordinary kernel (``exec`` of
    ``python -m ipykernel_launcher``), so a kernel is always correct, at worst not faster.

What a forked kernel shares with the server is the modules it imported and their import-time
state, computed under the same environment variables: a launcher asks only the server whose
environment equals its own in everything but ``PER_KERNEL`` (the numeric-path variables, thread
counts and ``PYTHON*`` all take part; the socket is named by a hash of them), and writes a line to
``ordinary.log`` when there is none. Python's ``random`` reseeds itself in a forked
child, numpy's global generator is reseeded here, and torch's default generator has a fixed seed
in every fresh process anyway. Nothing that registers itself with a running kernel on import
(ipywidgets, and attnlab's figures, which import it) is preloaded.

``KernelForks`` (tools/kernel_fork_servers.py, used by the root conftest.py) starts one server
per environment and writes the ``python3`` kernel spec that points at them; the suite's nbval
items and its grader command lines use it through ``JUPYTER_PATH``, the Binder test names a
spec of its venv's Python. tests/test_kernel_forks.py checks the kernel it gives.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

# modules every kernel or course notebook imports whose import neither needs a running kernel nor
# reads a per-kernel variable: not ipykernel.kernelapp (its IPKernelApp reads JPY_PARENT_PID
# when the module is imported; it imports in 10 ms once these are in), not ipywidgets (it
# registers its comm target on import when a kernel runs), not ipykernel.debugger (debugpy prints
# a warning and sets PYDEVD_USE_FRAME_EVAL on import), not matplotlib_inline (it hooks into the
# running IPython on import). torch._dynamo: 17 of the 22 English notebooks import it (through
# torch.nn.attention, FlexAttention, TorchDispatchMode), 1.0 s of CPU each; it sets
# TORCHINDUCTOR_CACHE_DIR on import, which a forked kernel's os.environ does not show (the value
# is computed from the same environment where it is needed again). matplotlib.figure: every
# kernel, 0.14 to 0.3 s.
PRELOAD = ("torch", "torch._dynamo", "numpy", "matplotlib", "matplotlib.font_manager", "matplotlib.figure",
           "attnlab", "ipykernel.ipkernel", "ipykernel.zmqshell", "IPython.core.completer")
# variables that differ from kernel to kernel (or test to test) and that no preloaded module reads
# on import: ATTNLAB_GRADER_LOG is the file the grader's command line reads a notebook's checks from
# (attnlab.grader, not preloaded, reads it when a check runs); COLUMNS and LINES, a terminal's size,
# appear in the command line's process
PER_KERNEL = ("JPY_PARENT_PID", "JPY_SESSION_NAME", "PYTEST_CURRENT_TEST", "ATTNLAB_GRADER_LOG", "COLUMNS", "LINES")
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # what ipykernel puts in MPLBACKEND when unset
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")


def environment_key(environ, python: str = sys.executable) -> str:
    """What a kernel must match to be forked from a server: its interpreter (``sys.executable``
    there) and all of its environment but PER_KERNEL."""
    kept = sorted((name, value) for name, value in environ.items() if name not in PER_KERNEL)
    return hashlib.sha256(json.dumps([python, kept]).encode()).hexdigest()[:16]


def socket_path(folder: str, environ) -> str:
    return os.path.join(folder, environment_key(environ) + ".sock")


def send_message(conn: socket.socket, payload: dict, fds=()) -> None:
    data = json.dumps(payload).encode()
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    conn.sendmsg([HEADER.pack(len(data)) + data], ancillary)


def receive_message(conn: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the file descriptors sent with it; (None, fds) when the other side has gone."""
    header, ancillary, _, _ = conn.recvmsg(HEADER.size, socket.CMSG_SPACE(max_fds * 4) if max_fds else 0)
    fds = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", payload[:len(payload) - len(payload) % 4]).tolist()
    header = receive_exactly(conn, HEADER.size, header)
    if header is None:
        return None, fds
    data = receive_exactly(conn, HEADER.unpack(header)[0])
    return (None if data is None else json.loads(data)), fds


def receive_exactly(conn: socket.socket, size: int, data: bytes = b"") -> bytes | None:
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            return None
        data += more
    return data


# --------------------------------------------------------------------------
# launch: the process Jupyter believes is the kernel


def launch(folder: str, kernel_args: list[str]) -> None:
    kernel = None  # the forked kernel's pid, the leader of its own process group
    early = []  # signals that came before the kernel did

    def pass_on(signum, _frame):
        if kernel is None:
            early.append(signum)
            return
        try:
            os.killpg(kernel, signum)
        except ProcessLookupError:  # not yet the leader of its own group
            try:
                os.kill(kernel, signum)
            except ProcessLookupError:
                pass

    for signum in FORWARDED:
        signal.signal(signum, pass_on)
    path = socket_path(folder, os.environ)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        send_message(conn, {"args": kernel_args, "cwd": os.getcwd(), "env": dict(os.environ)}, fds=(0, 1, 2))
        reply, _ = receive_message(conn)
    except OSError:
        reply = None
    if not reply or "pid" not in reply:
        conn.close()
        with open(os.path.join(folder, "ordinary.log"), "a", encoding="utf-8") as log:  # which, for whoever wonders
            print(f"{os.getpid()}: no server for the environment {environment_key(os.environ)}", file=log)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in early:  # as if the ordinary kernel had been there
            os.kill(os.getpid(), signum)
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *kernel_args])
    kernel = reply["pid"]
    for signum in early:
        pass_on(signum, None)
    parent = os.getppid()
    conn.settimeout(1.0)
    while True:
        try:
            ended, _ = receive_message(conn)
            break
        except TimeoutError:  # as an ordinary kernel watches its parent: the client gone, the kernel goes
            if os.getppid() != parent:
                pass_on(signal.SIGKILL, None)
                sys.exit(1)
    status = (ended or {}).get("status", 1)
    if status < 0:  # the kernel died of a signal: so does this process
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


# --------------------------------------------------------------------------
# serve: import once, fork per kernel


def preload() -> None:
    if not os.environ.get("MPLBACKEND"):  # as the kernel will (ipykernel's init_gui_pylab), before matplotlib reads it
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def serve(path: str) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # KernelForks.close(): leave through finally
    parent = os.getppid()
    environ = dict(os.environ)  # as it was before preload() set MPLBACKEND
    key = environment_key(environ)
    preload()
    import gc

    gc.freeze()  # the preloaded objects stay out of every collection: a kernel's collector does not copy their pages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.replace(path + ".tmp", path)  # the socket appears once the server is ready
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    kernels: dict[int, socket.socket] = {}  # pid -> its launcher's connection
    server = os.getpid()
    try:
        while os.getppid() == parent:
            for ready, _ in selector.select(timeout=0.2):
                if ready.fileobj is listener:
                    conn, _ = listener.accept()
                    try:
                        start_kernel(conn, key, kernels, listener, selector)
                    except (OSError, ValueError, KeyError):  # a launcher that went away mid-request
                        conn.close()
                else:  # a launcher sends nothing after its request: readable means it has ended
                    selector.unregister(ready.fileobj)
                    kill_group(ready.data, signal.SIGKILL)  # even a kernel stuck in C code holding the GIL
            reap(kernels, selector)
    finally:
        if os.getpid() == server:  # not in a kernel that leaves through here
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def start_kernel(conn, key, kernels, listener, selector) -> None:
    conn.settimeout(10)  # for the request only: the kernel's lifeline below blocks on this socket for good
    request, fds = receive_message(conn, max_fds=3)
    conn.settimeout(None)
    if request is None or len(fds) != 3 or environment_key(request["env"]) != key:
        for fd in fds:
            os.close(fd)
        send_message(conn, {"refused": "another environment"})  # the launcher starts an ordinary kernel
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        selector.close()
        listener.close()
        for other in kernels.values():
            other.close()
        try:
            become_kernel(conn, request, fds)
        except SystemExit:  # out through serve() and the interpreter's own exit, as a kernel's
            raise
        except BaseException:  # noqa: BLE001  (never into the server's loop: shown and ended, as a crash)
            import traceback

            traceback.print_exc()
            sys.exit(1)
    for fd in fds:
        os.close(fd)
    kernels[pid] = conn
    send_message(conn, {"pid": pid})
    selector.register(conn, selectors.EVENT_READ, pid)


def kill_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def reap(kernels: dict, selector) -> None:
    while kernels:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        if conn is not None:
            status = -os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.waitstatus_to_exitcode(wait_status)
            try:
                selector.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                send_message(conn, {"status": status})
            except OSError:
                pass
            conn.close()


def become_kernel(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: the environment, streams and directory Jupyter gave the launcher, then
    ipykernel as ``python -m ipykernel_launcher`` runs it, and the interpreter's own exit (atexit
    handlers, threads joined) when the kernel is done: its SystemExit leaves through ``serve``,
    whose clean-up is the server's only."""
    os.setsid()
    for signum in (*FORWARDED, signal.SIGCHLD):  # the handlers a fresh interpreter starts with
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import importlib.util

    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *request["args"]]  # as with -m
    del sys.path[0]  # this script's folder; ipykernel adds the working directory back (as '')
    import numpy

    numpy.random.seed()  # fresh entropy, as numpy gives a fresh process
    process = sys.modules.get("multiprocessing.process")
    if process is not None:  # what multiprocessing noted when the server imported it
        process.ORIGINAL_DIR = os.getcwd()  # its spawned children put this directory on sys.path
        process.current_process().authkey = os.urandom(32)

    import threading

    def lifeline():  # the launcher gone: the kernel and its processes end too (the server kills them as well)
        while True:
            try:
                if not conn.recv(1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=lifeline, name="kernel-forks-lifeline", daemon=True).start()
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    sys.exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["launch"]:
        launch(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: kernel_forks.py serve SOCKET | launch SOCKET_DIR -f CONNECTION_FILE")
