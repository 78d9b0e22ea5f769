"""The benchmark command at a tiny size, so that it cannot rot (no timing is asserted)."""

import json

import pytest

from benchmarks import run


def test_smoke_benchmark_writes_its_three_files(tmp_path):
    assert run.main(["--smoke", "--device", "cpu", "--out", str(tmp_path), "--name", "smoke"]) == 0
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert (tmp_path / "smoke.md").read_text().startswith("# Benchmarks (smoke sizes)")
    assert (tmp_path / "smoke.png").stat().st_size > 1000
    for row in result["attention"]:
        assert row["flops_ratio_counted"] == row["flops_ratio_theory"]
        assert row["max_abs_diff_sdpa_vs_naive"] < 1e-5 and row["max_abs_diff_blocked_vs_naive"] < 1e-5
        assert row["sdpa_causal_peak_MiB"] < row["naive_peak_MiB"]
    assert all(row["same_tokens"] for row in result["decode"])
    for row in result["backward"]:  # chapter 11: the blocked backward never holds a [T, T] tensor
        assert row["grads_within_tolerance"] and row["blocked_backward_peak_MiB"] < row["naive_backward_peak_MiB"]
        assert row["naive_saved_MiB"] / row["blocked_saved_MiB"] == pytest.approx(row["T"] / (row["d"] + 1))
    memory = result["kv_cache_memory"]
    assert memory["bytes_formula"] == memory["bytes_measured"]
    assert result["machine"]["torch"]
