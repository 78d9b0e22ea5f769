"""The numeric paths the notebooks run under (tools/numeric_paths.py, the root conftest.py)."""

import os
import pathlib
import subprocess
import sys

import pytest

from tools import numeric_paths

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_rotation_gives_each_language_another_path_and_covers_all_three():
    for turn in (0, 1, 2):
        paths = [numeric_paths.path_for(lang, turn) for lang in numeric_paths.LANGUAGES]
        assert sorted(paths) == sorted(numeric_paths.PATHS)
    for lang in numeric_paths.LANGUAGES:  # over the three rotations, each language meets every path
        assert {numeric_paths.path_for(lang, turn) for turn in (0, 1, 2)} == set(numeric_paths.PATHS)
    assert numeric_paths.rotation({}) == 0 and numeric_paths.rotation({numeric_paths.ROTATION: "2"}) == 2
    with pytest.raises(ValueError, match="0, 1 or 2"):
        numeric_paths.rotation({numeric_paths.ROTATION: "3"})


def test_a_notebook_takes_the_path_of_its_language_and_apply_sets_exactly_that_path():
    for turn in (0, 1, 2):
        for section in ("chapters", "solutions"):
            for lang in numeric_paths.LANGUAGES:
                notebook = ROOT / section / lang / "01-causal-mask.ipynb"
                assert numeric_paths.notebook_path(notebook, ROOT, turn) == numeric_paths.path_for(lang, turn)
        assert numeric_paths.notebook_path(ROOT / "tests" / "test_masks.py", ROOT, turn) is None
        assert numeric_paths.notebook_path(pathlib.Path("/elsewhere/chapters/de/x.ipynb"), ROOT, turn) is None
    environ = {"MKL_CBWR": "AUTO", "HOME": "/root"}
    numeric_paths.apply("portable", {"MKL_CBWR": "AUTO"}, environ)
    assert environ == {"HOME": "/root", **numeric_paths.PATHS["portable"]}
    numeric_paths.apply("two-threads", {"MKL_CBWR": "AUTO"}, environ)
    assert environ == {"HOME": "/root", "ATTNLAB_TORCH_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    numeric_paths.apply(None, {"MKL_CBWR": "AUTO"}, environ)  # a test that is not a notebook: as the run began
    assert environ == {"HOME": "/root", "MKL_CBWR": "AUTO"}


PROBE = ("import torch, attnlab; attnlab.setup('en'); "
         "print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())")


@pytest.mark.parametrize("path", list(numeric_paths.PATHS))
def test_each_path_reaches_torch_in_a_fresh_interpreter(path):
    env = {k: v for k, v in os.environ.items() if k not in numeric_paths.VARIABLES}
    env.update(numeric_paths.PATHS[path])
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    capability, threads = done.stdout.split()
    assert threads == ("2" if path == "two-threads" else "1")
    if path == "portable" and sys.platform == "linux" and os.uname().machine in ("x86_64", "AMD64"):
        assert capability == "DEFAULT"  # ATen's scalar kernels, not AVX2 or AVX-512


def test_attnlab_setup_refuses_a_thread_count_that_is_not_a_whole_number():
    import attnlab

    assert attnlab.torch_threads({}) == 1 and attnlab.torch_threads({"ATTNLAB_TORCH_THREADS": "3"}) == 3
    for bad in ("0", "two", "-1", ""):
        with pytest.raises(ValueError, match="ATTNLAB_TORCH_THREADS"):
            attnlab.torch_threads({"ATTNLAB_TORCH_THREADS": bad})
