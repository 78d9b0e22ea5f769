"""The KV-cache explorer of chapter 6."""

import pytest

import attnlab
from attnlab.cache_figures import EMPTY, NEW, REUSED, cache_explorer, cache_state


def test_cache_state_marks_reused_new_and_empty_slots():
    assert cache_state(5, 2).tolist() == [REUSED, REUSED, NEW, EMPTY, EMPTY]
    assert cache_state(3, 0).tolist() == [NEW, EMPTY, EMPTY]


def test_explorer_has_one_frame_per_step_and_clear_errors():
    attnlab.setup("de")
    explorer = cache_explorer(["a", "b", "c", "d"], prefill=2)
    control, stack = explorer.children[1], explorer.children[2]
    assert len(control.options) == len(stack.children) == 3  # steps 1, 2, 3
    with pytest.raises(ValueError, match="2 bis 16 Tokens"):
        cache_explorer(["a"])
    with pytest.raises(ValueError, match="prefill"):
        cache_explorer(["a", "b"], prefill=3)
    with pytest.raises(ValueError, match="0..4-1"):
        cache_state(4, 4)
    attnlab.setup("en")
