"""The benchmark command at a tiny size, so that it cannot rot (no timing is asserted)."""

import json

import pytest
import torch

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
        for pair in ("sdpa_causal_over_full", "blocked_causal_over_full"):  # side by side, per round
            ratio = row[pair]
            assert ratio["min"] <= ratio["median"] <= ratio["max"] and ratio["rounds"] >= 3, pair
    assert all(row["same_tokens"] for row in result["decode"])
    assert all(row["speedup_spread"]["min"] <= row["speedup"] <= row["speedup_spread"]["max"]
               for row in result["decode"])
    assert result["machine"]["cpu_capability"]  # the native path the benchmarks measured
    for row in result["backward"]:  # chapter 11: the blocked backward never holds a [T, T] tensor
        assert row["grads_within_tolerance"] and row["blocked_backward_peak_MiB"] < row["naive_backward_peak_MiB"]
        assert row["naive_saved_MiB"] / row["blocked_saved_MiB"] == pytest.approx(row["T"] / (row["d"] + 1))
    memory = result["kv_cache_memory"]
    assert memory["bytes_formula"] == memory["bytes_measured"]
    assert result["machine"]["torch"]
    decoding = result["decoding"]  # chapter 12
    peaks = [row["peak_MiB"] for row in decoding["chunked_prefill"]]
    assert peaks == sorted(peaks, reverse=True) and len(peaks) >= 2  # the peak falls with the chunk size
    paged = decoding["paged"]
    assert all(row["bytes"] < paged["contiguous_bytes"] for row in paged["paged"])
    assert all(row["same_tokens_as_greedy"] for row in decoding["speculative"])
    assert [row["target_passes"] for row in decoding["speculative"]][0] == decoding["speculative"][0]["new_tokens"]
    assert "## Speculative decoding" in (tmp_path / "smoke.md").read_text()

    # --only decoding: chapter 12's rows measured again, put into the stored result with their own date
    stored = dict(result, notes="kept as measured")
    (tmp_path / "smoke.json").write_text(json.dumps(stored))
    assert run.main(["--smoke", "--only", "decoding", "--device", "cpu", "--out", str(tmp_path), "--name", "smoke"]) == 0
    merged = json.loads((tmp_path / "smoke.json").read_text())
    assert merged["notes"] == "kept as measured" and merged["attention"] == result["attention"] and merged["date"] == result["date"]
    assert merged["decoding"]["date"] and merged["decoding"]["machine"]["torch"]
    assert [r["C"] for r in merged["decoding"]["chunked_prefill"]] == [r["C"] for r in decoding["chunked_prefill"]]
    with pytest.raises(SystemExit, match="not 'default'"):
        run.main(["--only", "decoding", "--device", "cpu", "--out", str(tmp_path), "--name", "smoke"])


def test_paired_rounds_alternate_and_give_the_median_of_per_round_ratios():
    order = []
    a_times = iter([1.0, 3.0, 1.0, 9.0])  # warm-up, then three rounds
    b_times = iter([1.0, 1.0, 2.0, 3.0])
    measure_a = lambda: order.append("a") or next(a_times)  # noqa: E731
    measure_b = lambda: order.append("b") or next(b_times)  # noqa: E731
    pair = run.paired_seconds(measure_a, measure_b, repeats=3)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then a-b, b-a, a-b
    assert pair["ratio"] == {"median": 3.0, "min": 0.5, "max": 3.0, "rounds": 3}  # 3/1, 1/2, 9/3
    assert pair["a"] == 3.0 and pair["b"] == 2.0


def test_the_bfloat16_rows_of_a_gpu_run_rehearsed_on_the_cpu(tmp_path):
    """The GPU-only rows (flash and FlexAttention in bfloat16) run the same code here, uncompiled."""
    sizes = run.Sizes((64,), 2, 32, (16,), 2, 1, 3, dict(n_layer=1, n_head=2, n_embd=32),
                      gpu_T=(512,), gpu_heads=2, window=64, naive_max_T=512)
    (row,) = run.bf16_rows(sizes, torch.device("cpu"), compile_flex=False)
    n = 512 // 128  # FlexAttention's default block: 128 x 128
    assert row["flex_full_blocks"] == {"visited": n * n, "total": n * n}
    assert row["flex_causal_blocks"]["visited"] == n * (n + 1) // 2
    assert row["flex_window_blocks"]["visited"] == n + (n - 1)  # its own block and the partial one before
    assert row["flex_causal_equals_flash"]
    for pair in ("flash_full_over_causal", "flex_causal_over_full", "flex_window_over_full"):
        assert row[pair]["min"] <= row[pair]["median"] <= row[pair]["max"], pair
    assert row["naive_peak_MiB"] > row["flash_causal_peak_MiB"]
    text = run.markdown({"size": "rehearsal", "date": "-", "machine": run.machine(torch.device("cpu")),
                         "attention": [], "backward": [], "bf16": [row], "decode": [],
                         "kv_cache_memory": {"parameters": 0, "n_layer": 1, "n_head": 2, "head_dim": 16,
                                             "max_len": 1, "bytes_formula": 0, "bytes_measured": 0},
                         "notes": ""})
    assert "| 512 | 2 |" in text and f"{n * (n + 1) // 2} / {2 * n - 1} / {n * n}" in text
    decode, _ = run.decode_rows(sizes, torch.device("cpu"))
    result = {"attention": run.attention_rows(sizes, torch.device("cpu")), "decode": decode, "bf16": [row]}
    run.plot(result, tmp_path / "bf16.png")  # with a fourth panel for the bfloat16 rows
    assert (tmp_path / "bf16.png").stat().st_size > 1000
