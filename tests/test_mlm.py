"""BERT's 80/10/10 rule, the loss on the chosen positions only, and clear errors."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.mlm import IGNORE, KEPT, MASKED, NOT_CHOSEN, RANDOM, mlm_corrupt
from language_checks import assert_message_in_languages


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


def test_the_loss_counts_only_the_chosen_positions():
    ids = torch.randint(2, 50, (4, 30), generator=torch.Generator().manual_seed(0))
    _, labels, what = mlm_corrupt(ids, mask_id=1, vocab_size=50, generator=torch.Generator().manual_seed(0))
    logits = torch.randn(4, 30, 50, generator=torch.Generator().manual_seed(1))
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    chosen = what != NOT_CHOSEN
    by_hand = -logits.log_softmax(dim=-1)[chosen, labels[chosen]].mean()
    assert torch.allclose(loss, by_hand)
    logits[~chosen] = 100.0  # what the model says at other positions does not matter
    assert torch.allclose(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE), loss)


def test_special_tokens_are_never_chosen_and_natural_inputs_are_accepted():
    ids = torch.zeros(4, 50, dtype=torch.long)
    _, labels, what = mlm_corrupt(ids, mask_id=1, vocab_size=10, rate=1.0, special_ids=(0,))
    assert (what == NOT_CHOSEN).all() and (labels == IGNORE).all()
    _, labels, what = mlm_corrupt(ids, mask_id=1, vocab_size=10, rate=1.0, special_ids=0)  # one id as an int
    assert (what == NOT_CHOSEN).all()
    inputs, labels, _ = mlm_corrupt([3, 4, 5], mask_id=1, vocab_size=10, rate=1.0)  # a list of ids
    assert inputs.dtype == labels.dtype == torch.long and torch.equal(labels, torch.tensor([3, 4, 5]))
    assert mlm_corrupt(ids.int(), mask_id=1, vocab_size=10)[0].dtype == torch.long


LONG = torch.zeros(4, dtype=torch.long)
CASES = [  # (exception, call, English words, German words)
    (TypeError, lambda: mlm_corrupt(LONG.float(), 1, 10), ["ids must be token ids", "torch.float32"],
     ["ids müssen Token-IDs sein"]),
    (TypeError, lambda: mlm_corrupt("abc", 1, 10), ["ids must be token ids", "'abc'"], ["Token-IDs"]),
    (ValueError, lambda: mlm_corrupt(LONG, 1, 10, rate=1.5), ["rate must be a number from 0 to 1", "got 1.5"],
     ["rate muss eine Zahl von 0 bis 1 sein"]),
    (ValueError, lambda: mlm_corrupt(LONG, 1, 10, rate="0.15"), ["got '0.15'"], ["übergeben wurde '0.15'"]),
    (ValueError, lambda: mlm_corrupt(LONG, 1, 0), ["vocab_size must be at least 2; got 0"],
     ["vocab_size muss mindestens 2 sein"]),
    (ValueError, lambda: mlm_corrupt(LONG, 20, 10), ["mask_id must be between 0 and 9; got 20"],
     ["mask_id muss zwischen 0 und 9 liegen"]),
    (ValueError, lambda: mlm_corrupt(LONG + 30, 1, 10), ["must lie in 0..9", "from 30 to 30"],
     ["müssen in 0..9 liegen"]),
    (TypeError, lambda: mlm_corrupt(LONG, 1, 10, generator=5), ["generator must be a torch.Generator"],
     ["generator muss ein torch.Generator sein"]),
    (ValueError, lambda: mlm_corrupt(LONG, 1, 10, special_ids=(11,)), ["special_ids must be between 0 and 9"],
     ["special_ids muss zwischen 0 und 9 liegen"]),
]


@pytest.mark.parametrize("exception, call, english, german", CASES)
def test_bad_input_gets_a_clear_message_in_the_readers_language(exception, call, english, german):
    assert_message_in_languages(exception, call, {"en": english, "de": german})
