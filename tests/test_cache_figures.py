"""The KV-cache explorer of chapter 6: which rows and columns each step computes, and clear errors."""

import numpy as np
import pytest

import attnlab
from attnlab.figures.cache import (BLOCKED, EARLIER, EMPTY, NEW, NOT_YET, READS_CACHED, READS_NEW, REUSED,
                                   attention_state, cache_explorer, cache_figure, cache_state)
from language_checks import assert_message_in_languages


def test_cache_state_marks_reused_new_and_empty_slots():
    assert cache_state(5, 2).tolist() == [REUSED, REUSED, NEW, EMPTY, EMPTY]
    assert cache_state(3, 0).tolist() == [NEW, EMPTY, EMPTY]
    assert cache_state(5, 2, prefill=3).tolist() == [NEW, NEW, NEW, EMPTY, EMPTY]  # the prefill step
    assert cache_state(5, 3, prefill=3).tolist() == [REUSED, REUSED, REUSED, NEW, EMPTY]


def test_a_decode_step_computes_one_row_and_one_column_and_reuses_the_rest():
    table = attention_state(5, 3, prefill=2)
    assert table[3].tolist() == [READS_CACHED, READS_CACHED, READS_CACHED, READS_NEW, BLOCKED]
    assert (table[:3][np.tril(np.ones((3, 5), bool))] == EARLIER).all()  # earlier rows: not recomputed
    assert (table[4] == NOT_YET).all()
    assert ((table == READS_NEW).sum(), (table == READS_CACHED).sum()) == (1, 3)


def test_the_prefill_computes_the_prompt_rows_with_the_causal_mask():
    table = attention_state(5, 2, prefill=3)
    assert (table[:3, :3] == np.where(np.tril(np.ones((3, 3), bool)), READS_NEW, BLOCKED)).all()
    assert (table[:3, 3:] == BLOCKED).all() and (table[3:] == NOT_YET).all()


def test_all_steps_together_fill_the_causal_mask_of_training():
    T, prefill = 6, 2
    last = attention_state(T, T - 1, prefill)
    assert ((last != BLOCKED) == np.tril(np.ones((T, T), bool))).all()


def test_explorer_has_one_frame_per_step_and_takes_a_sentence():
    attnlab.setup("en")
    explorer = cache_explorer(["a", "b", "c", "d"], prefill=2)
    control, stack = explorer.children[1], explorer.children[2]
    assert len(control.options) == len(stack.children) == 3  # prefill step t=1, then steps 2 and 3
    assert cache_explorer("The cat sat").tokens == ["The", "cat", "sat"]
    assert repr(explorer) == "CacheExplorer(tokens=['a', 'b', 'c', 'd'], prefill=2)"
    assert len(cache_figure(["a", "b"], 1).axes) == 2


CASES = [  # (call, English words, German words)
    (lambda: cache_explorer(["a"]), ["takes 2 to 16 tokens; got 1"], ["nimmt daher 2 bis 16 Tokens"]),
    (lambda: cache_explorer([str(i) for i in range(17)]), ["got 17"], ["übergeben wurden 17"]),
    (lambda: cache_explorer(["a", "b"], prefill=3), ["prefill must be between 1 and 2; got 3"],
     ["prefill muss zwischen 1 und 2 liegen"]),
    (lambda: cache_explorer(["a", "b"], prefill=1.5), ["prefill must be a whole number"],
     ["prefill muss eine ganze Zahl sein"]),
    (lambda: cache_explorer(None), ["tokens must be a list of strings"], ["tokens muss eine Liste von Strings sein"]),
    (lambda: cache_state(4, 4), ["step must lie between 0 (the prefill) and 3; got 4"],
     ["step muss zwischen 0 (dem Prefill) und 3 liegen"]),
    (lambda: cache_state(4, 0, prefill=2), ["between 1 (the prefill) and 3; got 0"], ["übergeben wurde 0"]),
]


@pytest.mark.parametrize("call, english, german", CASES)
def test_bad_input_gets_a_clear_message_in_the_readers_language(call, english, german):
    assert_message_in_languages((ValueError, TypeError), call, {"en": english, "de": german})
