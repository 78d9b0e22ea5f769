"""The graded tasks of exercises 8 and 9 grade what they claim: the references agree with the
chapters' code (mask builder, SDPA's enable_gqa, the ring's formula and schedule, the online
softmax of ring attention), every correct formulation gets full marks, every known mistake
loses points with its own message in every language, a stub scores zero, a fixed answer fails.
"""

import pytest
import torch

from attnlab.mask_builder import build_mask
from learner_copies import as_learner, learner_copy, learner_tasks
import torch.distributed as dist
import torch.nn.functional as F

from attnlab import grader, i18n
from attnlab.blocked import finish_states, start_states, attend_tiles
from attnlab.exercises import all_tasks, ch8, ch9
from attnlab.exercises.ch9 import passing
from attnlab.exercises.ch9.passing import _cpu_buffers
from attnlab.mask_builder import and_masks, batch_mask, keep_from_lengths, mask_mod, padding_mod
from attnlab.ring import expected_tiles
from attnlab.rope import apply_rope

TASKS = learner_tasks({task_id: task for task_id, task in all_tasks().items() if task_id.startswith(("ch8.", "ch9."))})
_SHARD, _TILES = TASKS["ch9.shard_positions"].reference, TASKS["ch9.tiles_per_step"].reference  # copied before grading


def keys(result):
    return {f.problem.key for f in result.failures if not f.drawn}  # the task's cases


def test_nine_tasks_in_two_exercises_with_titles_and_messages():
    assert list(TASKS) == ["ch8.padded_causal_mask", "ch8.document_mask", "ch8.sliding_window_mask",
                           "ch8.gqa_attention", "ch8.rope_decode_step", "ch9.shard_positions", "ch9.tiles_per_step", "ch9.fold_block",
                           "ch9.pass_on"]
    assert {task.exercise for task in TASKS.values()} == {"08-masks-in-real-models", "09-ring-attention"}
    catalog = i18n.catalog()
    for task_id, task in TASKS.items():
        assert f"grader.task.{task_id}" in catalog
        assert all(f"grader.mutant.{task_id}.{name}" in catalog for name in task.mutants)


def test_the_mask_references_equal_the_chapters_mask_builder():
    for case in TASKS["ch8.padded_causal_mask"].make_cases():
        (keep,) = case.args
        lengths = keep.sum(-1).tolist()
        assert torch.equal(keep.cpu(), keep_from_lengths(lengths, keep.size(1), "left"))
        expected = batch_mask(and_masks(mask_mod("causal"), padding_mod(keep)), *keep.shape, device=keep.device)
        assert torch.equal(ch8.padded_causal_mask(keep), expected)
    for T, W in [(12, 3), (5, 5), (4, 1)]:
        assert torch.equal(ch8.sliding_window_mask(T, W), build_mask("sliding_window", T, window=W))


def test_gqa_reference_equals_sdpa_enable_gqa_and_mha_when_every_head_has_its_own_kv():
    for case in TASKS["ch8.gqa_attention"].make_cases():
        q, k, v = case.args
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        assert torch.allclose(ch8.gqa_attention(q, k, v), expected, atol=1e-6)


def test_rope_decode_step_equals_recomputing_the_whole_sequence():
    """Rotate all t + T_new positions at once, attend with is_causal=True, keep the last T_new rows."""
    generator = torch.Generator().manual_seed(0)
    for B, H, t, T_new, d in [(2, 3, 4, 1, 8), (1, 2, 7, 3, 16), (2, 1, 1, 2, 4)]:
        q, k, v = torch.randn(3, B, H, t + T_new, d, generator=generator).unbind(0)
        positions = torch.arange(t + T_new)
        full = F.scaled_dot_product_attention(apply_rope(q, positions), apply_rope(k, positions), v, is_causal=True)
        k_cache = apply_rope(k[:, :, :t], positions[:t])
        out, k_all, v_all = ch8.rope_decode_step(q[:, :, t:], k[:, :, t:], v[:, :, t:], k_cache, v[:, :, :t])
        assert torch.allclose(out, full[:, :, t:], atol=1e-5)
        assert torch.allclose(k_all, apply_rope(k, positions), atol=1e-6) and torch.equal(v_all, v)


def test_on_every_case_the_rope_reference_equals_recomputation_from_the_unrotated_keys():
    """The cases' caches hold rotated keys: rotating them back by -p gives the plain keys to recompute from."""
    for case in TASKS["ch8.rope_decode_step"].make_cases():
        q_new, k_new, v_new, k_cache, v_cache = case.args
        t, T_new = k_cache.size(2), q_new.size(2)
        assert t >= 1 and T_new in (1, 3)
        positions = torch.arange(t + T_new, device=q_new.device)
        k = torch.cat([apply_rope(k_cache, -positions[:t]), k_new], dim=2)  # [B, H, t + T_new, d], unrotated
        q = torch.cat([torch.zeros_like(k_cache), q_new], dim=2)  # the old queries do not matter
        full = F.scaled_dot_product_attention(apply_rope(q, positions), apply_rope(k, positions),
                                              torch.cat([v_cache, v_new], dim=2), is_causal=True)
        assert torch.allclose(ch8.rope_decode_step(*case.args)[0], full[:, :, t:], atol=1e-5)


def test_tile_counts_equal_the_chapters_formula_and_the_worked_example():
    for T, P, layout, block in ch9.TILE_CASES:
        assert ch9.tiles_per_step(T, P, layout, block) == expected_tiles(T, P, layout, block)
    assert ch9.tiles_per_step(16, 4, "contiguous", 2) == [[3, 0, 0, 0], [3, 4, 0, 0], [3, 4, 4, 0], [3, 4, 4, 4]]


