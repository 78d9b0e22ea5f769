"""BERT's 80/10/10 rule."""

import pytest
import torch

from attnlab.mlm import IGNORE, KEPT, MASKED, NOT_CHOSEN, RANDOM, mlm_corrupt


def test_the_rule_on_many_tokens():
    ids = torch.randint(5, 100, (64, 512), generator=torch.Generator().manual_seed(1))
    inputs, labels, what = mlm_corrupt(ids, mask_id=1, vocab_size=100, generator=torch.Generator().manual_seed(0))
    chosen = what != NOT_CHOSEN
    assert abs(chosen.float().mean().item() - 0.15) < 0.005
    shares = [(what == kind).sum().item() / chosen.sum().item() for kind in (MASKED, RANDOM, KEPT)]
    assert abs(shares[0] - 0.8) < 0.01 and abs(shares[1] - 0.1) < 0.01 and abs(shares[2] - 0.1) < 0.01
    assert (inputs[what == MASKED] == 1).all()
    assert torch.equal(inputs[what == KEPT], ids[what == KEPT])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert torch.equal(labels[chosen], ids[chosen]) and (labels[~chosen] == IGNORE).all()


def test_special_tokens_are_never_chosen_and_inputs_are_checked():
    ids = torch.zeros(4, 50, dtype=torch.long)
    _, labels, what = mlm_corrupt(ids, mask_id=1, vocab_size=10, rate=1.0, special_ids=(0,))
    assert (what == NOT_CHOSEN).all() and (labels == IGNORE).all()
    with pytest.raises(TypeError, match="torch.long"):
        mlm_corrupt(ids.float(), mask_id=1, vocab_size=10)
    with pytest.raises(ValueError, match="rate"):
        mlm_corrupt(ids, mask_id=1, vocab_size=10, rate=1.5)
