"""The backward pass of ring attention (attnlab/ring_backward.py) on gloo CPU processes: the
gradients of every shard equal autograd of SDPA on the whole sequence, every rank computes the
same tiles in backward as in forward (chapter 9's formula), and a tensor that arrived by irecv
carries no autograd history."""

import pytest

from attnlab.ring import LAYOUTS, expected_tiles
from attnlab.ring_backward import BackwardJob, accumulator_route, run_ring_backward
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
