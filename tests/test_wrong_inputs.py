"""Helpers that take a mask, positions, a cache or token ids refuse the wrong one, in the reader's language.

One case per message (issue 22, point 6), each checked in English, German and Chinese.
"""

import pytest
import torch

import attnlab.inputs

import attnlab
from attnlab.batching import forward_with_mask
from attnlab.gpt import KVCache
from attnlab.mask_builder import batch_mask, mask_mod
from attnlab.results import measured
from attnlab.tokenizer import course_tokenizer
from attnlab.window_cache import WindowKVCache, decode_greedy
from language_checks import assert_message_in_languages
from small_models import small_gpt

T = 6
IDX = torch.randint(0, 50, (2, T), generator=torch.Generator().manual_seed(0))
ALLOWED = batch_mask(mask_mod("causal"), 2, T)  # [2, 1, T, T] bool
POSITIONS = torch.arange(T).expand(2, T)


def run(allowed=ALLOWED, positions=POSITIONS, **options):
    return lambda: forward_with_mask(small_gpt(**options), IDX, allowed, positions)


CASES = [  # (key, exception, call, {lang: words})
    ("keep_additive", ValueError, lambda: attnlab.inputs.as_keep_mask("attention_mask", torch.tensor([[0.0, float("-inf")]])),
     {"en": ["attention_mask marks real tokens with 1", "additive float32 mask"], "de": ["additive float32-Maske"],
      "zh": ["float32 加性掩码"]}),
    ("keep_values", ValueError, lambda: attnlab.inputs.as_keep_mask("attention_mask", torch.tensor([[1, 2]])),
     {"en": ["must hold only 1 (real token) and 0 (padding)", "[1, 2]"], "de": ["darf nur 1 (echtes Token) und 0"],
      "zh": ["只能包含 1"]}),
    ("part_whole_model", ValueError, lambda: attnlab.inputs.check_part("encoder", False, "GPT2"),
     {"en": ["part is only for an encoder-decoder model", "GPT2"], "de": ["part gibt es nur"], "zh": ["part 只用于"]}),
    ("mask_type", TypeError, run(allowed=ALLOWED.tolist()),
     {"en": ["allowed must be a bool tensor (True = may read)", "[B, H, 6, 6]", "got [[[[True"],
      "de": ["allowed muss ein boolescher Tensor sein (True = darf lesen)"], "zh": ["allowed 必须是布尔张量（True = 可以读取）"]}),
    ("mask_dtype", TypeError, run(allowed=ALLOWED.float()),
     {"en": ["allowed must be a boolean mask (True = may read); got dtype float32", "allowed.bool()"],
      "de": ["allowed muss eine boolesche Maske sein", "float32", "allowed.bool()"],
      "zh": ["allowed 必须是布尔掩码", "float32", "allowed.bool()"]}),
    ("mask_additive", TypeError, run(allowed=torch.zeros(T, T).masked_fill(~ALLOWED[0, 0], float("-inf"))),
     {"en": ["additive float32 mask (0 = read, -inf = blocked)", "allowed == 0"],
      "de": ["additive float32-Maske (0 = lesen, -inf = gesperrt)", "allowed == 0"],
      "zh": ["float32 加性掩码（0 = 读取，-inf = 屏蔽）", "allowed == 0"]}),
    ("mask_shape", ValueError, run(allowed=ALLOWED[:, 0]),
     {"en": ["allowed must have shape [6, 6] or [B, 1, 6, 6] with B = 1 or 2; got shape (2, 6, 6)"],
      "de": ["allowed muss die Form [6, 6] oder [B, 1, 6, 6] mit B = 1 oder 2 haben", "(2, 6, 6)"],
      "zh": ["allowed 的形状必须是 [6, 6] 或 [B, 1, 6, 6]", "(2, 6, 6)"]}),
    ("mask_empty", ValueError, run(allowed=torch.zeros(T, T, dtype=torch.bool)),
     {"en": ["allowed lets no query read any key", "inverted", "~allowed"],
      "de": ["allowed lässt keine Query irgendeinen Key lesen", "invertiert"], "zh": ["allowed 不允许任何查询读取任何键"]}),
    ("mask_future", ValueError, run(allowed=~ALLOWED),
     {"en": ["allowed lets query 0 read the later key 1 (row 0 of the batch)", "causal & allowed"],
      "de": ["allowed lässt Query 0 den späteren Key 1 lesen", "causal & allowed"],
      "zh": ["allowed 让查询 0 读取了更靠后的键 1", "causal & allowed"]}),
    ("position_ids", ValueError, run(positions=POSITIONS.float()),
     {"en": ["position_ids must be a tensor of whole numbers", "float32"], "de": ["position_ids muss ein Tensor aus ganzen Zahlen"],
      "zh": ["position_ids 必须是整数张量"]}),
    ("position_ids_range", ValueError, run(positions=POSITIONS + 40),
     {"en": ["position_ids run from 40 to 45, but the model's position embeddings cover only 0..31 (block_size = 32)"],
      "de": ["position_ids reichen von 40 bis 45", "0..31"], "zh": ["position_ids 从 40 到 45", "0..31"]}),
    ("block_size_rope", ValueError, lambda: small_gpt(positions="rope").generate(IDX, 40),
     {"en": ["A RoPE model has no position embeddings that end there", "WindowKVCache", "block_size = 32"],
      "de": ["Ein RoPE-Modell hat keine Positions-Embeddings, die dort enden"], "zh": ["RoPE 模型没有在这里结束的位置嵌入"]}),
    ("cache_dtype", ValueError,
     lambda: small_gpt()(IDX[:1], cache=KVCache(small_gpt().config, 1, 10, dtype=torch.bfloat16)),
     {"en": ["The cache stores torch.bfloat16, the model computes in torch.float32", "dtype=torch.float32"],
      "de": ["Der Cache speichert torch.bfloat16, das Modell rechnet in torch.float32"],
      "zh": ["cache 存储的是 torch.bfloat16，模型却用 torch.float32 计算"]}),
    ("decode_shape", TypeError, lambda: course_tokenizer().decode(torch.zeros(1, 5, dtype=torch.long)),
     {"en": ["decode takes one sequence of token ids", "Tensor (1, 5)", "decode(ids[0])"],
      "de": ["decode erwartet eine Folge von Token-IDs", "decode(ids[0])"], "zh": ["decode 接受一条 token id 序列", "decode(ids[0])"]}),
    ("bench_device", ValueError, lambda: measured("gpu"),
     {"en": ['exist for device "cpu" and "cuda"', "'gpu'"], "de": ['für die Geräte "cpu" und "cuda"'],
      "zh": ['只有 "cpu" 和 "cuda" 两种设备']}),
]


