"""Chapter 12's code: the taught cells equal the package, the package's tricks change no token, and
every helper refuses bad input with a message in the reader's language.

About 6 s: small untrained GPTs, the chapter's trained models for one speculative run, and one
comparison with Hugging Face's prompt lookup."""

import ast
import inspect
import random

import pytest
import torch
import torch.nn.functional as F

from attnlab import chunked_prefill, i18n, paged_cache, speculative, split_kv, tree_speculation
from attnlab.chunked_prefill import chunk_mask, forward_with_mask, prefill_in_chunks, prefill_work, top_left_mask
from attnlab.gpt import GPT, GPTConfig, KVCache
from attnlab.paged_cache import BlockPool, PagedSequence, contiguous_bytes, gather_kv
from attnlab.speculative import (accepted_length, lead, output_distribution, prompt_lookup, speculative_generate,
                                 speculative_sample)
from attnlab.split_kv import (combine_splits, flash_num_splits, num_splits_heuristic, split_kv_attention,
                              split_kv_decode, split_partials, split_plan)
from attnlab.tree_speculation import accept_path, keep_path, tree_depths, tree_generate, tree_mask, tree_shape
from test_taught_code import defined_in, definition, notebook_cells

CHAPTER = "12-decoding-faster"
TAUGHT = {"chunk_mask": chunked_prefill, "prefill_in_chunks": chunked_prefill, "gather_kv": paged_cache,
          "split_partials": split_kv, "combine_splits": split_kv, "accepted_length": speculative,
          "speculative_step": speculative, "prompt_lookup": speculative, "tree_mask": tree_speculation}


@pytest.mark.parametrize("name", list(TAUGHT))
def test_chapter_12_shows_the_package_code(name):
    shown = definition(defined_in(notebook_cells(CHAPTER), name), name)
    assert ast.dump(shown) == ast.dump(definition(inspect.getsource(TAUGHT[name]), name))


def test_the_gather_the_chapter_installs_is_the_one_paged_sequences_read_through():
    cell = defined_in(notebook_cells(CHAPTER), "gather_kv")
    assert "paged_cache.gather_kv = gather_kv" in cell
    original = paged_cache.gather_kv
    calls = []
    try:
        paged_cache.gather_kv = lambda *args: calls.append(args) or original(*args)
        model = small(n_layer=1)
        model(torch.tensor([[1, 2, 3]]), cache=PagedSequence(BlockPool(model.config, 4, 2)))
    finally:
        paged_cache.gather_kv = original
    assert len(calls) == 2  # keys and values of the one layer


def small(**overrides) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=40, block_size=48, n_layer=2, n_head=4, n_embd=32)
    config.update(overrides)
    return GPT(GPTConfig(**config)).eval()


# ---------------------------------------------------------------------------- chunked prefill


@pytest.mark.parametrize("overrides", [{}, {"n_kv_head": 2}, {"positions": "rope"}, {"attention": "explicit"}],
                         ids=["mha", "gqa", "rope", "explicit"])
