"""The graded tasks of exercises 6 and 7 grade what they claim: the decode step against a
full recomputation, BERT's rule by its statistics (a fixed or out-of-vocabulary answer
fails), the worked example's numbers.
"""

import torch
from learner_copies import as_learner, learner_copy, learner_tasks

from attnlab import grader, i18n
from attnlab.exercises import all_tasks, ch6, ch7
from attnlab.exercises.ch7.masked_lm import _corrupt_mutant
from attnlab.gpt import GPTConfig, KVCache

TASKS = learner_tasks(all_tasks())  # the grader's answers as a learner would hand them in


def keys(result):
    return {f.problem.key for f in result.failures if not f.drawn}  # the task's cases (the drawn inputs come after)


def test_the_expected_answer_of_a_decode_case_is_the_full_recomputation():
    """Chaining the reference step over a case equals one causal forward pass of the course's module."""
    for case in TASKS["ch6.decode_step"].make_cases():
        state, positions, x, prompt, n_head = case.args
        outs, k, v = ch6._run_decode(ch6.decode_step, state, positions, x, prompt, n_head)
        again, k_full, v_full = ch6._run_decode(ch6._recompute_everything, state, positions, x, prompt, n_head)
        module = ch6.SelfAttention(GPTConfig(vocab_size=1, block_size=x.size(1), n_head=n_head, n_embd=x.size(2)))
        module.load_state_dict(state)
        with torch.no_grad():
            full = module(x + positions)  # [B, T, D]: causal attention over every position at once
        assert torch.allclose(outs, full[:, prompt:], atol=1e-5), case.label
        assert torch.allclose(again, full[:, prompt:], atol=1e-5)
        assert torch.allclose(k, k_full, atol=1e-6) and torch.allclose(v, v_full, atol=1e-6)


def test_a_step_that_cannot_chain_still_gets_a_clear_message():
    reference = TASKS["ch6.decode_step"].reference
    short = grader.grade("ch6.decode_step", lambda *args: (reference(*args)[0], *args[3:]))  # caches not appended
    assert short.points == 0 and "wrong shape" in short.text()  # the keys: returned k_cache — wrong shape
    assert keys(short) <= {"grader.returned_named", "grader.mutant.ch6.decode_step.caches_not_appended"}
    flat = grader.grade("ch6.decode_step", lambda *args: (reference(*args)[0][:, 0], *reference(*args)[1:]))
    assert flat.points == 0 and "wrong shape" in flat.text()


def test_the_worked_example_of_the_memory_task():
    config = GPTConfig(vocab_size=100, n_layer=2, n_head=4, n_embd=64)  # chapter 6's model
    assert ch6.kv_cache_bytes(config, 2, 64, torch.float32) == 131072 == KVCache(config, 2, 64).nbytes


def test_bert_rule_ignoring_the_generator_is_not_random():
    def fixed(ids, mask_id, vocab_size, generator):
        return TASKS["ch7.bert_corrupt"].reference(ids, mask_id, vocab_size, torch.Generator(device=ids.device).manual_seed(0))

    result = grader.grade("ch7.bert_corrupt", fixed)
    assert result.points == 2  # the large cases: the same positions in two calls with one generator, and with two
    assert keys(result) == {"grader.ch7.bert_corrupt.same_each_call"}
    assert all("grader.mlm.not_random" in f.problem.keys() for f in result.failures if not f.drawn)


def test_bert_rule_tokens_outside_the_vocabulary_float_labels_and_wrong_shares_are_named():
    def outside(ids, mask_id, vocab_size, generator):
        inputs, labels = TASKS["ch7.bert_corrupt"].reference(ids, mask_id, vocab_size, generator)
        return inputs.masked_fill((labels != -100) & (inputs != mask_id) & (inputs != ids), vocab_size), labels

    assert "grader.mlm.outside_vocabulary" in keys(grader.grade("ch7.bert_corrupt", outside))

    def float_labels(ids, mask_id, vocab_size, generator):
        inputs, labels = TASKS["ch7.bert_corrupt"].reference(ids, mask_id, vocab_size, generator)
        return inputs, labels.float()

    result = grader.grade("ch7.bert_corrupt", float_labels)
    assert result.points == 0 and keys(result) == {"grader.returned_item"}
    assert "returned value 2 of 2 — wrong dtype" in result.text()

    rate_30 = grader.grade("ch7.bert_corrupt", _corrupt_mutant(rate=0.3))
    assert keys(rate_30) == {"grader.mlm.rate"} and "expected about 15.0%" in rate_30.text()
    half_random = grader.grade("ch7.bert_corrupt", _corrupt_mutant(masked=0.5))
    assert keys(half_random) == {"grader.mlm.shares"}
    for lang in i18n.LANGUAGES:
        assert "80" in half_random.text(lang)




def test_the_memory_task_counts_key_value_heads():
    """A GQA and an MQA case: the cache holds H_kv heads, not n_head (the reference once used n_head)."""
    def with_query_heads(config, batch_size, seq_len, dtype):
        return 2 * config.n_layer * batch_size * config.n_head * config.head_dim * seq_len * dtype.itemsize

    shared = [case for case in TASKS["ch6.kv_cache_bytes"].make_cases() if case.args[0].kv_heads < case.args[0].n_head]
    assert len(shared) == 2
    for case in shared:
        config, B, T, dtype = case.args
        assert ch6.kv_cache_bytes(*case.args) == KVCache(config, B, T, device="meta", dtype=dtype).nbytes
    result = grader.grade("ch6.kv_cache_bytes", with_query_heads)
    assert result.points == result.total - len(shared) - 1  # the drawn inputs: tried once every case passes
    assert keys(result) == {"grader.mutant.ch6.kv_cache_bytes.query_heads"}


def test_a_causal_bias_answer_to_the_decode_mask_is_named_in_every_language():
    """causal_lower_right (chapter 6) returns a CausalBias, whose shape is not the mask's."""
    from torch.nn.attention.bias import causal_lower_right

    result = grader.grade("ch6.decode_mask", lambda T_q, T_kv: causal_lower_right(T_q, T_kv))
    assert result.points == 0 and keys(result) == {"grader.causal_bias"}, result.text()
    for lang in i18n.LANGUAGES:
        assert i18n.tr("grader.causal_bias", lang=lang) in result.text(lang)
    materialized = grader.grade("ch6.decode_mask", lambda T_q, T_kv: causal_lower_right(T_q, T_kv)._materialize())
    assert materialized.passed