@pytest.mark.parametrize("key, exception, call, words", CASES, ids=[case[0] for case in CASES])
def test_each_wrong_input_gets_its_message_in_every_language(key, exception, call, words):
    assert set(words) == {"en", "de", "zh"}
    assert_message_in_languages(exception, call, words)


def test_every_new_message_has_a_case():
    from attnlab.i18n import catalog

    new = {"mask_type", "mask_dtype", "mask_additive", "mask_shape", "mask_empty", "mask_future", "position_ids",
           "position_ids_range", "block_size_rope", "cache_dtype", "decode_shape", "keep_additive", "keep_values",
           "part_whole_model", "bench_device"}
    assert new <= {key.removeprefix("error.") for key in catalog()}
    assert {case[0] for case in CASES} == new


def test_right_masks_still_run_and_a_padding_row_that_reads_nothing_is_allowed():
    model = small_gpt()
    allowed = ALLOWED.clone()
    allowed[1, :, :2] = False  # left padding: the two pad queries of row 1 read nothing
    with torch.no_grad():
        assert forward_with_mask(model, IDX, allowed, POSITIONS).shape == (2, T, 50)
        assert forward_with_mask(model, IDX, ALLOWED[0, 0], torch.arange(T)).shape == (2, T, 50)  # [T, T] and [T]
    bidirectional = small_gpt(causal=False)
    with torch.no_grad():
        forward_with_mask(bidirectional, IDX, torch.ones(T, T, dtype=torch.bool), POSITIONS)  # an encoder may read ahead


