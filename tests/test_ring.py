"""Ring attention on real gloo process groups (CPU), its counts and its errors."""

import ast
import inspect
import textwrap

import nbformat
import pytest
import torch
import torch.distributed as dist

import attnlab
from attnlab import ring
from attnlab.blocked import attend_tiles, finish_states, start_states
from attnlab.ring import (LAYOUTS, RingJob, RingStats, StepStats, expected_tiles, pass_on, ring_schedule, run_ring,
                          shard_positions)

T, BLOCK, HEADS, D = 32, 2, 2, 8


def jobs():
    return ([RingJob(T=T, layout=layout, causal=causal, block=BLOCK, heads=HEADS, d=D, seed=7,
                     memory=layout == "zigzag" and causal) for layout in LAYOUTS for causal in (True, False)]
            + [RingJob(T=T, layout="zigzag", block=BLOCK, heads=HEADS, d=D, method="allgather", seed=7, memory=True)])


@pytest.fixture(scope="module", params=[2, 4], ids=lambda P: f"P={P}")
def results(request):
    P = request.param
    return P, run_ring(jobs(), P)


def test_ring_attention_equals_sdpa_for_every_layout_causal_or_not(results):
    P, done = results
    for result in done:
        assert len(result.ranks) == P
        for report in result.ranks:
            assert report.max_abs_diff < 1e-5, (result.job, report.rank)


