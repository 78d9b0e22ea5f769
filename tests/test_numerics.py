"""One CPU numeric path on every x86-64 machine (attnlab/numerics.py).

The fingerprint below was measured on an AVX2-only AMD EPYC (torch 2.13.0+cpu,
``get_cpu_capability() == "AVX2"``, nothing pinned: the native path of that CPU):
chapter 4's causal GPT, trained for 500 steps on one thread, mean of its last 50
losses = 2.5989932919. On an AVX-512 machine the native path gives another value
(2.5785261345 on an AMD EPYC with AVX-512); pinned by attnlab it must give the
AVX2 value to the last printed digit, or the stored notebook outputs, written under
the pin, will not match what this machine prints.
"""

import os
import subprocess
import sys

import pytest

from attnlab import numerics

AVX2_FINGERPRINT = "2.5989932919"  # AVX2 machine, see the module docstring

FINGERPRINT_SCRIPT = """
import torch, attnlab
attnlab.setup("en")
from attnlab.gpt import GPT, GPTConfig
from attnlab.tokenizer import corpus, course_tokenizer
from attnlab.train import train
tok = course_tokenizer(); data = torch.tensor(tok.encode(corpus("en")))
torch.manual_seed(0)
m = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, causal=True))
l = train(m, data, steps=500, batch_size=16)
print(torch.backends.cpu.get_cpu_capability(), f"{sum(l[-50:]) / 50:.10f}")
"""


def run_fingerprint(**env_changes: str | None) -> tuple[str, str]:
    """The fingerprint in a fresh interpreter whose environment has none of the pinned
    variables (attnlab must set them itself), changed by ``env_changes``."""
    env = {k: v for k, v in os.environ.items()
           if k not in numerics.PINNED and k not in (numerics.SWITCH)}
    for name, value in env_changes.items():
        if value is not None:
            env[name] = value
    done = subprocess.run([sys.executable, "-c", FINGERPRINT_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    capability, value = done.stdout.split()
    return capability, value


needs_pin = pytest.mark.skipif(not numerics.can_pin(), reason="the pin applies to x86-64 Linux with AVX2 and FMA")


@needs_pin
def test_pinned_training_equals_the_avx2_machine():
    capability, value = run_fingerprint()
    assert capability == "AVX2", f"attnlab.numerics did not pin ATen: capability {capability}"
    assert value == AVX2_FINGERPRINT, (
        f"your CPU/BLAS path differs from the AVX2 reference machine: chapter 4's training gives "
        f"{value}, the AVX2 machine {AVX2_FINGERPRINT} (pinned: {numerics.PINNED}). The stored notebook "
        f"outputs will not match on this machine; find which library still picks its own code path "
        f"(ATen, MKL, oneDNN) and pin it in attnlab/numerics.py.")


def test_the_pin_keeps_what_the_user_set_and_can_be_switched_off():
    if not numerics.can_pin():
        assert numerics.pin_cpu_numerics({}) == {}
        return
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert numerics.pin_cpu_numerics(env) == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                              "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert numerics.pin_cpu_numerics({numerics.SWITCH: "native"}) == {}


def test_nothing_is_pinned_where_the_avx2_kernels_cannot_run():
    assert not numerics.can_pin("aarch64", {"avx2", "fma"})  # an ARM laptop: the variable would be rejected
    assert not numerics.can_pin("x86_64", {"sse4_2", "avx"})  # an x86-64 CPU older than AVX2
    assert numerics.can_pin("x86_64", {"avx2", "fma", "avx512f"})
    assert numerics.can_pin("AMD64", {"avx2", "fma"})


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\n")
    assert numerics.cpu_flags(str(info)) == {"fpu", "sse2", "avx2", "fma"}
    assert numerics.cpu_flags(str(tmp_path / "missing")) == set()