def test_chunked_prefill_gives_the_logits_of_one_pass_and_top_left_does_not(overrides):
    model = small(**overrides)
    ids = torch.randint(0, 40, (2, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        one_pass = model(ids)[0]
    for C in (1, 4, 7, 23, 40):
        chunked = prefill_in_chunks(model, ids, C, KVCache(model.config, 2, 23))
        assert torch.allclose(chunked, one_pass, rtol=0, atol=1e-5), C
    wrong = prefill_in_chunks(model, ids, 8, KVCache(model.config, 2, 23), mask=top_left_mask)
    assert torch.allclose(wrong[:, :8], one_pass[:, :8], rtol=0, atol=1e-5)  # the first chunk: an empty cache
    assert not torch.allclose(wrong[:, 8:], one_pass[:, 8:], rtol=0, atol=1e-3)


def test_the_chunk_mask_is_the_lower_right_mask_and_the_work_count_is_right():
    for C, n in [(1, 0), (3, 4), (5, 0), (2, 9)]:
        assert torch.equal(chunk_mask(C, n), torch.ones(n + C, n + C, dtype=torch.bool).tril()[n:])
        assert torch.equal(top_left_mask(C, n)[:, :C], torch.ones(C, C, dtype=torch.bool).tril())
    assert prefill_work(3, [2, 4], shared=False) == {"tokens": 12, "scores": (5 * 6 + 7 * 8) // 2}
    assert prefill_work(3, [2, 4], shared=True) == {"tokens": 9, "scores": 6 + (4 + 5) + (4 + 5 + 6 + 7)}


def test_is_causal_aligns_top_left_and_the_chunk_mask_lower_right():
    """The chapter's claim about SDPA: with a cache, is_causal=True starts its triangle at key 0."""
    C, n = 3, 4
    q = torch.randn(1, 2, C, 8, generator=torch.Generator().manual_seed(5))
    k, v = torch.randn(2, 1, 2, n + C, 8, generator=torch.Generator().manual_seed(6)).unbind(0)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(causal, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left_mask(C, n)), atol=1e-6)
    assert not torch.allclose(causal, F.scaled_dot_product_attention(q, k, v, attn_mask=chunk_mask(C, n)), atol=1e-3)


# ---------------------------------------------------------------------------- the paged cache


def test_paged_sequences_give_the_logits_of_a_contiguous_cache_and_share_their_prefix():
    model = small()
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        one_pass = model(ids)[0]
        pool = BlockPool(model.config, num_blocks=12, block_size=4)
        prefix = PagedSequence(pool)
        model(ids[:, :10], cache=prefix)  # blocks 0, 1, 2 (the last half full)
        a, b = prefix.fork(), prefix.fork()
        assert pool.refs[:3] == [3, 3, 3] and pool.copies == 0
        logits_a = model(ids[:, 10:30], cache=a)[0]
        logits_b = model(ids[:, 10:14], cache=b)[0]
    assert torch.allclose(logits_a, one_pass[:, 10:], rtol=0, atol=1e-5)
    assert torch.allclose(logits_b, one_pass[:, 10:14], rtol=0, atol=1e-5)
    assert pool.copies == 2 and a.block_table[:2] == b.block_table[:2] == prefix.block_table[:2]
    assert a.block_table[2] != prefix.block_table[2] != b.block_table[2]  # the half-full block, copied on write
    for sequence in (a, b, prefix):
        sequence.release()
    assert pool.blocks_in_use == 0 and pool.refs == [0] * 12


def test_gather_reads_positions_in_table_order_and_contiguous_bytes_counts_what_is_reserved():
    blocks = torch.arange(6 * 2 * 3).reshape(6, 2, 3, 1).float()  # [num_blocks, H, block_size, d]
    assert gather_kv(blocks, [4, 1], 5)[1, :, 0].tolist() == [27.0, 28.0, 29.0, 9.0, 10.0]  # head 1
    config = GPTConfig(vocab_size=10, n_layer=2, n_head=2, n_embd=8)
    assert contiguous_bytes(config, [3, 5], 8) == {"reserved": 2 * 8 * 2 * 2 * 2 * 4 * 4, "used": 8 * 32 * 4}


# ---------------------------------------------------------------------------- split-KV


def test_split_kv_equals_sdpa_and_a_fixed_split_size_is_batch_invariant():
    q = torch.randn(6, 2, 1, 8, generator=torch.Generator().manual_seed(3))
    k, v = torch.randn(2, 6, 2, 300, 8, generator=torch.Generator().manual_seed(4)).unbind(0)
    reference = F.scaled_dot_product_attention(q, k, v)
    for size in (1, 7, 64, 300, 1000):
        assert torch.allclose(split_kv_decode(q, k, v, split_size=size), reference, rtol=0, atol=1e-5), size
    alone = split_kv_decode(q[:1], k[:1], v[:1], split_size=64)
    assert torch.equal(split_kv_decode(q, k, v, split_size=64)[0], alone[0])  # the same calls on the same numbers
    outs, lses = split_partials(q[0], k[0], v[0], split_plan(300, num_splits=3, block=64))
    assert outs.shape == (3, 2, 1, 8) and torch.allclose(combine_splits(outs, lses), reference[0], rtol=0, atol=1e-5)
    assert split_plan(1000, split_size=256) == split_plan(1000, num_splits=4) == [(0, 256), (256, 512), (512, 768), (768, 1000)]


def test_the_split_count_follows_flash_attentions_heuristic():
    assert num_splits_heuristic(48, 108, 64) == 2  # the example in flash_api.cpp: 2 splits (efficiency 0.89)
    assert num_splits_heuristic(200, 108, 64) == 1  # enough work to fill 80 % of the SMs
    counts = [flash_num_splits(B, 4, 1000, 64)[0] for B in (1, 8, 64)]
    assert counts == [4, 4, 1]  # the chapter's table: the split of a sequence depends on the batch


# ---------------------------------------------------------------------------- speculative decoding


@pytest.mark.parametrize("k", [1, 3, 6])
def test_speculative_decoding_gives_the_targets_greedy_tokens(k):
    target, draft = small(), small(n_layer=1, n_embd=16)
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    greedy = target.generate(prompt, 20)
    for proposer in (draft, "prompt_lookup", target):
        tokens, stats = speculative_generate(target, prompt, 20, k, draft=proposer)
        assert torch.equal(tokens, greedy) and stats.new_tokens == 20
        assert 20 / (k + 1) <= stats.target_passes <= 20
    _, itself = speculative_generate(target, prompt, 20, k, draft=target)  # a draft equal to the target
    assert itself.rejected == 0 and itself.target_passes == -(-20 // (k + 1))


def test_the_trained_models_decode_the_same_with_every_draft_and_the_tree_keeps_the_right_cache():
    from attnlab.decoding_models import load_model
    from attnlab.tokenizer import course_tokenizer

    target, draft = load_model("target"), load_model("draft")
    prompt = torch.tensor([course_tokenizer().encode("The causal mask ")])
    greedy = target.generate(prompt, 24)
    for branching in ((2, 1), (3, 1, 1)):
        tokens, stats, cache = tree_generate(target, draft, prompt, 24, branching)
        assert torch.equal(tokens, greedy) and stats.target_passes < 24
        plain = KVCache(target.config, 1, cache.pos)
        with torch.no_grad():
            target(greedy[:, :cache.pos], cache=plain)
        assert torch.allclose(cache.k[:, :, :, :cache.pos], plain.k, rtol=0, atol=5e-4)
    with torch.no_grad():
        assert lead(target(greedy)[0][0, prompt.size(1) - 1:-1]).min() > 2e-3  # the greedy text is robust


def test_prompt_lookup_proposes_what_hugging_faces_prompt_lookup_proposes():
    pytest.importorskip("transformers")
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(0)
    for _ in range(200):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 30))]
        k = rng.randrange(1, 6)
        theirs = PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=2, max_length=1000)
        candidates, _ = theirs.get_candidates(torch.tensor([tokens]))
        assert prompt_lookup(tokens, k) == candidates[0, len(tokens):].tolist(), (tokens, k)


