"""Suite-wide hooks (at the repository root, so they reach the notebooks nbval collects in
chapters/ and solutions/ too, not only the tests in tests/)."""

import os
import pathlib

import pytest

from tools import numeric_paths

ROOT = pathlib.Path(__file__).resolve().parent
ORIGINAL_PATH_VARIABLES = {name: os.environ[name] for name in numeric_paths.VARIABLES if name in os.environ}
TURN = numeric_paths.rotation()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Before pytest sets up the item's collectors: nbval starts a notebook's kernel in its file's
    # setup, and the kernel inherits os.environ, so each language's notebooks run on their own
    # numeric path. Every other test gets the environment the run started with.
    is_notebook = type(item).__module__ == "nbval.plugin"
    path = numeric_paths.notebook_path(pathlib.Path(str(item.fspath)), ROOT, TURN) if is_notebook else None
    numeric_paths.apply(path, ORIGINAL_PATH_VARIABLES)


def pytest_report_header(config):
    paths = ", ".join(f"{lang}: {numeric_paths.path_for(lang, TURN)}" for lang in numeric_paths.LANGUAGES)
    return f"notebook numeric paths ({numeric_paths.ROTATION}={TURN}): {paths}"
