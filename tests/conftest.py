import os
import pathlib
import sys
import tempfile

import pytest

import attnlab.numerics
import attnlab.shared_results

# Before any test module imports torch, and inherited by every notebook kernel nbval starts:
# the same CPU numeric path as the stored outputs (attnlab/numerics.py).
attnlab.numerics.pin_cpu_numerics()

# One folder per test run, made by the controlling process before pytest-xdist starts its
# workers (they inherit it): the German and Chinese notebooks load what the English one of the
# same chapter trained, under a key of every input and the package's source
# (attnlab/shared_results.py). A run never sees an earlier run's results.
if attnlab.shared_results.VARIABLE not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[attnlab.shared_results.VARIABLE] = tempfile.mkdtemp(prefix="attnlab-shared-")

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tools/ is not installed; tests import it from the checkout


@pytest.fixture
def root() -> pathlib.Path:
    return ROOT
