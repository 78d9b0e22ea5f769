"""The suite's side of tools/kernel_forks.py: the kernel spec whose command is its launcher, and
the fork servers of one test process (``KernelForks``, used by the root conftest.py and the Binder
test). tools/kernel_forks.py itself runs as a script on the standard library alone (the launcher
starts with ``python -S``), so what needs ipykernel or subprocess lives here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tools.kernel_forks import environment_key

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_forks.py")


def kernel_spec(folder: str, python: str = sys.executable, display_name: str | None = None) -> dict:
    """A kernel spec (kernel.json) whose kernel is forked from a server of ``python`` that listens
    in ``folder`` (``KernelForks``); ipykernel's own spec (protocol version, encryption, debugger)
    with the launcher as its command."""
    from ipykernel.kernelspec import get_kernel_dict

    kernel = get_kernel_dict()
    kernel.update(argv=[python, "-S", SCRIPT, "launch", folder, "-f", "{connection_file}"],
                  display_name=display_name or kernel["display_name"] + " (forked)")
    return kernel


def launcher_of(argv: list[str]) -> tuple[str, str] | None:
    """``(python, folder)`` where ``argv`` is a kernel spec's command made by ``kernel_spec``."""
    if len(argv) >= 5 and argv[1:2] == ["-S"] and argv[2] == SCRIPT and argv[3] == "launch":
        return argv[0], argv[4]
    return None


class KernelForks:
    """The fork servers of one test process (one per environment it asked for) for the kernels of
    ``python`` whose launcher looks in ``folder``. Made with ``spec=True``, it owns the folder and
    writes the ``python3`` kernel spec there (``jupyter_path``) that ``use`` puts first in
    JUPYTER_PATH; made for a kernel spec written elsewhere (``spec=False``, as the Binder test
    names its venv's kernel), it only starts servers."""

    def __init__(self, folder: str, python: str = sys.executable, spec: bool = True):
        self.folder, self.python, self.own_folder = folder, python, spec
        self.jupyter_path = os.path.join(folder, "jupyter") if spec else None
        if spec:
            spec_folder = os.path.join(self.jupyter_path, "kernels", "python3")
            os.makedirs(spec_folder, exist_ok=True)
            with open(os.path.join(spec_folder, "kernel.json"), "w", encoding="utf-8") as out:
                json.dump(kernel_spec(folder, python), out)
        self.servers: dict[str, object] = {}

    def use(self, environ=os.environ) -> None:
        """Have a server for exactly this environment running (and, where this owns the ``python3``
        kernel spec, point ``environ`` at it: its folder first in JUPYTER_PATH)."""
        if self.jupyter_path:
            rest = [p for p in environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != self.jupyter_path]
            environ["JUPYTER_PATH"] = os.pathsep.join([self.jupyter_path, *rest])
        key = environment_key(environ, self.python)
        if key in self.servers and self.servers[key].poll() is None:
            return
        path = os.path.join(self.folder, key + ".sock")
        server = subprocess.Popen([self.python, SCRIPT, "serve", path], env=dict(environ),
                                        stdin=subprocess.DEVNULL)
        self.servers[key] = server
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the kernel fork server did not start (exit status {server.poll()})")
            time.sleep(0.05)

    def close(self) -> None:
        for server in self.servers.values():
            server.terminate()
        for server in self.servers.values():
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if self.own_folder:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
