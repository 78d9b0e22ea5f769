"""The course's small GPT, its KV cache, tokenizer and training loop."""

import pytest
import torch

import attnlab
from attnlab.gpt import GPT, GPTConfig, KVCache
from attnlab.tokenizer import MASK, UNKNOWN, corpus, course_tokenizer
from attnlab.train import evaluate, next_token_batch, train
from language_checks import assert_message_in_languages
from small_models import small_gpt


small = small_gpt


def test_shapes_loss_and_parameter_count():
    model = small()
    idx = torch.randint(0, 50, (2, 10))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 10, 50) and loss.ndim == 0
    D, V, T, L = 32, 50, 32, 2
    per_block = 4 * D * D + 8 * D * D + 2 * D  # LayerNorm(bias=False): D weights each
    assert model.num_parameters() == V * D + T * D + L * per_block + D


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_explicit_attention_equals_sdpa(norm):
    a, b = small(norm=norm), small(norm=norm, attention="explicit")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 50, (2, 12))
    assert torch.allclose(a(idx)[0], b(idx)[0], atol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_attention_dropout_applies_on_both_paths_and_only_in_training(attention):
    from attnlab.gpt import SelfAttention

    torch.manual_seed(0)
    layer = SelfAttention(GPTConfig(vocab_size=50, n_embd=32, dropout=0.5, attention=attention))
    x = torch.randn(2, 9, 32)
    evaluated = layer.eval()(x)
    torch.manual_seed(1)
    trained = layer.train()(x)
    assert not torch.allclose(trained, evaluated, atol=1e-3)  # explicit skipped its dropout before: equal here
    torch.manual_seed(1)
    assert torch.equal(layer(x), trained)  # the same seed, the same dropped weights
    with torch.no_grad():  # dropout keeps the expected value (rescaled by 1 / (1 - p)): the mean comes back
        many = torch.stack([layer(x) for _ in range(400)]).mean(0)
    assert torch.allclose(many, evaluated, atol=0.1) and (trained - evaluated).abs().max() > 0.1
    no_dropout = SelfAttention(GPTConfig(vocab_size=50, n_embd=32, attention=attention))
    assert torch.equal(no_dropout.train()(x), no_dropout.eval()(x))


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_runs_one_forward_pass_per_new_token_but_none_after_the_last(use_cache):
    model = small()
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape))
    prompt = torch.randint(0, 50, (2, 5))
    out = model.generate(prompt, 4, use_cache=use_cache)
    assert out.shape == (2, 9) and len(calls) == 4  # prefill + 3 steps; the 4th token is never fed back
    assert calls[0] == (2, 5) and calls[-1] == ((2, 1) if use_cache else (2, 8))
    calls.clear()
    assert torch.equal(model.generate(prompt, 0), prompt) and calls == []


def test_the_causal_model_passes_the_prefix_test_and_the_unmasked_one_fails():
    a = torch.randint(0, 50, (1, 12))
    b = a.clone()
    b[0, 8:] = (b[0, 8:] + 1) % 50
    causal, leaky = small(), small(causal=False)
    assert torch.equal(causal(a)[0][:, :8], causal(b)[0][:, :8])
    assert not torch.allclose(leaky(a)[0][:, :8], leaky(b)[0][:, :8], atol=1e-5)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("prompt_len", [1, 3, 7])
@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_cached_generation_equals_recomputation(batch, prompt_len, attention):
    model = small(attention=attention)
    prompt = torch.randint(0, 50, (batch, prompt_len))
    with_cache = model.generate(prompt, 12, use_cache=True)
    without = model.generate(prompt, 12, use_cache=False)
    assert torch.equal(with_cache, without)
    # the logits of every decode step equal those of the full forward pass
    cache = KVCache(model.config, batch, with_cache.size(1))
    step_logits = [model(with_cache[:, :prompt_len], cache=cache)[0]]
    for t in range(prompt_len, with_cache.size(1)):
        step_logits.append(model(with_cache[:, t:t + 1], cache=cache)[0])
    full = model(with_cache)[0]
    assert torch.allclose(torch.cat(step_logits, dim=1), full, atol=1e-5)


def test_chunked_prefill_uses_the_lower_right_mask():
    model = small()
    idx = torch.randint(0, 50, (2, 15))
    cache = KVCache(model.config, 2, 15)
    chunks = [model(idx[:, s:e], cache=cache)[0] for s, e in ((0, 6), (6, 11), (11, 15))]
    assert torch.allclose(torch.cat(chunks, dim=1), model(idx)[0], atol=1e-5)


def test_cache_memory_follows_the_formula():
    config = GPTConfig(vocab_size=50, block_size=64, n_layer=3, n_head=4, n_embd=32)
    cache = KVCache(config, batch_size=2, max_len=40)
    assert cache.nbytes == 2 * 3 * 2 * 4 * 40 * 8 * 4  # 2 (K and V) x L x B x H x T x d x 4 bytes


