"""The blocked backward pass of chapter 11 (attnlab/blocked_backward.py): the gradients by hand
pass gradcheck in float64; the autograd.Function equals autograd of SDPA in float32 for several
sizes, block sizes, heads and a padding mask; it saves O and L, never P; the backward skips the
same tiles as the forward and spends 2.5 times its matrix-product FLOPs."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import attention
from attnlab.blocked_backward import (ByHand, attention_grads, blocked_attention_in, blocked_attention_train,
                                      blocked_backward, blocked_forward, saved_bytes_formula, saved_tensors,
                                      tile_mask)
from attnlab.masks import causal_allowed
from language_checks import assert_message_in_languages
from small_models import small_gpt

TOL = dict(atol=1e-5, rtol=1e-4)


def test_the_gradients_by_hand_pass_gradcheck_and_equal_autograd_in_float64():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 7, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    allowed = causal_allowed(7)
    assert torch.autograd.gradcheck(lambda a, b, c: ByHand.apply(a, b, c, allowed), (q, k, v))
    d_out = torch.randn(2, 7, 4, dtype=torch.float64)
    attention(q, k, v, allowed).backward(d_out)
    for mine, auto in zip(attention_grads(q.detach(), k.detach(), v.detach(), d_out, allowed), (q, k, v)):
        assert torch.allclose(mine, auto.grad)


def test_a_nan_row_makes_every_value_gradient_nan_even_when_the_loss_ignores_it():
    torch.manual_seed(0)
    q, k, v = (torch.randn(5, 4, requires_grad=True) for _ in range(3))
    allowed = causal_allowed(5)
    allowed[2] = False  # row 2 may read nothing: softmax of all -inf is NaN
    out = attention(q, k, v, allowed)
    out[[0, 1, 3, 4]].sum().backward()  # the loss ignores row 2: its dO is 0, and NaN * 0 is NaN
    assert out[2].isnan().all() and v.grad.isnan().all()  # dV = P^T dO sums over every query row
    assert not q.grad.isnan().any() and not k.grad.isnan().any()  # masked_fill's backward zeroes row 2 of dS


@pytest.mark.parametrize("T,block,H", [(13, 4, 3), (32, 8, 2), (7, 16, 1), (40, 7, 2), (1, 4, 1)])
@pytest.mark.parametrize("padding", [False, True])
def test_the_blocked_function_equals_autograd_of_sdpa(T, block, H, padding):
    torch.manual_seed(T)
    q, k, v = torch.randn(3, 2, H, T, 8).unbind(0)
    d_out = torch.randn(2, H, T, 8)
    keep = None
    if padding:
        keep = torch.ones(2, T, dtype=torch.bool)
        keep[1, max(1, T - 3):] = False  # right padding: every query still reads key 0
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    if keep is None:
        ref = F.scaled_dot_product_attention(*ref_in, is_causal=True)
    else:
        ref = F.scaled_dot_product_attention(*ref_in, attn_mask=causal_allowed(T) & keep[:, None, None, :])
    ref.backward(d_out)
    mine_in = [t.clone().requires_grad_() for t in (q, k, v)]
    out = blocked_attention_train(*mine_in, block=block, keep=keep)
    out.backward(d_out)
    assert torch.allclose(out, ref, **TOL)
    for mine, auto in zip(mine_in, ref_in):
        assert torch.allclose(mine.grad, auto.grad, **TOL)


def test_fewer_queries_than_keys_and_no_mask_too():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    for causal in (True, False):
        ref_in, mine_in = [[t.clone().requires_grad_() for t in (q, k, v)] for _ in range(2)]
        mask = torch.ones(5, 12, dtype=torch.bool).tril(diagonal=7) if causal else None
        F.scaled_dot_product_attention(*ref_in, attn_mask=mask).sum().backward()
        blocked_attention_train(*mine_in, block=4, causal=causal).sum().backward()
        assert all(torch.allclose(a.grad, b.grad, **TOL) for a, b in zip(mine_in, ref_in))


def test_it_saves_o_and_l_where_explicit_attention_saves_p():
    B, H, T, d = 2, 3, 24, 8
    q, k, v = (torch.randn(B, H, T, d, requires_grad=True) for _ in range(3))
    _, explicit = saved_tensors(attention, q, k, v, causal_allowed(T))
    _, blocked = saved_tensors(blocked_attention_train, q, k, v, 8)
    p_bytes, ol_bytes = saved_bytes_formula(B, H, T, d)
    assert [(shape, dtype) for shape, dtype, _ in blocked] == [((B, H, T, d), torch.float32), ((B, H, T), torch.float32)]
    assert sum(n for *_, n in blocked) == ol_bytes
    assert ((B, H, T, T), torch.float32, p_bytes) in explicit


def test_the_formula_counts_l_in_the_dtype_blocked_attention_keeps_it_in():
    B, H, T, d = 1, 2, 16, 4
    for dtype in (torch.float64, torch.bfloat16):
        q, k, v = (torch.randn(B, H, T, d, dtype=dtype, requires_grad=True) for _ in range(3))
        _, blocked = saved_tensors(blocked_attention_train, q, k, v, 8)
        assert sum(n for *_, n in blocked) == saved_bytes_formula(B, H, T, d, element_size=q.element_size())[1]


def test_the_backward_skips_the_forward_tiles_and_costs_two_and_a_half_times_its_flops():
    T, block = 64, 16
    q, k, v, d_out = torch.randn(4, 1, 2, T, 16).unbind(0)
    out, lse, forward = blocked_forward(q, k, v, block)
    *_, backward = blocked_backward(q, k, v, out, lse, d_out, block)
    n = T // block
    assert (backward.full, backward.diagonal, backward.skipped) == (forward.full, forward.diagonal, forward.skipped)
    assert backward.computed == n * (n + 1) // 2 and backward.computed / n**2 == (T + block) / (2 * T)
    assert backward.matmul_flops * 2 == forward.matmul_flops * 5


def test_the_logsumexp_is_the_row_logsumexp_of_the_scores():
    q, k, v = torch.randn(3, 1, 1, 10, 4).unbind(0)
    _, lse, _ = blocked_forward(q, k, v, block=3)
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~causal_allowed(10), float("-inf"))
    assert torch.allclose(lse, scores.logsumexp(dim=-1), **TOL)


@pytest.mark.parametrize("overrides", [{}, {"n_kv_head": 2}, {"n_kv_head": 1}], ids=["MHA", "GQA", "MQA"])
def test_a_training_step_of_the_gpt_with_blocked_attention_gives_the_same_loss_and_gradients(overrides):
    model = small_gpt(**overrides).train()  # shared K/V heads: repeated per group, dK and dV summed by autograd
    idx = torch.randint(50, (2, 20), generator=torch.Generator().manual_seed(0))
    loss = model(idx[:, :-1], idx[:, 1:])[1]
    loss.backward()
    sdpa_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with blocked_attention_in(model, block=8):
        blocked_loss = model(idx[:, :-1], idx[:, 1:])[1]
        blocked_loss.backward()
    assert torch.allclose(loss, blocked_loss, **TOL)
    assert all(torch.allclose(a, p.grad, **TOL) for a, p in zip(sdpa_grads, model.parameters()))
    assert "attend" not in vars(model.blocks[0].attn)  # the patch is gone after the with block


def test_bad_inputs_get_clear_messages():
    q = torch.randn(1, 2, 6, 4)
    assert_message_in_languages(ValueError, lambda: blocked_attention_train(q, q, q, keep=torch.ones(1, 5).bool()),
                                {"en": ["keep", "(1, 6)", "(1, 5)"], "de": ["keep", "Padding-Key"]})
    model = small_gpt(window=4)
    with pytest.raises(ValueError, match="window=4"):
        with blocked_attention_in(model):
            pass


def test_wrong_tensors_get_clear_messages_in_every_language():
    q = torch.randn(1, 2, 6, 4)
    out, lse, _ = blocked_forward(q, q, q, 4)
    assert_message_in_languages(TypeError, lambda: blocked_forward(q.numpy(), q, q, 4),
                                {"en": ["q", "torch tensor", "from_numpy"], "de": ["Torch-Tensor"], "zh": ["torch 张量"]})
    assert_message_in_languages(TypeError, lambda: blocked_attention_train(q, q.double(), q.long()),
                                {"en": ["k float64", "v int64", ".float()"], "de": ["Gleitkomma-Tensoren"],
                                 "zh": ["浮点张量"]})
    assert_message_in_languages(TypeError, lambda: blocked_forward(q, q, q, 4, "yes"),
                                {"en": ["causal", "True or False", "'yes'"], "de": ["True oder False"], "zh": ["True 或 False"]})
    assert_message_in_languages(ValueError, lambda: blocked_backward(q, q, q, out, lse, q[..., :5, :], 4),
                                {"en": ["(1, 2, 6, 4)", "d_out (1, 2, 5, 4)", "blocked_forward"],
                                 "de": ["blocked_forward"], "zh": ["blocked_forward"]})
    assert_message_in_languages(ValueError, lambda: blocked_backward(q, q, q, out, lse[..., :-1], q, 4),
                                {"en": ["lse (1, 2, 5)"]})
    assert_message_in_languages(ValueError, lambda: blocked_backward(q, q, q, out, lse, q, 0),
                                {"en": ["block", "at least 1"]})


def test_the_taught_helpers_refuse_what_they_cannot_take():
    q = torch.randn(1, 2, 6, 4)
    assert_message_in_languages(ValueError, lambda: attention_grads(q, q, q, q, causal_allowed(6).float()),
                                {"en": ["allowed", "bool", "(6, 6)", "float32"], "de": ["darf lesen"],
                                 "zh": ["可以读取"]})
    assert_message_in_languages(ValueError, lambda: attention_grads(q, q, q, q[..., :3]),
                                {"en": ["d_out", "(1, 2, 6, 4)", "(1, 2, 6, 3)"], "de": ["eingehende Gradient"],
                                 "zh": ["上游梯度"]})
    assert_message_in_languages(ValueError, lambda: saved_tensors(attention, q, q, q, causal_allowed(6)),
                                {"en": ["requires_grad=True"], "de": ["requires_grad=True"], "zh": ["requires_grad=True"]})
    assert_message_in_languages(TypeError, lambda: saved_tensors(q, q), {"en": ["function first"]})
    assert_message_in_languages(ValueError, lambda: saved_bytes_formula(-1, 2, 8, 4), {"en": ["B", "at least 1"]})
    assert_message_in_languages(TypeError, lambda: saved_bytes_formula(1, 2, 8.5, 4), {"en": ["T", "whole number"]})
    assert_message_in_languages(ValueError, lambda: tile_mask("upper", torch.arange(4), torch.arange(4), None),
                                {"en": ["full", "diagonal", "'upper'"], "de": ["Kachel"], "zh": ["分块"]})
    with pytest.raises(TypeError, match="torch.nn.Module"):
        with blocked_attention_in("gpt"):
            pass
    with pytest.raises(ValueError, match="block"):
        with blocked_attention_in(small_gpt(), block=0):
            pass


def test_odd_shapes_float64_and_non_contiguous_inputs_match_sdpa():
    torch.manual_seed(0)
    for dtype, T, block, d, d_v, transposed in [(torch.float64, 13, 5, 3, 3, False), (torch.float32, 9, 4, 1, 6, True)]:
        shape = (1, T, 2, d) if transposed else (1, 2, T, d)
        q, k = (torch.randn(*shape, dtype=dtype) for _ in range(2))
        v = torch.randn(*shape[:-1], d_v, dtype=dtype)
        if transposed:  # [B, T, H, d] -> [B, H, T, d]: a view, not contiguous
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        q, k, v = (x.requires_grad_() if x.is_leaf else x.detach().requires_grad_() for x in (q, k, v))
        d_out = torch.randn(1, 2, T, d_v, dtype=dtype)
        blocked_attention_train(q, k, v, block).backward(d_out)
        mine = [x.grad.clone() for x in (q, k, v)]
        for x in (q, k, v):
            x.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(d_out)
        assert mine[0].dtype == dtype and all(torch.allclose(a, x.grad, **TOL) for a, x in zip(mine, (q, k, v)))


def test_left_padding_gives_zero_rows_and_finite_gradients_as_sdpa_does():
    """A query that may read no key (left padding, issue 32 I4): L = +inf as FlashAttention-2 stores it,
    output 0 and no NaN in any gradient, within tolerance of SDPA (which returns zero rows there)."""
    torch.manual_seed(3)
    B, H, T, block = 2, 2, 11, 4
    q, k, v, d_out = torch.randn(4, B, H, T, 8).unbind(0)
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[0, :5] = False  # queries 0 to 4 of sequence 0 read nothing: one whole tile and part of the next
    out, lse, _ = blocked_forward(q, k, v, block, True, keep)
    assert lse[0, :, :5].isposinf().all() and lse[0, :, 5:].isfinite().all() and (out[0, :, :5] == 0).all()
    ref_in, mine_in = ([t.clone().requires_grad_() for t in (q, k, v)] for _ in range(2))
    ref = F.scaled_dot_product_attention(*ref_in, attn_mask=causal_allowed(T) & keep[:, None, None, :])
    ref.backward(d_out)
    mine = blocked_attention_train(*mine_in, block=block, keep=keep)
    mine.backward(d_out)
    assert torch.allclose(mine, ref, **TOL)
    for a, b in zip(mine_in, ref_in):
        assert a.grad.isfinite().all() and torch.allclose(a.grad, b.grad, **TOL)
    assert (mine_in[0].grad[0, :, :5] == 0).all()  # dQ of a row that reads nothing is exactly 0


def test_gradcheck_passes_in_float64_because_the_sums_follow_the_inputs_dtype():
    """float64 in, float64 sums (torch.promote_types(dtype, float32)), so gradcheck's finite differences work."""
    from attnlab.blocked_backward import BlockedAttention, tile_grads

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    keep = torch.ones(1, 6, dtype=torch.bool)
    keep[0, :2] = False
    for mask in (None, keep):
        assert torch.autograd.gradcheck(lambda a, b, c: BlockedAttention.apply(a, b, c, 4, True, mask), (q, k, v))
    out, lse, _ = blocked_forward(q, k, v, 4)
    assert out.dtype == lse.dtype == torch.float64
    D = (out * out).sum(dim=-1)
    assert all(g.dtype == torch.float64 for g in tile_grads(q, k, v, out, lse, D))  # no "double != float"
    half = [x.detach().to(torch.bfloat16) for x in (q, k, v)]
    assert blocked_forward(*half, 4)[1].dtype == torch.float32  # half precision still sums in float32