def test_tree_masks_depths_acceptance_and_the_kept_path():
    parents = tree_shape((2, 2))
    assert parents == [-1, 0, 0, 1, 1, 2, 2] and tree_depths(parents) == [0, 1, 1, 2, 2, 2, 2]
    allowed = tree_mask(parents, 2)
    assert allowed[4].tolist() == [True, True, True, True, False, False, True, False, False]
    assert accept_path(parents, [9, 5, 6, 7, 8, 1, 2], [6, 0, 2, 0, 0, 0, 0]) == [0, 2, 6]
    cache = KVCache(GPTConfig(vocab_size=5, n_layer=1, n_head=1, n_embd=4), 1, 10)
    cache.k[0, 0, 0, :, 0] = torch.arange(10.0)
    keep_path(cache, 3, [0, 2, 6])
    assert cache.pos == 6 and cache.k[0, 0, 0, 3:6, 0].tolist() == [3.0, 5.0, 9.0]


def test_rejection_sampling_keeps_the_targets_distribution():
    p = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)
    for q in (torch.tensor([0.1, 0.1, 0.4, 0.4], dtype=torch.float64), p.clone(),
              torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=torch.float64)):
        assert torch.allclose(output_distribution(p, q), p, rtol=0, atol=1e-12)
        draws = speculative_sample(p, q, 40_000, torch.Generator().manual_seed(0))
        frequencies = torch.bincount(draws, minlength=4).double() / 40_000
        assert ((frequencies - p).abs() <= 5 * (p * (1 - p) / 40_000).sqrt()).all(), q
    assert accepted_length([], [3]) == 0 and accepted_length([1, 2], [1, 2, 3]) == 2


# ---------------------------------------------------------------------------- bad input


def message(lang, call):
    i18n.set_language(lang)
    try:
        with pytest.raises((ValueError, TypeError)) as raised:
            call()
        return str(raised.value)
    finally:
        i18n.set_language("en")


