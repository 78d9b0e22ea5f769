"""Padding, packed documents and position ids on the course's small GPT."""

import pytest
import torch

from attnlab.batching import document_leaks, forward_with_mask, pack, positions_in_documents
from attnlab.gpt import GPT, GPTConfig
from attnlab.mask_builder import and_masks, batch_mask, document_mod, keep_from_lengths, mask_mod, padding_mod
from small_models import small_gpt

CAUSAL = mask_mod("causal")


small = small_gpt


@pytest.mark.parametrize("options", [{}, {"positions": "rope", "n_kv_head": 2}])
def test_forward_with_the_causal_mask_is_the_model_itself(options):
    model = small(**options)
    idx = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        mine = forward_with_mask(model, idx, batch_mask(CAUSAL, 2, 10), torch.arange(10).expand(2, 10))
        assert torch.allclose(mine, model(idx)[0], atol=1e-5)


def test_pack_and_positions_restart_per_document():
    tokens, docs, positions = pack([[5, 6, 7], [8], [9, 10]])
    assert tokens.tolist() == [[5, 6, 7, 8, 9, 10]] and docs.tolist() == [[0, 0, 0, 1, 2, 2]]
    assert positions.tolist() == [[0, 1, 2, 0, 0, 1]]
    assert torch.equal(positions_in_documents(docs), positions)
    with pytest.raises(ValueError, match="empty"):
        pack([[1], []])


@torch.no_grad()
def test_without_a_document_mask_later_documents_read_earlier_ones():
    model = small()
    tokens, docs, positions = pack([[3, 4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14]])
    T = tokens.size(1)
    causal_only = batch_mask(CAUSAL, 1, T)
    per_document = batch_mask(and_masks(CAUSAL, document_mod(docs)), 1, T)
    leaky = document_leaks(lambda t: forward_with_mask(model, t, causal_only, positions), tokens, docs, 50)
    tight = document_leaks(lambda t: forward_with_mask(model, t, per_document, positions), tokens, docs, 50)
    assert leaky[0] == 0.0 and leaky[1] > 1e-4 and leaky[2] > 1e-4  # document 0 has nothing before it
    assert tight == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("options", [{}, {"positions": "rope"}])
@torch.no_grad()
def test_packed_with_mask_and_restarted_positions_equals_separate_runs(options):
    model = small(**options)
    documents = [[3, 4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14]]
    tokens, docs, positions = pack(documents)
    allowed = batch_mask(and_masks(CAUSAL, document_mod(docs)), 1, tokens.size(1))
    packed = forward_with_mask(model, tokens, allowed, positions)[0]
    alone = torch.cat([model(torch.tensor([doc]))[0][0] for doc in documents])
    assert torch.allclose(packed, alone, atol=1e-5)
    running = forward_with_mask(model, tokens, allowed, torch.arange(tokens.size(1))[None])[0]
    if options:  # RoPE scores depend only on distances: restarting changes nothing inside a document
        assert torch.allclose(running, alone, atol=1e-4)
    else:  # learned positions: document 2 would sit at positions 9.. instead of 0..
        assert not torch.allclose(running[9:], alone[9:], atol=1e-3)


@pytest.mark.parametrize("side", ["right", "left"])
@torch.no_grad()
def test_a_padded_batch_gives_every_row_its_unpadded_logits(side):
    model = small()
    rows = [[3, 4, 5, 6, 7, 8], [9, 10, 11], [12]]
    T = 6
    keep = keep_from_lengths([len(r) for r in rows], T, side)
    idx = torch.zeros(3, T, dtype=torch.long).masked_scatter(keep, torch.tensor([t for r in rows for t in r]))
    positions = (keep.cumsum(-1) - 1).clamp(min=0)  # count real tokens only (left padding shifts them)
    logits = forward_with_mask(model, idx, batch_mask(and_masks(CAUSAL, padding_mod(keep)), 3, T), positions)
    assert not torch.isnan(logits).any()  # pad queries read nothing: SDPA gives 0, not NaN
    for b, row in enumerate(rows):
        assert torch.allclose(logits[b][keep[b]], model(torch.tensor([row]))[0][0], atol=1e-5)


def test_positions_in_documents_takes_one_row_and_explains_wrong_ids():
    assert positions_in_documents(torch.tensor([0, 0, 1, 1, 1])).tolist() == [0, 1, 0, 1, 2]
    with pytest.raises(TypeError, match=r"document_ids must be a \[B, T\] integer tensor"):
        positions_in_documents([[0, 0, 1]])
    with pytest.raises(ValueError, match=r"document_ids must be a \[B, T\] integer tensor; got shape \(1, 3\), torch.float32"):
        positions_in_documents(torch.tensor([[0.0, 0.0, 1.0]]))
