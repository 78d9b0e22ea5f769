import pathlib
import sys

import pytest

import attnlab.numerics

# Before any test module imports torch, and inherited by every notebook kernel nbval starts:
# the same CPU numeric path as the stored outputs (attnlab/numerics.py).
attnlab.numerics.pin_cpu_numerics()

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tools/ is not installed; tests import it from the checkout


@pytest.fixture
def root() -> pathlib.Path:
    return ROOT