def test_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(vocab_size=10, n_embd=30, n_head=4)
    model = small()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 40, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="causal"):
        small(causal=False).generate(torch.zeros(1, 2, dtype=torch.long), 3)
    cache = KVCache(model.config, 1, 4)
    with pytest.raises(ValueError, match="max_len = 4"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    assert cache.pos == 0  # the failed call wrote nothing


CONFIG = GPTConfig(vocab_size=50, block_size=16)
IDS = torch.zeros(1, 3, dtype=torch.long)


def full_cache() -> KVCache:
    cache = KVCache(CONFIG, 1, 4)
    cache.advance(4)
    return cache

CACHE_CASES = [  # (exception, call, English words, German words)
    (TypeError, lambda: KVCache(None, 1, 4), ["KVCache needs the model's GPTConfig", "got None"],
     ["KVCache braucht die GPTConfig des Modells"]),
    (ValueError, lambda: KVCache(CONFIG, 0, 4), ["batch_size must be at least 1; got 0"],
     ["batch_size muss mindestens 1 sein"]),
    (TypeError, lambda: KVCache(CONFIG, 1.5, 4), ["batch_size must be a whole number"], ["ganze Zahl"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 100), ["max_len must be between 1 and the model's block_size = 16; got 100"],
     ["max_len muss zwischen 1 und der block_size des Modells (16) liegen"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 0), ["got 0"], ["übergeben wurde 0"]),
    (ValueError, lambda: GPT(CONFIG)(torch.zeros(1, 6, dtype=torch.long), cache=KVCache(CONFIG, 1, 4)),
     ["too small: pos + n = 0 + 6 = 6 positions (filled + new), but max_len = 4", "max_len=6"],
     ["zu klein: pos + n = 0 + 6 = 6 Positionen"]),
    (ValueError, lambda: GPT(CONFIG)(torch.zeros(2, 3, dtype=torch.long), cache=KVCache(CONFIG, 1, 4)),
     ["made for batch_size = 1, but the input's batch has B = 2", "batch_size=2"], ["für batch_size = 1 angelegt"]),
    (ValueError, lambda: GPT(CONFIG)(IDS, cache=KVCache(GPTConfig(vocab_size=50, block_size=16, n_layer=1), 1, 4)),
     ["made for another model", "L=1", "L=2"], ["gehört zu einem anderen Modell"]),
    (ValueError, lambda: GPT(GPTConfig(vocab_size=50, block_size=16, causal=False))(IDS, cache=KVCache(CONFIG, 1, 4)),
     ["only valid for a causal model"], ["nur bei einem kausalen Modell gültig"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 4).advance(5), ["pos + n = 0 + 5 = 5", "max_len = 4"], ["Cache ist zu klein"]),
    (ValueError, lambda: full_cache().advance(1), ["pos + n = 4 + 1 = 5 positions (filled + new), but max_len = 4"],
     ["pos + n = 4 + 1 = 5 Positionen (belegte + neue)"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 4).advance(-1), ["n must be at least 0; got -1"], ["n muss mindestens 0"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 4).update(0, torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 2, 8)),
     ["[B=1, H=4, T_new, d=16]", "(1, 4, 2, 8)"], ["Der Cache speichert Keys und Values der Form"]),
    (ValueError, lambda: KVCache(CONFIG, 1, 4).update(9, torch.zeros(1, 4, 2, 16), torch.zeros(1, 4, 2, 16)),
     ["layer must be between 0 and 1; got 9"], ["layer muss zwischen 0 und 1 liegen"]),
    (ValueError, lambda: GPT(CONFIG)(torch.zeros(3, dtype=torch.long)), ["idx must be a [B, T] tensor"],
     ["idx muss ein [B, T]-Tensor"]),
    # what a learner passes to the chapter-4 helpers
    (ValueError, lambda: GPT(CONFIG)(torch.tensor([[3, 60]])), ["token ids must lie between 0 and vocab_size - 1 = 49", "from 3 to 60"],
     ["Token-IDs müssen zwischen 0 und vocab_size - 1 = 49 liegen"]),
    (ValueError, lambda: GPT(CONFIG)(IDS, torch.zeros(3, dtype=torch.long)), ["targets must be", "(1, 3)"],
     ["targets muss"]),
    (ValueError, lambda: GPT(CONFIG)(IDS, IDS.float()), ["targets must be", "float32"], ["targets muss"]),
    (ValueError, lambda: GPT(CONFIG).generate(torch.zeros(1, 0, dtype=torch.long), 3), ["The prompt is empty"],
     ["Der Prompt ist leer"]),
    (ValueError, lambda: GPT(CONFIG).generate([1, 2], 3), ["idx must be a [B, T] tensor", "[1, 2]"],
     ["idx muss ein [B, T]-Tensor"]),
    (ValueError, lambda: GPT(CONFIG).generate(IDS, 20), ["a prompt of length T = 3 and max_new_tokens = 20: positions 0..22",
     "block_size = 16", "max_new_tokens <= 13"], ["einen Prompt der Länge T = 3", "max_new_tokens <= 13"]),
    (ValueError, lambda: GPT(CONFIG).generate(torch.tensor([[]]), 3), ["The prompt is empty"], ["Der Prompt ist leer"]),
    (ValueError, lambda: GPT(CONFIG).generate(torch.tensor([]), 3), ["The prompt is empty"], ["Der Prompt ist leer"]),
    (ValueError, lambda: GPT(CONFIG).generate(IDS, 2, temperature=-1.0), ["temperature must be a number >= 0"],
     ["temperature muss eine Zahl >= 0 sein"]),
    (ValueError, lambda: next_token_batch([1, 2, 3], 2, 4, torch.Generator()), ["data must be a 1-D torch.long"],
     ["data muss ein eindimensionaler"]),
    (ValueError, lambda: next_token_batch(torch.arange(5), 16, 4, torch.Generator()), ["longer than block_size = 16"],
     ["länger als block_size = 16"]),
    (TypeError, lambda: train(GPT(CONFIG), torch.arange(40), steps=2.5), ["steps must be a whole number"],
     ["ganze Zahl"]),
    (TypeError, lambda: course_tokenizer().encode(5), ["encode takes a string"], ["encode erwartet eine Zeichenkette"]),
    (ValueError, lambda: course_tokenizer().encode("5 € 😀 €"),
     ["Not in the tokenizer's vocabulary", "'€' (U+20AC) at position 2, '😀' (U+1F600) at position 4.", 'errors="replace"'],
     ["Nicht im Vokabular des Tokenizers", "'€' (U+20AC) an Position 2, '😀' (U+1F600) an Position 4."]),
    (ValueError, lambda: course_tokenizer().encode("abc", errors="ignore"), ['errors must be "strict"', "'ignore'"],
     ['errors muss "strict"']),
    (ValueError, lambda: course_tokenizer().decode([10**6]), ["token ids must lie in"], ["Token-IDs müssen zwischen"]),
    (ValueError, lambda: corpus("fr"), ["lang must be one of en, de, zh"], ["lang muss einer dieser Werte sein"]),
]


