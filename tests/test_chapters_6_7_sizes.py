"""Chapters 6 and 7 run with a learner's own sentence and sizes (timing and training cells skipped).

A reader changes the example sentence (2 to 12 tokens), the number of new
tokens, the prompt lengths, the chunk of new queries, the prefix; every cell
must still run, or stop with a clear message.
"""

import pytest
import torch

import attnlab
from tests.test_taught_code import notebook_cells

CHAPTER_6, CHAPTER_7 = "06-kv-cache", "07-bidirectional-attention"
SKIP = ("time.perf_counter", "def train_tagger", "accuracy_of[")  # timing and the tagging experiment (and its checks): slow, sizes fixed
SENTENCE = '"' + attnlab.tr("sentence", lang="en") + '"'  # tr("sentence") as the English notebook shows it


def run_with_changes(chapter: str, changes: list[tuple[str, str]]) -> dict:
    for old, _ in changes:
        assert any(old in cell for cell in notebook_cells(chapter)), old
    attnlab.setup("en")
    namespace: dict = {}
    exec("import attnlab", namespace)
    for source in notebook_cells(chapter):
        for old, new in changes:
            source = source.replace(old, new)
        if not any(marker in source for marker in SKIP):
            exec(source, namespace)
    return namespace


SHORT = [(SENTENCE, '"Hi"'), ("attnlab.tokens()", '["Hi", "there"]')]
TWELVE = " ".join(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "12"])


@pytest.mark.parametrize("changes", [
    [(SENTENCE, '"Hi"'), ("new_tokens = 24", "new_tokens = 3"), ("for prompt_len in (1, 4, 9):", "for prompt_len in (2, 30):"),
             ("t, H, d, n_new = 6, 4, 16, 3", "t, H, d, n_new = 4, 1, 8, 4"),
             ("B_example, T_example = 2, 64", "B_example, T_example = 1, 5")],
    [(SENTENCE, '"' + TWELVE[:38] + '"'), ("t, H, d, n_new = 6, 4, 16, 3", "t, H, d, n_new = 9, 2, 4, 1")],
], ids=["2 tokens", "38 tokens"])  # the cache explorer shows the first 8 characters (2 for "Hi")
def test_chapter_6_runs_with_other_sizes(changes):
    namespace = run_with_changes(CHAPTER_6, changes)
    assert namespace["cache"].pos == namespace["T"] + namespace["new_tokens"]
    # what the cells print as True must hold for other lengths too (another length: up to rounding)
    T, atol = namespace["T"], namespace["atol"]
    for name in ("k", "v"):
        shorter, longer = getattr(namespace["cache_T"], name), getattr(namespace["cache_T1"], name)
        assert torch.allclose(shorter[:, :, :, :T], longer[:, :, :, :T], rtol=0, atol=atol)
    assert torch.allclose(namespace["out_T"], namespace["out_T1"][:, :T], rtol=0, atol=atol)
    assert namespace["within"] and namespace["difference"] < 1e-5


def test_chapter_6_says_clearly_when_the_sentence_is_too_long_for_the_model():
    with pytest.raises(ValueError, match=r"max_len must be between 1 and the model's block_size = 64; got 84"):
        run_with_changes(CHAPTER_6, [(SENTENCE, '"' + "x" * 60 + '"')])


@pytest.mark.parametrize("changes", [
    SHORT,
    [(SENTENCE, '"' + TWELVE[:60] + '"'), ("attnlab.tokens()", f'"{TWELVE}".split()'),
     ("prefix = min(3, T)", "prefix = min(5, T)")],
], ids=["2 tokens", "12 tokens"])
def test_chapter_7_runs_with_other_sizes(changes):
    namespace = run_with_changes(CHAPTER_7, changes)
    before, after = namespace["before"], namespace["after"]
    assert torch.allclose(before["causal"], after["causal"], rtol=0, atol=namespace["atol"])
    assert ((after["bidirectional"] - before["bidirectional"]).abs().amax(dim=-1) > namespace["atol"]).all()
    assert namespace["T_dec"] == min(4, namespace["T"])
    assert namespace["appended"][: namespace["T"], namespace["T"]].any().item() is False
