"""The backward pass of ring attention (attnlab/ring_backward.py) on gloo CPU processes: the
gradients of every shard equal autograd of SDPA on the whole sequence, every rank computes the
same tiles in backward as in forward (chapter 9's formula), and a tensor that arrived by irecv
carries no autograd history."""

import math

import pytest
import torch
import torch.distributed as dist

from attnlab.blocked_backward import tile_grads
from attnlab.ring import LAYOUTS, expected_tiles
from attnlab.ring_backward import (BackwardJob, accumulator_route, pass_tensors, ring_backward, run_ring_backward,
                                   shard_backward)
from language_checks import assert_message_in_languages

P, T, BLOCK = 4, 32, 4


@pytest.fixture(scope="module")
def results():
    return run_ring_backward([BackwardJob(T=T, layout=layout, block=BLOCK) for layout in LAYOUTS], P)


def test_every_shard_gets_the_gradients_of_sdpa_on_the_whole_sequence(results):
    assert all(report.grads_match and report.out_matches for job in results for report in job)


def test_backward_tiles_equal_forward_tiles_and_the_formula(results):
    for layout, job in zip(LAYOUTS, results):
        formula = [sum(row) for row in expected_tiles(T, P, layout, BLOCK)]
        assert [r.forward_tiles for r in job] == [r.backward_tiles for r in job] == formula, layout
    contiguous = [r.backward_tiles for r in results[0]]
    assert contiguous == sorted(contiguous) and contiguous[0] < contiguous[-1]  # the last rank works most
    assert len({r.backward_tiles for r in results[2]}) == 1  # zigzag: balanced


def test_kv_travel_in_the_same_order_in_backward_and_received_tensors_have_no_history(results):
    for report in results[0]:
        assert report.trace == [(step, (report.rank - step) % P) for step in range(P)]
        assert report.received_requires_grad is False


def test_the_accumulator_of_a_shard_visits_every_rank_and_comes_home():
    assert accumulator_route(4, 1) == [1, 2, 3, 0, 1]
    assert accumulator_route(1, 0) == [0]


def test_a_wrong_job_list_is_refused_clearly():
    assert_message_in_languages(TypeError, lambda: run_ring_backward([], 2),
                                {"en": ["BackwardJob", "[]"], "de": ["BackwardJob", "nicht leere"]})


def test_the_route_refuses_a_rank_outside_the_ring():
    assert_message_in_languages(ValueError, lambda: accumulator_route(4, 7), {"en": ["source", "0", "3", "7"]})
    assert_message_in_languages(TypeError, lambda: accumulator_route(2.0, 1), {"en": ["P", "whole number"]})


def test_one_rank_runs_the_backward_alone():
    [[report]] = run_ring_backward([BackwardJob(T=8, block=4)], 1)
    assert report.grads_match and report.out_matches and report.received_requires_grad is None
    assert report.forward_tiles == report.backward_tiles == 3


def tile_grads_without_the_scale_of_dk(q, k, v, d_out, lse, D, blocked=None):
    from attnlab import blocked_backward

    dq, dk, dv = blocked_backward.tile_grads(q, k, v, d_out, lse, D, blocked)
    return dq, dk * math.sqrt(q.size(-1)), dv  # the bug: dK without its 1 / sqrt(d)


def ring_backward_without_the_last_hop(q, k, v, out, lse, d_out, positions, block, causal=True, group=None,
                                       trace=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    D = (d_out.float() * out.float()).sum(dim=-1)
    dq = torch.zeros(q.shape, dtype=torch.float32)
    dk_acc, dv_acc = torch.zeros(k.shape, dtype=torch.float32), torch.zeros(v.shape, dtype=torch.float32)
    for step in range(P):
        source = (rank - step) % P
        share_dq, share_dk, share_dv, _ = shard_backward(q, k, v, d_out, lse, D, positions[rank], positions[source],
                                                         block, causal)
        dq, dk_acc, dv_acc = dq + share_dq, dk_acc + share_dk, dv_acc + share_dv
        if step < P - 1:
            k, v, dk_acc, dv_acc = pass_tensors([k, v, dk_acc, dv_acc], group)
    return dq, dk_acc, dv_acc, 0  # the bug: the accumulators never go home


def test_the_processes_run_the_callers_own_functions():
    """run_ring_backward(code=...) runs chapter 11's cells in the processes (issue 32, point 7): a broken
    tile_grads or ring_backward given there makes the ranks report wrong gradients. About 1 s."""
    jobs = [BackwardJob(T=16, layout="striped", block=4)]
    [own] = run_ring_backward(jobs, 2, code=[tile_grads, ring_backward])
    assert all(r.grads_match for r in own)
    for broken in ({"tile_grads": tile_grads_without_the_scale_of_dk},
                   {"ring_backward": ring_backward_without_the_last_hop}):
        [reports] = run_ring_backward(jobs, 2, code=broken)
        assert not any(r.grads_match for r in reports), broken
        assert all(r.out_matches for r in reports)  # the forward is untouched
    assert_message_in_languages(TypeError, lambda: run_ring_backward(jobs, 2, code=3), {"en": ["code"]})