def _full_pool():
    model = small(n_layer=1)
    sequence = PagedSequence(BlockPool(model.config, 1, 2))
    return lambda: model(torch.tensor([[1, 2, 3]]), cache=sequence)


def _cache_and_ids(T=3):
    model = small(n_layer=1)
    return model, torch.zeros(1, T, dtype=torch.long), KVCache(model.config, 1, 8)


def _pool_taken_by_another():
    model = small(n_layer=1)
    pool = BlockPool(model.config, 2, 2)
    model(torch.tensor([[1, 2, 3]]), cache=PagedSequence(pool))  # holds both blocks
    return lambda: model(torch.tensor([[1]]), cache=PagedSequence(pool))


def _stored_meta(**changes):
    from attnlab import decoding_models
    meta = {"vocabulary": decoding_models.course_tokenizer().chars, "block_size": decoding_models.BLOCK_SIZE,
            "shapes": decoding_models.SHAPES, "training": decoding_models.TRAINING, **changes}
    return lambda: decoding_models.check_stored({"meta": meta})


def test_the_shipped_weights_were_trained_with_the_current_tokenizer():
    from attnlab import decoding_models
    stored = decoding_models._stored()  # the file as shipped
    assert stored["meta"]["vocabulary"] == list(decoding_models.course_tokenizer().chars)
    decoding_models.check_stored(stored)  # the same check load_model runs


def _free_twice():
    pool = BlockPool(small().config, 2, 2)
    pool.release(pool.allocate())
    pool.release(0)