def test_blocked_attention_in_runs_the_function_it_is_given():
    """Chapter 11 passes the BlockedAttention of its cell (function=...), so an edit of the cell reaches the model."""
    from attnlab.blocked_backward import BlockedAttention

    class NoValueGradient(BlockedAttention):
        @staticmethod
        def backward(ctx, d_out):
            dq, dk, dv, *rest = BlockedAttention.backward(ctx, d_out)
            return dq, dk, torch.zeros_like(dv), *rest

    model, idx = small_gpt(), torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(0))
    grads = {}
    for name, function in (("package", None), ("given", BlockedAttention), ("broken", NoValueGradient)):
        model.zero_grad()
        with blocked_attention_in(model, block=4, function=function):
            model(idx[:, :-1], idx[:, 1:])[1].backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads["package"], grads["given"]))
    assert not all(torch.allclose(a, b, **TOL) for a, b in zip(grads["package"], grads["broken"]))
    for wrong in (BlockedAttention.apply, torch.nn.Linear(2, 2), "BlockedAttention"):
        assert_message_in_languages(TypeError, lambda: blocked_attention_in(model, function=wrong).__enter__(),
                                    {"en": ["torch.autograd.Function", "BlockedAttention.apply"],
                                     "de": ["Klasse selbst"], "zh": ["传类本身"]})