def test_a_rope_model_decodes_past_block_size_with_a_window_cache():
    model = small_gpt(positions="rope", window=4, block_size=16)
    prompt = IDX[:1]
    tokens = decode_greedy(model, prompt, 30, WindowKVCache(model.config, 1))
    assert tokens.shape == (1, T + 30)
    assert torch.equal(tokens, model.generate(prompt, 30, use_cache=False))  # recomputation, no cache: same tokens
    with pytest.raises(ValueError, match="position embeddings end there"):  # learned positions still end
        small_gpt(block_size=16)(torch.zeros(1, 17, dtype=torch.long))


def test_decode_still_takes_a_list_a_1d_tensor_and_numpy_ints():
    import numpy as np

    tok = course_tokenizer()
    ids = tok.encode("abc")
    assert tok.decode(ids) == tok.decode(torch.tensor(ids)) == tok.decode(list(np.array(ids))) == "abc"
    assert tok.decode(list(torch.tensor(ids))) == "abc"  # a list of 0-d tensors (iterating a tensor gives them)
    with pytest.raises(TypeError, match="decode takes one sequence"):
        tok.decode(list(torch.tensor([ids, ids])))  # a list of rows


# --- chapters 4-6, second learner walk-through (learn46): one case per new message ---


def _leaky_maps():
    from attnlab.causality import cut_map, dependence_map, jacobian_map

    model = small_gpt()
    return {"prefix": dependence_map(model, IDX[:1]), "cut": cut_map(model, IDX[:1]), "jacobian": jacobian_map(model, IDX[:1])}


def _verdict(*args):
    from attnlab.figures.causality import verdict

    return lambda: verdict(*args)


def _leak_table(maps):
    from attnlab.figures.causality import leak_table

    return lambda: leak_table(maps)


def _leaks_line(leaks):
    from attnlab.figures.causality import leaks_line

    return lambda: leaks_line(leaks)


def _loss_curves(causal, unmasked):
    from attnlab.figures.causality import loss_curves_figure

    return lambda: loss_curves_figure(causal, unmasked)


def _jacobian_with(embedding_of):
    from attnlab.causality import assert_causal_jacobian

    model = small_gpt()
    return lambda: assert_causal_jacobian(model, IDX[:1], embedding=embedding_of(model))


def _causal_indices(T_q, T_kv):
    from attnlab.masks import causal_allowed_from_indices

    return lambda: causal_allowed_from_indices(T_q, T_kv)


LEARNER_46_CASES = [  # (key, exception, call, {lang: words})
    ("generate_block_size", ValueError, lambda: small_gpt(block_size=16).generate(IDX[:1], 20),
     {"en": ["a prompt of length T = 6 and max_new_tokens = 20: positions 0..25", "block_size = 16",
             "max_new_tokens <= 10", "idx[:, -block_size:]"],
      "de": ["einen Prompt der Länge T = 6", "max_new_tokens <= 10"], "zh": ["提示词长度为 T = 6", "不超过 10"]}),
    ("cache_device", ValueError,
     lambda: small_gpt()(IDX[:1], cache=KVCache(small_gpt().config, 1, 10, device="meta")),
     {"en": ["The cache lies on meta, the model on cpu", 'device="cpu"'],
      "de": ["Der Cache liegt auf meta, das Modell auf cpu"], "zh": ["缓存位于 meta，模型却位于 cpu"]}),
    ("more_queries_than_keys", ValueError, _causal_indices(5, 3),
     {"en": ["more queries than keys (T_q = 5 > T_kv = 3)"], "de": ["mehr Queries als Keys (T_q = 5 > T_kv = 3)"],
      "zh": ["查询多于键（T_q = 5 > T_kv = 3）"]}),
    ("loss_curves_values", TypeError, _loss_curves("3.1 2.0", [3.0, 1.0]),
     {"en": ["causal must be the training losses, one number per step", "'3.1 2.0'"],
      "de": ["causal müssen die Trainings-Losses sein"], "zh": ["causal 必须是训练损失"]}),
    ("loss_curves_length", ValueError, _loss_curves([3.0, 2.0, 1.0], [3.0, 1.0]),
     {"en": ["causal has 3 losses, unmasked 2"], "de": ["causal hat 3 Losses, unmasked 2"],
      "zh": ["causal 有 3 个损失，unmasked 有 2 个"]}),
    ("leak_test", ValueError, _verdict("prefx", torch.zeros(3, 3)),
     {"en": ["test must be one of prefix, cut, jacobian; got 'prefx'"], "de": ["test muss einer von prefix, cut, jacobian sein"],
      "zh": ["test 必须是 prefix, cut, jacobian 之一"]}),
    ("leak_map", ValueError, _verdict("prefix", torch.zeros(3, 4)),
     {"en": ["The prefix map must be a square [T, T] tensor", "Tensor (3, 4)"],
      "de": ["Die Karte des Tests prefix muss ein quadratischer [T, T]-Tensor sein"], "zh": ["prefix 测试的依赖图必须是方形的 [T, T] 张量"]}),
    ("leak_table", ValueError, _leak_table({"causal": torch.zeros(3, 3)}),
     {"en": ["leak_table takes {model label: {test: map}}", "explorer.maps"], "de": ["leak_table erwartet {Modellname: {Test: Karte}}"],
      "zh": ["leak_table 接受 {模型名称: {测试: 依赖图}}"]}),
    ("leaks_line", ValueError, _leaks_line(_leaky_maps()["prefix"]),
     {"en": ["leaks_line takes what find_leaks returns"], "de": ["leaks_line erwartet, was find_leaks zurückgibt"],
      "zh": ["leaks_line 接受 find_leaks 的返回值"]}),
    ("embedding_shape", ValueError, _jacobian_with(lambda model: model.position_embedding),
     {"en": ["for token ids (1, 6) the embedding must return [1, 6, D]", "Embedding returned (6, 32)", "model.token_embedding"],
      "de": ["muss das Embedding [1, 6, D] zurückgeben", "(6, 32)"], "zh": ["嵌入层必须返回 [1, 6, D]", "(6, 32)"]}),
]


