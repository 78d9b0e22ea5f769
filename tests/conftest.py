import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tools/ is not installed; tests import it from the checkout


@pytest.fixture
def root() -> pathlib.Path:
    return ROOT