def test_every_rank_counts_the_work_of_the_closed_form(results):
    P, done = results
    for result in done:
        job = result.job
        if job.method != "ring":
            continue
        formula = expected_tiles(T, P, job.layout, BLOCK, job.causal)
        n = T // P // BLOCK
        for report in result.ranks:
            tiles = [s["full"] + s["diagonal"] for s in report.steps]
            assert tiles == formula[report.rank], (job.layout, job.causal, report.rank)
            assert [s["full"] + s["diagonal"] + s["skipped"] for s in report.steps] == [n * n] * P
            assert report.score_flops == sum(tiles) * 2 * BLOCK * BLOCK * D * HEADS
            assert [s["source"] for s in report.steps] == [(report.rank - t) % P for t in range(P)]
            kv_block = 2 * HEADS * (T // P) * D * 4  # K and V of one shard, float32
            assert [s["bytes_sent"] for s in report.steps] == [kv_block] * (P - 1) + [0]
            assert len(report.timings[0]) == P and len(report.cpu[0]) == P
            assert result.busy_cpu(report.rank) > 0 and result.busy(report.rank) > 0


def test_the_schedule_predicts_what_the_processes_did(results):
    P, done = results
    for result in done:
        job = result.job
        if job.method != "ring":
            continue
        schedule = ring_schedule(T, P, job.layout, BLOCK, job.causal)
        for report in result.ranks:
            for entry, step in zip(schedule[report.rank], report.steps):
                kinds = [kind for kind, _, _ in entry["tiles"]]
                assert (kinds.count("full"), kinds.count("diagonal"), kinds.count("skipped")) == (
                    step["full"], step["diagonal"], step["skipped"])


def test_allgather_does_the_same_work_and_sends_the_same_bytes_but_holds_everything(results):
    P, done = results
    ring_zigzag = next(r for r in done if r.job.method == "ring" and r.job.layout == "zigzag" and r.job.causal)
    gathered = next(r for r in done if r.job.method == "allgather")
    for a, b in zip(ring_zigzag.ranks, gathered.ranks):
        assert a.tiles == b.tiles and a.bytes_sent == b.bytes_sent
        # the ring holds two K/V blocks at a time, the all-gather all P of them
        assert b.peak_bytes - a.peak_bytes >= (P - 2) * a.kv_bytes


def test_contiguous_rank_r_computes_r_plus_one_blocks_and_balanced_layouts_even_work():
    P, n = 4, 8
    whole = expected_tiles(4 * P, P, "contiguous", 4)  # one tile per shard: a tile is a block
    assert [sum(row) for row in whole] == [1, 2, 3, 4]
    for layout in LAYOUTS:
        totals = [sum(row) for row in expected_tiles(P * n * 16, P, layout, 16)]
        if layout == "contiguous":
            assert totals == [r * n * n + n * (n + 1) // 2 for r in range(P)]
        elif layout == "striped":
            assert totals == [P * n * (n + 1) // 2] * P
        else:
            assert totals == [P * n * n // 2 + n // 2] * P
    N = P * n  # tiles along the whole sequence: causal attention computes N(N+1)/2 of them
    assert sum(sum(row) for row in expected_tiles(P * n * 16, P, "zigzag", 16)) == N * (N + 1) // 2
    assert sum(sum(row) for row in expected_tiles(P * n * 16, P, "contiguous", 16)) == N * (N + 1) // 2


def test_layouts_give_every_token_to_exactly_one_rank():
    contiguous, striped, zigzag = (shard_positions(16, 4, layout) for layout in LAYOUTS)
    assert contiguous[1].tolist() == [4, 5, 6, 7]
    assert striped[1].tolist() == [1, 5, 9, 13]
    assert zigzag[1].tolist() == [2, 3, 12, 13]
    for positions in (contiguous, striped, zigzag):
        assert sorted(positions.flatten().tolist()) == list(range(16))
        assert all(row == sorted(row) for row in positions.tolist())


@pytest.mark.parametrize("T_bad, P, layout, match", [
    (10, 4, "contiguous", "10 tokens cannot be cut into 4"),
    (12, 4, "zigzag", "12 tokens cannot be cut into 8"),
    (16, 4, "diagonal", "layout must be one of contiguous, striped, zigzag; got 'diagonal'"),
])
def test_bad_sizes_and_layouts_give_clear_errors_before_any_process_starts(T_bad, P, layout, match):
    with pytest.raises(ValueError, match=match):
        shard_positions(T_bad, P, layout)
    with pytest.raises(ValueError, match=match):
        run_ring([RingJob(T=T_bad, layout=layout)], P)


def test_other_bad_inputs_are_explained_in_the_readers_language():
    with pytest.raises(ValueError, match="P must be at least 1; got 0"):
        run_ring([RingJob(T=16)], 0)
    with pytest.raises(TypeError, match="T must be a whole number; got 16.0"):
        shard_positions(16.0, 2, "contiguous")
    with pytest.raises(ValueError, match="block must be a positive divisor of 8 .*; got 3"):
        expected_tiles(16, 2, "contiguous", 3)
    with pytest.raises(ValueError, match="block must be at least 1; got 0"):
        run_ring([RingJob(T=16, block=0)], 2)  # a block that does not divide S is fine there: ragged tiles
    with pytest.raises(ValueError, match="method must be ring, allgather or pass; got 'broadcast'"):
        run_ring([RingJob(T=16, method="broadcast")], 2)
    with pytest.raises(TypeError, match="non-empty list of RingJob"):
        run_ring([], 2)
    with pytest.raises(TypeError, match="non-empty list of RingJob"):
        run_ring(["contiguous"], 2)
    attnlab.set_language("de")
    try:
        with pytest.raises(ValueError, match="gleiche Teile"):
            shard_positions(10, 4, "striped")
        with pytest.raises(ValueError, match="layout muss eines von contiguous, striped, zigzag sein"):
            shard_positions(16, 4, "Streifen")
    finally:
        attnlab.set_language("en")


def pass_on_that_raises(k, v, group=None):
    raise ArithmeticError("a bug in the caller's pass_on")


def test_an_error_inside_a_rank_is_raised_in_the_caller_with_its_traceback():
    with pytest.raises(RuntimeError, match="(?s)Rank [01] failed:\nTraceback .*in run_jobs.*a bug in the caller's pass_on"):
        run_ring([RingJob(T=8)], 2, timeout_s=60, code={"pass_on": pass_on_that_raises})


@pytest.mark.parametrize("job, error, match", [
    (RingJob(T=16, heads=0), ValueError, "heads must be at least 1; got 0"),
    (RingJob(T=16, d=0), ValueError, "d must be at least 1; got 0"),
    (RingJob(T=16, batch=0), ValueError, "batch must be at least 1; got 0"),
    (RingJob(T=16, repeats=0), ValueError, "repeats must be at least 1; got 0"),
    (RingJob(T=16, seed=-1), ValueError, "seed must be at least 0; got -1"),
    (RingJob(T=16, causal="no"), TypeError, "causal must be True or False; got 'no'"),  # ring.error_flag
])
def test_every_field_of_a_job_is_checked_before_any_process_starts(job, error, match):
    with pytest.raises(error, match=match):
        run_ring([job], 2)


def test_the_flag_message_speaks_the_readers_language():
    attnlab.set_language("zh")
    try:
        with pytest.raises(TypeError, match="keep_output 必须是 True 或 False"):
            run_ring([RingJob(T=16, keep_output=1)], 2)
    finally:
        attnlab.set_language("en")


@pytest.mark.parametrize("timeout_s", [0, -1, "10"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(timeout_s):
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        run_ring([RingJob(T=16)], 2, timeout_s=timeout_s)


def test_a_script_without_a_main_guard_can_call_run_ring(tmp_path):
    # spawn/forkserver run the main script again in every new process; run_ring starts them without it
    import subprocess
    import sys

    script = tmp_path / "my_ring.py"
    script.write_text("from attnlab.ring import RingJob, run_ring\n"
                      "print('ran', [r.max_abs_diff < 1e-5 for r in run_ring([RingJob(T=8, block=2)], 2)[0].ranks])\n")
    root = ring.__file__.replace("/attnlab/ring/__init__.py", "")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran [True, True]\n"  # once: the processes did not run the script again


def defined_in_notebook(name: str) -> str:
    path = ring.__file__.replace("attnlab/ring/__init__.py", "chapters/en/09-ring-attention.ipynb")
    nb = nbformat.read(path, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)


def code_without_docstrings(source: str, name: str) -> str:
    tree = ast.parse(textwrap.dedent(source))
    function = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name)
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


@pytest.mark.parametrize("name", ["shard_positions", "attend_tiles", "pass_on", "ring_attention"])
def test_the_code_taught_in_chapter_9_is_the_code_the_processes_run(name):
    package = inspect.getsource(getattr(ring, name))
    assert code_without_docstrings(defined_in_notebook(name), name) == code_without_docstrings(package, name)


# ---- the caller's own functions on the ring (run_ring(..., code=...))


def ring_attention_without_the_last_step(q, k, v, layout="contiguous", causal=True, block=64, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    positions = shard_positions(P * q.shape[-2], P, layout).to(q.device)
    states = start_states(q, v.shape[-1], block)
    stats = RingStats(rank)
    for step in range(P - 1):  # the bug: one block never gets folded in
        source = (rank - step) % P
        k_next, v_next, requests = pass_on(k, v, group)
        counts = attend_tiles(states, q, k, v, positions[rank], positions[source], block, causal)
        for request in requests:
            request.wait()
        k, v = k_next, v_next
        stats.steps.append(StepStats(source, counts, 0, 0.0, 0.0, 0.0))
    return finish_states(states, q.dtype), stats


def receive_first(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    dist.recv(k_next, (rank - 1) % P, group)  # every rank waits for a block that nobody has sent yet
    dist.recv(v_next, (rank - 1) % P, group)
    dist.send(k, (rank + 1) % P, group)
    dist.send(v, (rank + 1) % P, group)
    return k_next, v_next, []


def test_the_callers_own_functions_run_on_the_ring_and_a_wrong_one_is_caught():
    own = run_ring([RingJob(T=16, block=2)], 2, code=[ring.shard_positions, ring.pass_on, ring.ring_attention])
    assert all(report.max_abs_diff < 1e-5 for report in own[0].ranks)
    broken = run_ring([RingJob(T=16, block=2, causal=False)], 2, code={"ring_attention": ring_attention_without_the_last_step})
    assert all(report.max_abs_diff > 1e-3 for report in broken[0].ranks)
    assert all(len(report.steps) == 1 for report in broken[0].ranks)  # the processes ran the caller's copy


def test_receiving_before_sending_deadlocks_and_the_timeout_ends_it():
    with pytest.raises(RuntimeError, match="did not finish within 3 s. In a ring this is most often a deadlock"):
        run_ring([RingJob(T=16, block=2)], 2, code={"pass_on": receive_first}, timeout_s=3)


def test_code_that_is_not_a_function_is_explained():
    with pytest.raises(TypeError, match="your own functions"):
        run_ring([RingJob(T=16)], 2, code="ring_attention")
    with pytest.raises(TypeError, match="your own functions"):
        run_ring([RingJob(T=16)], 2, code={"pass_on": 3})
    with pytest.raises(TypeError, match="your own functions .*; got 3"):
        run_ring([RingJob(T=16)], 2, code=3)
    with pytest.raises(TypeError, match="your own functions .*; got 'def pass_on"):
        run_ring([RingJob(T=16)], 2, code="def pass_on(k, v, group=None): ...")


def test_a_lambda_is_refused_because_it_has_no_source_of_its_own():
    with pytest.raises(TypeError, match="a lambda has none of its own"):  # ring.error_code_lambda
        run_ring([RingJob(T=16)], 2, code={"pass_on": lambda k, v, group=None: (k, v, [])})


def send_first(k, v, group=None):
    """Chapter 9's claim: the blocking calls in the other order (send, then receive) deadlock on gloo too."""
    import torch.distributed as dist

    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    dist.send(k, (rank + 1) % P, group)
    dist.send(v, (rank + 1) % P, group)
    dist.recv(k_next, (rank - 1) % P, group)
    dist.recv(v_next, (rank - 1) % P, group)
    return k_next, v_next, []


def test_sending_before_receiving_deadlocks_on_gloo_as_well():
    with pytest.raises(RuntimeError, match="did not finish within 1 s. In a ring this is most often a deadlock"):
        run_ring([RingJob(T=16, block=2)], 2, code={"pass_on": send_first}, timeout_s=1)