@pytest.mark.parametrize("key, exception, call, words", LEARNER_46_CASES, ids=[case[0] for case in LEARNER_46_CASES])
def test_each_chapter_4_to_6_helper_answers_wrong_input_in_every_language(key, exception, call, words):
    assert set(words) == {"en", "de", "zh"}
    assert_message_in_languages(exception, call, words)


def test_every_chapter_4_to_6_message_has_a_case():
    from attnlab.i18n import catalog

    new = {"generate_block_size", "cache_device", "more_queries_than_keys", "loss_curves_values", "loss_curves_length",
           "leak_test", "leak_map", "leak_table", "leaks_line", "embedding_shape"}
    assert new <= {key.removeprefix("error.") for key in catalog()}
    assert {case[0] for case in LEARNER_46_CASES} == new


def test_a_prompt_that_fills_block_size_says_what_to_feed_and_right_inputs_still_run():
    from attnlab.causality import find_leaks
    from attnlab.figures.causality import leak_table, leaks_line, loss_curves_figure, verdict
    from attnlab.masks import causal_allowed_from_indices

    model = small_gpt(block_size=6)
    assert_message_in_languages(ValueError, lambda: model.generate(IDX[:1], 1),
                                {"en": ["exceed the model's block_size = 6", "idx[:, -block_size:]"],
                                 "de": ["höchstens block_size Tokens"], "zh": ["最多只给模型输入 block_size 个 token"]})
    assert model.generate(IDX[:1, :4], 2).shape == (1, 6)
    assert causal_allowed_from_indices(3, 3).equal(torch.ones(3, 3, dtype=torch.bool).tril())
    maps = _leaky_maps()
    assert verdict("prefix", maps["prefix"]) and "causal" in leak_table({"causal": maps})
    assert loss_curves_figure(torch.tensor([3.0, 2.0]), [3.0, 1.0]) is not None
    leaks = find_leaks(small_gpt(), IDX[:1])
    for lang, words in {"en": "prefix test -", "de": "Präfixtest -", "zh": "前缀测试 -"}.items():
        attnlab.set_language(lang)
        try:
            assert words in leaks_line(leaks) and "prefix'" not in leaks_line(leaks)
        finally:
            attnlab.set_language("en")


# --- chapters 4-9, verification walk-through (ver49): one case per new message, and the reused ones ---


def _find_leaks(**options):
    from attnlab.causality import find_leaks

    return lambda: find_leaks(small_gpt(), IDX[:1], **options)


def _batch(generator):
    from attnlab.train import next_token_batch

    return lambda: next_token_batch(torch.arange(40) % 7, 4, 2, generator)


