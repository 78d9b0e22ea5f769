import torch

from attnlab import masks


def test_causal_allowed_is_lower_triangle_with_diagonal():
    allowed = masks.causal_allowed(4)
    assert allowed.dtype == torch.bool and allowed.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(allowed[i, j]) == (j <= i)


def test_strictly_causal_blocks_the_diagonal_and_leaves_row_zero_empty():
    strict = masks.strictly_causal_allowed(4)
    assert not strict.diagonal().any()
    assert not strict[0].any()
    assert torch.equal(strict | torch.eye(4, dtype=torch.bool), masks.causal_allowed(4))


def test_index_form_equals_tril_for_square_and_aligns_lower_right_otherwise():
    assert torch.equal(masks.causal_allowed_from_indices(5, 5), masks.causal_allowed(5))
    # 2 new queries on top of 3 cached keys: they are positions 3 and 4 of 5
    rect = masks.causal_allowed_from_indices(2, 5)
    assert rect.tolist() == [[True, True, True, True, False], [True] * 5]


def test_additive_mask_is_zero_where_allowed_and_minus_inf_elsewhere():
    allowed = masks.causal_allowed(3)
    bias = masks.additive_mask(allowed)
    assert torch.equal(bias[allowed], torch.zeros(6))
    assert torch.isneginf(bias[~allowed]).all()
    finite = masks.additive_mask(allowed, torch.float16, torch.finfo(torch.float16).min)
    assert finite.dtype == torch.float16 and finite[0, 1].item() == -65504.0


def test_to_blocked_and_back():
    allowed = masks.causal_allowed(5)
    assert torch.equal(masks.to_blocked(allowed), ~allowed)
    assert torch.equal(masks.to_allowed(masks.to_blocked(allowed)), allowed)