CASES = [  # key, call, English words, German words
    ("ch12.err_model", lambda: prefill_in_chunks("gpt", torch.zeros(1, 3, dtype=torch.long), 2, None),
     ["attnlab.gpt.GPT"], ["attnlab.gpt.GPT"]),
    ("ch12.err_model_kind", lambda: prefill_in_chunks(small(window=3), torch.zeros(1, 3, dtype=torch.long), 2, None),
     ["window"], ["Sliding Window"]),
    ("ch12.err_model_name", lambda: __import__("attnlab.decoding_models", fromlist=["x"]).load_model("big"),
     ["'big'"], ["'big'"]),
    ("ch12.err_allowed", lambda: forward_with_mask(*_cache_and_ids(), torch.ones(3, 3)), ["bool", "(3, 3)"], ["boolescher Tensor", "(3, 3)"]),
    ("ch12.err_empty_row", lambda: forward_with_mask(*_cache_and_ids(), torch.zeros(3, 3, dtype=torch.bool)),
     ["at least one key"], ["mindestens einen Key"]),
    ("ch12.err_positions", lambda: forward_with_mask(*_cache_and_ids(), chunk_mask(3, 0), torch.arange(2)),
     ["3 whole numbers"], ["3 ganzen Zahlen"]),
    ("ch12.err_pool", lambda: PagedSequence("pool"), ["BlockPool"], ["BlockPool"]),
    ("ch12.err_pool_small", _full_pool(), ["too small", "3 positions need 2 blocks"], ["zu klein", "3 Positionen brauchen 2"]),
    ("ch12.err_pool_full", _pool_taken_by_another(), ["full", "2 of its 2 blocks", "release()"],
     ["voll", "2 seiner 2 Blöcke", "release()"]),
    ("ch12.err_pool_config", lambda: BlockPool("config", 2, 2), ["GPTConfig", "str"], ["GPTConfig", "str"]),
    ("ch12.err_advance", lambda: PagedSequence(BlockPool(small().config, 2, 2)).advance(5),
     ["advance(5)", "reserve"], ["advance(5)", "Reserviere"]),
    ("ch12.err_prompt_text", lambda: chunked_prefill.prompt_ids(5), ["text (str)"], ["Text sein (str)"]),
    ("ch12.err_empty_prompt", lambda: chunked_prefill.prompt_ids(""), ["empty", "at least one token"],
     ["leer", "mindestens ein Token"]),
    ("ch12.err_weights_vocabulary", _stored_meta(vocabulary=["a", "b"]), ["vocabulary of 2", "Retrain"],
     ["Vokabular aus 2", "Trainiere"]),
    ("ch12.err_weights_settings", _stored_meta(block_size=7), ["other settings", "python -m attnlab.decoding_models"],
     ["anderen Einstellungen", "python -m attnlab.decoding_models"]),
    ("ch12.err_split_dtypes", lambda: split_kv_attention(torch.zeros(1, 4), torch.zeros(3, 4, dtype=torch.float64),
                                                         torch.zeros(3, 4)), ["same dtype", "torch.float64"],
     ["denselben dtype", "torch.float64"]),
    ("ch12.err_branching", lambda: tree_shape("22"), ["(2, 2, 1)"], ["Kinderzahlen"]),
    ("ch12.err_shapes", lambda: __import__("attnlab.figures.decoding", fromlist=["x"]).TreeMaskExplorer("22"),
     ["shapes=((2, 2), (3, 1))"], ["Baumformen"]),
    ("ch12.err_no_choices", lambda: __import__("attnlab.figures.decoding", fromlist=["x"]).chunk_mask_explorer([]),
     ["chunk_sizes"], ["mindestens einen Wert"]),
    ("ch12.err_block_free", _free_twice, ["released twice"], ["zweimal"]),
    ("ch12.err_paged_batch", lambda: small(n_layer=1)(torch.zeros(2, 3, dtype=torch.long),
                                                     cache=PagedSequence(BlockPool(small(n_layer=1).config, 4, 2))),
     ["batch of 2"], ["Batch aus 2"]),
    ("ch12.err_blocks", lambda: gather_kv(torch.zeros(3, 4), [0], 1), ["[num_blocks, H, block_size, d]"], ["Schicht"]),
    ("ch12.err_table", lambda: gather_kv(torch.zeros(3, 1, 2, 1), [[0]], 1), ["block ids"], ["Block-IDs"]),
    ("ch12.err_table_ids", lambda: gather_kv(torch.zeros(3, 1, 2, 1), [5], 1), ["0..2"], ["0..2"]),
    ("ch12.err_split_choice", lambda: split_plan(10, split_size=2, num_splits=3), ["either split_size"], ["entweder split_size"]),
    ("ch12.err_decode_shape", lambda: split_kv_decode(torch.zeros(1, 4), torch.zeros(3, 4), torch.zeros(3, 4)),
     ["[B, H, 1, d]"], ["Decodierschritt"]),
    ("ch12.err_one_prompt", lambda: speculative_generate(small(), torch.zeros(2, 3, dtype=torch.long), 4, 2),
     ["one prompt"], ["ein Prompt"]),
    ("ch12.err_room", lambda: speculative_generate(small(), torch.zeros(1, 40, dtype=torch.long), 20, 2),
     ["block_size = 48", "at most 8"], ["block_size = 48", "höchstens 8"]),
    ("ch12.err_draft", lambda: speculative_generate(small(), torch.zeros(1, 3, dtype=torch.long), 4, 2, draft="lookup"),
     ["'lookup'", "prompt_lookup"], ["'lookup'"]),
    ("ch12.err_vocab", lambda: speculative_generate(small(), torch.zeros(1, 3, dtype=torch.long), 4, 2,
                                                    draft=small(vocab_size=30)), ["30 tokens", "40"], ["30 Tokens"]),
    ("ch12.err_parents_type", lambda: tree_mask("0, 1", 2), ["-1 for a root"], ["-1 für eine Wurzel"]),
    ("ch12.err_parents", lambda: tree_mask([-1, 2, 0], 0), ["entry 1 has parent 2"], ["Eintrag 1 hat den Elternknoten 2"]),
    ("ch12.err_tree_size", lambda: __import__("attnlab.figures.decoding", fromlist=["x"]).tree_figure(
        list(range(-1, 20)), 0, 0), ["1 to 12 entries"], ["1 bis 12 Einträgen"]),
    ("ch12.err_distribution", lambda: output_distribution(torch.tensor([0.5, 0.6]), torch.tensor([0.5, 0.5])),
     ["summing to 1"], ["Summe 1"]),
    ("ch12.err_distribution_sizes", lambda: output_distribution(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0, 0.0])),
     ["same vocabulary"], ["dasselbe Vokabular"]),
]


@pytest.mark.parametrize("key, call, english, german", CASES, ids=[case[0] for case in CASES])
def test_bad_input_gets_a_clear_message_in_the_readers_language(key, call, english, german):
    for lang, words in (("en", english), ("de", german)):
        text = message(lang, call)
        for word in words:
            assert word in text, (lang, text)
    assert message("zh", call) != message("en", call)


def test_every_error_key_of_chapter_12_has_a_case():
    keys = {key for key in i18n.catalog() if key.startswith("ch12.err_")}
    assert keys == {case[0] for case in CASES}