@pytest.mark.parametrize("exception, call, english, german", CACHE_CASES)
def test_the_cache_answers_bad_input_in_the_readers_language(exception, call, english, german):
    assert_message_in_languages(exception, call, {"en": english, "de": german})


def test_tokenizer_covers_three_languages_and_round_trips():
    tok = course_tokenizer()
    for lang in ("en", "de", "zh"):
        text = corpus(lang)[:500]
        assert tok.decode(tok.encode(text)) == text
        assert 0 not in tok.encode(corpus(lang))
    assert tok.decode(tok.encode("Größe 注意力 ∮", errors="replace")) == "Größe 注意力 " + UNKNOWN
    for lang in ("en", "de", "zh"):  # the course's example sentence has no unknown character
        assert 0 not in tok.encode(attnlab.tr("sentence", lang=lang)), lang
    assert tok.encode(MASK) == [tok.mask_id] == [1]
    with pytest.raises(ValueError, match="0.."):
        tok.decode([tok.vocab_size])


def test_batches_are_shifted_by_one_and_training_is_deterministic():
    data = torch.arange(100)
    x, y = next_token_batch(data, 8, 4, torch.Generator().manual_seed(0))
    assert torch.equal(y, x + 1)
    tok = course_tokenizer()
    tokens = torch.tensor(tok.encode(corpus("en")[:3000]))
    runs = []
    for _ in range(2):
        model = small(vocab_size=tok.vocab_size)
        runs.append(train(model, tokens, steps=5, batch_size=4, block_size=16))
    assert runs[0] == runs[1] and runs[0][-1] < runs[0][0]
    assert evaluate(model, tokens, block_size=16, batches=2) > 0


def test_training_uses_one_thread_and_restores_the_setting():
    tok = course_tokenizer()
    tokens = torch.tensor(tok.encode(corpus("en")[:3000]))
    previous = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(train(small(vocab_size=tok.vocab_size), tokens, steps=4, batch_size=4, block_size=16))
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(previous)
    assert runs[0] == runs[1]  # the same losses, bit for bit, whatever the caller's thread count


@pytest.mark.parametrize("options, error, match", [
    ({"causal": "False"}, TypeError, "causal must be True or False; got 'False'"),  # error.flag: a non-empty string is true
    ({"bias": 1}, TypeError, "bias must be True or False; got 1"),
    ({"dropout": 1.5}, ValueError, "dropout must be a number from 0 to 1"),  # error.config_dropout
    ({"dropout": "0.1"}, ValueError, "dropout must be a number from 0 to 1"),
])
def test_config_flags_and_dropout_are_checked(options, error, match):
    with pytest.raises(error, match=match):
        GPTConfig(vocab_size=10, **options)
