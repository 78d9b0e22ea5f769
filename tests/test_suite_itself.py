"""The suite's own machinery (the root conftest.py, make test): the slowest files start first, a
failure is printed the moment it happens, a hung test fails instead of eating CI's time, and the
tests' own torch work runs on one thread."""

import ast
import pathlib
import subprocess
import sys

import torch  # imported when the file is collected, as the test files that compute import it

ROOT = pathlib.Path(__file__).resolve().parent.parent


def slow_first() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "conftest.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SLOW_FIRST":
            return ast.literal_eval(node.value)
    raise AssertionError("no SLOW_FIRST in conftest.py")


def test_every_file_the_suite_starts_with_exists():
    names = slow_first()
    assert len(names) >= 5 and len(set(names)) == len(names)
    assert [name for name in names if not (ROOT / name).is_file()] == []


def test_make_test_keeps_that_order_and_stops_a_hung_test():
    command = subprocess.run(["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    pytest_line = next(line for line in command.splitlines() if "-m pytest" in line)
    for option in ("--dist loadfile", "--no-loadscope-reorder", "--timeout 3000", "--timeout-method thread",
                   "--durations=10"):
        assert option in pytest_line, option


def test_a_failure_is_printed_when_it_happens():
    probe = ROOT / "_build" / "suite-probe"
    probe.mkdir(parents=True, exist_ok=True)
    (probe / "test_probe.py").write_text("def test_passes():\n    pass\n\n\ndef test_fails():\n    assert 1 == 2\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                          "_build/suite-probe/test_probe.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    live = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    # the live line comes before pytest's own summary, which starts with "=== FAILURES ==="
    assert live[0] == "FAILED _build/suite-probe/test_probe.py::test_fails (call, 0 s): assert 1 == 2", run.stdout
    assert run.stdout.index(live[0]) < run.stdout.index("FAILURES")


def test_the_tests_run_torch_on_one_thread():
    # the root conftest.py sets it before the first test that finds torch imported: two OpenMP threads
    # per worker waited for the other worker's core (docs/decisions.md, "The third round")
    assert torch.get_num_threads() == 1
