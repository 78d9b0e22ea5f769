"""Issue 32 (I3, point 8): the course's mask finds packed documents where transformers does, an additive
float mask is refused instead of read the wrong way round, and a wrong ``part=`` fails when the adapter is
built. Kept apart from tests/test_audit.py. About 5 s on the shared machine."""

import pytest
import torch

pytest.importorskip("transformers")

from attnlab import i18n  # noqa: E402
from attnlab.audit import Adapter, course_mask, library_mask, tiny_model  # noqa: E402
from language_checks import assert_message_in_languages  # noqa: E402


@pytest.fixture(autouse=True)
def english():
    i18n.set_language("en")
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("positions", [[[0, 1, 2, 1, 2, 0]], [[0, 1, 2, 0, 1, 0]], [[3, 4, 5, 0, 1, 2]],
                                       [[0, 1, 2, 5, 6, 0]], [[0, 1, 2, 3, 4, 5]], [[0, 1, 2, 0, 1, 2], [0, 1, 1, 2, 3, 4]]])
def test_a_new_document_starts_wherever_the_step_is_not_plus_one_as_in_transformers(positions):
    model = tiny_model("llama", "eager")
    positions = torch.tensor(positions)
    assert torch.equal(library_mask(model, 6, position_ids=positions), course_mask(6, position_ids=positions))


def test_the_expert_s_example_has_three_documents():
    mask = course_mask(6, position_ids=torch.tensor([[0, 1, 2, 1, 2, 0]]))[0, 0]
    assert not mask[3, 2] and mask[4, 3] and not mask[5, 4]  # [0 1 2] [1 2] [0]: three blocks


def test_an_additive_float_mask_is_refused_by_both_mask_helpers():
    model = tiny_model("llama", "eager")
    additive = torch.tensor([[0.0, 0, 0, 0, float("-inf"), float("-inf")]])
    for call, name in [(lambda: library_mask(model, 6, additive), "attention_mask"),
                       (lambda: course_mask(6, keep=additive), "keep"),
                       (lambda: course_mask(6, keep=torch.zeros(1, 6)), "keep"),  # additive, nothing blocked
                       (lambda: library_mask(model, 6, torch.full((1, 6), torch.finfo(torch.float32).min)),
                        "attention_mask")]:
        assert_message_in_languages(ValueError, call, {"en": [name, "additive", f"({name} == 0).long()"],
                                                       "de": ["additive", "verkehrt herum"], "zh": ["加性掩码", "读反"]})
    assert_message_in_languages(ValueError, lambda: course_mask(6, keep=torch.tensor([[1, 1, 2, 0, 0, 0]])),
                                {"en": ["keep", "[0, 1, 2]"], "de": ["echtes Token"], "zh": ["真实 token"]})
    ones = torch.tensor([[1.0, 1, 1, 1, 0, 0]])  # a 0/1 float mask is the same convention: accepted
    assert torch.equal(library_mask(model, 6, ones), course_mask(6, keep=ones.bool()))


def test_a_part_for_a_model_that_has_none_fails_when_the_adapter_is_built():
    llama = tiny_model("llama")
    assert_message_in_languages(ValueError, lambda: Adapter(llama, part="decoder"),
                                {"en": ["part", "LlamaForCausalLM", "part=None", "'decoder'"],
                                 "de": ["als Ganzes"], "zh": ["作为整体"]})
    with pytest.raises(ValueError, match="part='encoder' or part='decoder'"):
        Adapter(tiny_model("t5"), part="decode")


def test_token_ids_outside_the_vocabulary_get_a_clear_message_before_the_model_runs():
    from attnlab.causality import assert_causal, find_leaks

    model = tiny_model("llama")
    for call in (lambda: find_leaks(model, torch.tensor([[1, 500, 3]])), lambda: assert_causal(model, torch.tensor([[1, 2, 128]]))):
        assert_message_in_languages(ValueError, call, {"en": ["0..127"], "de": ["Vokabular"], "zh": ["词表"]})