def _train(**options):
    from attnlab.train import train

    return lambda: train(small_gpt(), torch.arange(40) % 7, 1, **options)


VER49_CASES = [  # (key, exception, call, {lang: words})
    ("input_device", ValueError, lambda: small_gpt()(IDX.to("meta")),
     {"en": ["idx lies on meta, the model on cpu", 'idx.to("cpu")'], "de": ["idx liegt auf meta, das Modell auf cpu"],
      "zh": ["idx 位于 meta，模型却位于 cpu"]}),
    ("input_device", ValueError, run(allowed=ALLOWED.to("meta")),
     {"en": ["allowed lies on meta", 'allowed.to("cpu")'], "de": ["allowed liegt auf meta"], "zh": ["allowed 位于 meta"]}),
    ("atol_below_rounding", ValueError, _find_leaks(atol=0),
     {"en": ["atol = 0 is below the rounding step of torch.float32", "even a causal model would look leaky"],
      "de": ["atol = 0 liegt unter der Rundungsschrittweite von torch.float32"], "zh": ["atol = 0 小于 torch.float32 的舍入步长"]}),
    ("generator", TypeError, _batch(0),
     {"en": ["generator must be a torch.Generator", "got 0"], "de": ["generator muss ein torch.Generator sein"],
      "zh": ["generator 必须是 torch.Generator"]}),
    ("generator", TypeError, lambda: small_gpt().generate(IDX[:1], 2, temperature=1.0, generator=0),
     {"en": ["generator must be a torch.Generator", "got 0"], "de": ["generator muss ein torch.Generator sein"],
      "zh": ["generator 必须是 torch.Generator"]}),
    ("positive", ValueError, _train(lr=-1),
     {"en": ["lr must be a positive number; got -1"], "de": ["lr muss eine positive Zahl sein"], "zh": ["lr 必须是正数"]}),
    ("flag", TypeError, lambda: __import__("attnlab.ring", fromlist=["x"]).expected_tiles(8, 2, "contiguous", 2, causal="no"),
     {"en": ["causal must be True or False; got 'no'"], "de": ["causal muss True oder False sein"], "zh": ["causal 必须是 True 或 False"]}),
    ("cache_dtype_arg", TypeError, lambda: KVCache(small_gpt().config, 1, 4, dtype="float32"),
     {"en": ["dtype must be a floating-point torch.dtype", "got 'float32'"], "de": ["dtype muss ein Gleitkomma-torch.dtype sein"],
      "zh": ["dtype 必须是浮点类型的 torch.dtype"]}),
    ("cache_dtype_arg", TypeError, lambda: WindowKVCache(small_gpt().config, 1, window=4, dtype=torch.long),
     {"en": ["dtype must be a floating-point torch.dtype", "got torch.int64"], "de": ["torch.int64"], "zh": ["torch.int64"]}),
    ("gpt_targets_ignored", ValueError, lambda: small_gpt()(IDX, torch.full_like(IDX, -100)),
     {"en": ["Every target is -100", "would be nan"], "de": ["Jedes Ziel ist -100", "maskierten Sprachmodellieren"],
      "zh": ["所有目标都是 -100", "nan"]}),
    ("gpt_targets_range", ValueError, lambda: small_gpt()(IDX, torch.full_like(IDX, 60)),
     {"en": ["targets must be token ids between 0 and vocab_size - 1 = 49, or -100", "from 60 to 60"],
      "de": ["targets müssen Token-IDs zwischen 0 und vocab_size - 1 = 49 sein"], "zh": ["targets 必须是 0 到 vocab_size - 1 = 49 之间的 token id"]}),
]


@pytest.mark.parametrize("key, exception, call, words", VER49_CASES, ids=[f"{case[0]}-{i}" for i, case in enumerate(VER49_CASES)])
def test_each_chapter_4_to_9_helper_answers_wrong_input_in_every_language(key, exception, call, words):
    assert set(words) == {"en", "de", "zh"}
    assert_message_in_languages(exception, call, words)


