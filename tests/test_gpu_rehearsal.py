"""The chapters' GPU-only cells, rehearsed on the CPU (issue 30, point 5).

Chapter 3 has one cell that runs only when ``attnlab.pick_device()`` finds CUDA
(``if device.type == "cuda":``); on a CPU machine, nbval sees only its ``else`` branch, so a
misspelt name, a message key that does not exist or a shape that does not fit in the CUDA branch
would first be found on a reader's GPU (the GPU runner of tools/gpu_check.sh is not lent to every
session). Here each notebook's code cells run up to that cell, and the cell runs
with its CUDA branch taken on the CPU: the same tensors, kernels chosen by ``sdpa_kernel`` where
the CPU has them. What the rehearsal cannot show (that CUDA's flash kernel refuses an explicit
mask) tests/test_gpu.py checks on a GPU. Chapter 8's GPU-only cell (compiled FlexAttention) is
gone: tests/test_gpu.py runs the compiled kernel against SDPA, and the chapter shows the measured
GPU rows from attnlab/data/benchmarks_cuda.json instead.

The notebooks call ``attnlab.setup`` (language, threads, seeds, print options), so the three
rehearsals run in one interpreter of their own (``python tests/test_gpu_rehearsal.py``), not in
the test process.
"""

import contextlib
import io
import json
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPU_BRANCH = 'if device.type == "cuda":'
LANGS = ("en", "de", "zh")
REHEARSALS = {  # notebook -> edits to its GPU cell beyond taking the CUDA branch
    "03-sdpa-flash-attention": {},
}


def code_cells(notebook: pathlib.Path) -> list[dict]:
    return [cell for cell in json.loads(notebook.read_text("utf-8"))["cells"] if cell["cell_type"] == "code"]


def rehearse(notebook: pathlib.Path, replace: dict[str, str]) -> str:
    """Run the code cells up to the GPU-only one, then that cell with its CUDA branch taken on the
    CPU (``replace`` edits only that cell); what the GPU cell printed."""
    cells = code_cells(notebook)
    gpu = [i for i, cell in enumerate(cells) if GPU_BRANCH in "".join(cell["source"])]
    assert len(gpu) == 1, f"{notebook.name}: expected one GPU-only cell, found {len(gpu)}"
    namespace: dict = {"__name__": "__rehearsal__"}
    with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng():
        for cell in cells[:gpu[0]]:
            source = "".join(cell["source"])
            if "raises-exception" in cell.get("metadata", {}).get("tags", []):
                with contextlib.suppress(Exception):
                    exec(compile(source, notebook.name, "exec"), namespace)  # noqa: S102 - the course's own cell
            else:
                exec(compile(source, notebook.name, "exec"), namespace)  # noqa: S102
    source = "".join(cells[gpu[0]]["source"]).replace(GPU_BRANCH, "if True:  # rehearsed on the CPU", 1)
    for old, new in replace.items():
        assert old in source, f"{notebook.name}: the GPU cell no longer contains {old!r}"
        source = source.replace(old, new)
    assert namespace["device"].type == "cpu"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), torch.random.fork_rng():
        exec(compile(source, notebook.name, "exec"), namespace)  # noqa: S102
    return printed.getvalue()


def rehearse_all() -> dict[str, str]:
    return {f"{lang}/{name}": rehearse(ROOT / "chapters" / lang / f"{name}.ipynb", replace)
            for name, replace in REHEARSALS.items() for lang in LANGS}


@pytest.fixture(scope="module")
def printed() -> dict[str, str]:
    run = subprocess.run([sys.executable, __file__], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_chapter_3s_cuda_probe_runs_its_cuda_branch_on_the_cpu(printed, lang):
    lines = printed[f"{lang}/03-sdpa-flash-attention"].splitlines()
    assert len(lines) == 6, lines  # three backends x (is_causal, attn_mask)
    for line, (backend, kind) in zip(lines, [(b, k) for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
                                             for k in ("is_causal", "attn_mask")]):
        assert line.startswith(backend) and kind in line, line
    from attnlab import tr

    available = tr("ch3.case_available", lang, case="")  # ": available" in the reader's language
    assert lines[4].rstrip().endswith(available) and lines[5].rstrip().endswith(available)  # MATH runs everywhere


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_the_device_line_reads_the_same_after_sanitizing_on_the_cpu_and_the_gpu(lang):
    # chapters 3 and 8 print the device they chose after label.device in the reader's language;
    # nbval on a GPU compares it with the stored "cpu" through tests/nbval_sanitize.cfg (the
    # first GPU run failed on the German and Chinese lines when the rule knew only "device: ")
    from attnlab import labeled, tr

    cpu, cuda = (labeled(tr("label.device", lang), name) for name in ("cpu", "cuda"))
    assert sanitized(cpu) == sanitized(cuda) != cpu


def sanitized(text: str) -> str:
    """``text`` as nbval compares it: tests/nbval_sanitize.cfg read by nbval's own parser."""
    import re

    from nbval.plugin import get_sanitize_patterns

    for regex, replace in get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text("utf-8")):
        text = re.sub(regex, replace, text)
    return text


def test_every_rule_of_the_sanitize_file_is_read_by_nbval():
    # a rule nbval's parser skips (an empty "replace:", a blank line between the two) masks nothing
    text = (ROOT / "tests" / "nbval_sanitize.cfg").read_text("utf-8")
    rules = [line for line in text.splitlines() if line.startswith("regex:")]
    from nbval.plugin import get_sanitize_patterns

    assert len(get_sanitize_patterns(text)) == len(rules)


def test_a_tensor_on_the_gpu_reads_like_one_on_the_cpu_after_sanitizing():
    on_gpu = "tensor([[0.5000, 0.5000]], device='cuda:0')"
    assert sanitized(on_gpu) == sanitized(repr(torch.tensor([[0.5, 0.5]])))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(rehearse_all(), ensure_ascii=False))