def test_folding_every_block_of_a_ring_gives_softmax_attention():
    """fold_block over the ring's arrival order, then acc / l, equals SDPA with the causal mask."""
    torch.manual_seed(0)
    T, P, d = 24, 3, 8
    q, k, v = torch.randn(3, 2, T, d).unbind(0)  # [H, T, d]
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    positions = ch9.shard_positions(T, P, "zigzag")
    for rank in range(P):
        mine = positions[rank]
        m = torch.full((2, len(mine)), float("-inf"))
        l, acc = torch.zeros(2, len(mine)), torch.zeros(2, len(mine), d)
        for step in range(P):
            theirs = positions[(rank - step) % P]
            scores = q[:, mine] @ k[:, theirs].transpose(-2, -1) / d ** 0.5
            scores = scores.masked_fill(theirs[None, :] > mine[:, None], float("-inf"))
            m, l, acc = ch9.fold_block(m, l, acc, scores, v[:, theirs])
        assert torch.allclose(acc / l[..., None], expected[:, mine], atol=1e-5)
        states = start_states(q[:, mine], d, 4)  # the chapter's ring code on the same blocks
        for step in range(P):
            theirs = positions[(rank - step) % P]
            attend_tiles(states, q[:, mine], k[:, theirs], v[:, theirs], mine, theirs, 4)
        assert torch.allclose(finish_states(states, q.dtype), expected[:, mine], atol=1e-5)


def test_the_worked_example_of_the_fold():
    m, l, acc = ch9.fold_block(torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([[1.0, -1.0]]),
                               torch.tensor([[3.0, float("-inf")]]), torch.tensor([[2.0, 0.0], [5.0, 5.0]]))
    assert m.item() == 3.0
    assert torch.allclose(l, torch.tensor([2 * torch.exp(torch.tensor(-2.0)).item() + 1]))
    assert [round(x, 4) for x in acc[0].tolist()] == [2.1353, -0.1353]


def test_a_list_of_lists_is_accepted_where_a_tensor_is_asked_and_the_other_way_round():
    assert grader.grade("ch9.shard_positions", lambda T, P, layout: _SHARD(T, P, layout).tolist()).passed
    assert grader.grade("ch9.tiles_per_step", lambda *args: torch.tensor(_TILES(*args))).passed


def test_any_integer_dtype_or_numpy_array_is_accepted_for_positions_and_tile_counts():
    np = pytest.importorskip("numpy")
    assert grader.grade("ch9.shard_positions", lambda *args: _SHARD(*args).int()).passed
    assert grader.grade("ch9.shard_positions", lambda *args: _SHARD(*args).numpy()).passed
    assert grader.grade("ch9.tiles_per_step", lambda *args: np.array(_TILES(*args))).passed
    floats = grader.grade("ch9.shard_positions", lambda *args: _SHARD(*args).float())
    assert floats.points == 0 and keys(floats) == {"grader.dtype"}


# ---- task 4 of exercise 9 runs on real gloo processes


def blocking_pass_on(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    dist.send(k, (rank + 1) % P, group)  # every rank waits here for a receive nobody has posted
    dist.send(v, (rank + 1) % P, group)
    dist.recv(k_next, (rank - 1) % P, group)
    dist.recv(v_next, (rank - 1) % P, group)
    return k_next, v_next, []


def pass_on_with_a_typo(k, v, group=None):
    return k_nxt, v, []  # noqa: F821 - the learner's typo


def test_a_deadlocked_pass_on_is_stopped_and_named_and_an_error_inside_a_rank_is_shown(monkeypatch):
    # Every case of a deadlocked ring waits out the ring's limit: 8 s in the course, 3 s here (the
    # same mechanism; four cases took 37 s of the suite with 8 s). Only the deadlock runs under it.
    course_limit = passing.RING_TIMEOUT_S
    with monkeypatch.context() as patch:
        patch.setattr(passing, "RING_TIMEOUT_S", 3.0)
        result = grader.grade("ch9.pass_on", blocking_pass_on)
    assert result.points == 0
    assert i18n.tr("ch9.ex_deadlock", seconds=3.0) in result.text()
    assert passing.RING_TIMEOUT_S == course_limit  # put back
    typo = grader.grade("ch9.pass_on", pass_on_with_a_typo)
    assert typo.points == 0 and "NameError: name 'k_nxt' is not defined" in typo.text()


def pass_on_on_the_cpu(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.zeros(k.shape, dtype=k.dtype), torch.zeros(v.shape, dtype=v.dtype)  # no device=
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def test_pass_on_buffers_on_the_cpu_are_found_without_a_gpu_and_nothing_else_is():
    """pass_on runs once in the grader's process with k, v on meta and a stand-in for torch.distributed:
    a buffer made without device= shows there; the right ways (empty_like, new_empty, blocking calls,
    receives first), a deadlock and a typo do not."""
    assert _cpu_buffers(pass_on_on_the_cpu)
    for fn in (ch9.pass_on, *ch9.PASS_ON.alternatives, *ch9.PASS_ON.mutants.values(), blocking_pass_on,
               pass_on_with_a_typo):
        assert not _cpu_buffers(fn), fn.__name__


@pytest.mark.parametrize("lang", ["en", "de", "zh"])
def test_the_deadlock_message_fits_the_graders_limit_for_a_raised_message(lang):
    # judge.failed_call cuts an exception's message after 160 characters: the advice must survive
    message = i18n.tr("ch9.ex_deadlock", lang=lang, seconds=ch9.RING_TIMEOUT_S)
    assert len(message) <= 160 and "rank - 1" in message