def test_a_causal_model_passes_at_the_default_atol_and_right_batches_still_come():
    from attnlab.causality import find_leaks
    from attnlab.train import next_token_batch

    assert find_leaks(small_gpt(), IDX[:1]) == {"prefix": None, "cut": None, "jacobian": None}
    targets = IDX.masked_fill(IDX % 2 == 0, -100)  # some positions without a loss
    assert torch.isfinite(small_gpt()(IDX, targets)[1])
    x, y = next_token_batch(torch.arange(40), 4, 2, None)
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_every_chapter_4_to_9_verification_message_has_a_case():
    from attnlab.i18n import catalog

    new = {"error.input_device", "ch5.atol_below_rounding", "error.gpt_targets_ignored", "error.gpt_targets_range",
           "error.cache_dtype_arg"}
    assert new <= set(catalog())
    assert {key.removeprefix("error.").removeprefix("ch5.") for key in new} <= {case[0] for case in VER49_CASES}


def test_generate_runs_in_eval_mode_and_gives_the_model_back_in_its_mode():
    model = small_gpt(dropout=0.5).train()
    first = model.generate(IDX[:1], 8)
    assert torch.equal(first, model.generate(IDX[:1], 8)) and torch.equal(first, model.generate(IDX[:1], 8, use_cache=False))
    assert model.training


def test_the_ring_clock_takes_a_device_name_as_well():
    from attnlab.ring import clock

    assert clock("cpu") <= clock(torch.device("cpu"))


def _attention(*args):
    from attnlab.attention import attention

    return lambda: attention(*args)


Q = torch.randn(4, 8)
ATTENTION_CASES = [  # (key, exception, call, {lang: words}): chapter 1's attention() as chapters 4-9 call it
    ("attention_float", TypeError, _attention(Q.long(), Q, Q),
     {"en": ["q must be a floating-point tensor", "int64"], "de": ["q muss ein Gleitkomma-Tensor"],
      "zh": ["q 必须是浮点张量"]}),
    ("attention_dtypes", TypeError, _attention(Q, Q.double(), Q),
     {"en": ["float32, float64 and float32"], "de": ["denselben dtype"], "zh": ["dtype 必须相同"]}),
    ("attention_shapes", ValueError, _attention(Q, torch.randn(4, 7), Q),
     {"en": ["got q [4, 8], k [4, 7], v [4, 8]"], "de": ["passen nicht zusammen"], "zh": ["对不上"]}),
    ("mask_dtype", TypeError, _attention(Q, Q, Q, torch.ones(4, 4).tril()),
     {"en": ["allowed must be a boolean mask", "float32"], "de": ["boolesche Maske"], "zh": ["布尔掩码"]}),
    ("mask_covers", ValueError, _attention(Q, Q, Q, torch.ones(3, 4, dtype=torch.bool)),
     {"en": ["[..., 4, 4]", "got shape [3, 4]"], "de": ["abdecken"], "zh": ["必须覆盖分数"]}),
]


@pytest.mark.parametrize("key, exception, call, words", ATTENTION_CASES, ids=[case[0] for case in ATTENTION_CASES])
def test_attention_answers_wrong_input_in_every_language(key, exception, call, words):
    assert_message_in_languages(exception, call, words)


def test_right_attention_inputs_still_run_and_broadcast():
    from attnlab.attention import attention, causal_attention

    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)  # [B, H, T, d]
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    assert attention(q, k, v, allowed).shape == (2, 2, 5, 4)
    assert attention(q, k, v, allowed[None, None]).equal(causal_attention(q, k, v))
    assert attention(q.half(), k.half(), v.half()).dtype == torch.float16


def test_document_leaks_names_document_ids_that_do_not_fit_the_tokens():
    from attnlab.batching import document_leaks

    tokens = torch.randint(0, 40, (1, 6))
    run = lambda x: torch.nn.functional.one_hot(x, 40).float()  # noqa: E731 - reads nothing across tokens
    assert document_leaks(run, tokens, torch.tensor([[0, 0, 0, 1, 1, 1]]), 40) == [0.0, 0.0]
    for wrong in (torch.tensor([[0, 0, 1, 1]]), torch.zeros(1, 6), [0, 0, 0, 1, 1, 1]):
        assert_message_in_languages(ValueError, lambda wrong=wrong: document_leaks(run, tokens, wrong, 40),
                                    {"en": ["one document id per token", "[1, 6]"], "de": ["eine Dokument-ID"],
                                     "zh": ["一个文档 id"]})
