"""The graded tasks of exercises 4 and 5 grade what they claim: the greedy loop equals the
course's generate while the sequence fits, the causality maps equal the course's tests on
every case model, the case models have clear argmaxes and leaks far above rounding noise.

(The generic checks, reference and alternatives full marks, every mutant named in three
languages, stubs zero, run for these tasks in test_grader.py and test_grader_notebooks.py.)
"""

import pytest
import torch

from attnlab import grader, i18n
from attnlab.causality import cut_map, dependence_map
from attnlab.exercises import all_tasks, ch4, ch5

from learner_copies import as_learner, learner_copy, learner_tasks  # noqa: E402
TASKS = learner_tasks(all_tasks())  # the grader's answers as a learner would hand them in
OURS = [t for t in TASKS if t.startswith(("ch4.", "ch5."))]


def keys(result):
    return {f.problem.key for f in result.failures}


def test_greedy_reference_equals_the_course_generate_while_it_fits_and_argmaxes_are_clear():
    for case in TASKS["ch4.greedy_generate"].make_cases():
        config, state, prompt, n_new = case.args
        model = ch4.build_gpt(config, state, prompt.device)
        out = ch4.greedy_generate(model, prompt, n_new)
        fits = min(n_new, config.block_size - prompt.size(1))
        with torch.no_grad():
            assert torch.equal(out[:, :prompt.size(1) + fits], model.generate(prompt, fits, use_cache=True))
            for t in range(prompt.size(1), out.size(1)):
                logits = model(out[:, max(0, t - config.block_size):t])[0][:, -1]  # [B, V]
                top2 = logits.topk(2, dim=-1).values
                assert (top2[:, 0] - top2[:, 1]).min() > 1e-3, case.label  # no near-tie: every way agrees


def test_the_cases_cross_block_size_and_avoid_the_worked_example():
    sizes = [(B, T0, n, bs) for B, T0, n, bs, *_ in ch4.GENERATE_SIZES]
    assert sum(T0 + n > bs for _, T0, n, bs in sizes) >= 3
    assert (1, 3, 5) not in [(B, T0, bs) for B, T0, _, bs in sizes]  # the notebook: B=1, prompt 3, block_size 5
    assert (1, 6) not in ch4.WINDOW_SIZES and (2, 3, 4) not in ch4.LOSS_SIZES
    assert all(T != 8 and T != 16 for _, T, *_ in ch5.MODELS)  # the notebooks show T=8 and chapter 5 T=16


def test_the_causality_maps_equal_the_course_tests_and_leaks_are_far_above_noise():
    future = {}
    for case in TASKS["ch5.prefix_leaks"].make_cases():
        variant, config, state, idx = case.args
        T = idx.size(1)
        above = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
        model = ch5.build_model(variant, config, state, idx.device)
        prefix, cut = dependence_map(model, idx), cut_map(model, idx)
        for leak_map, task_id in ((prefix, "ch5.prefix_leaks"), (cut, "ch5.cut_leaks")):
            values, atol = leak_map[above], case.kwargs["atol"]
            assert ((values < atol / 10) | (values > 100 * atol)).all(), (variant, task_id)  # no borderline pair
            expected = TASKS[task_id].run(TASKS[task_id].reference, case)
            assert torch.equal(expected, (leak_map > atol) & above), (variant, task_id)
        future[variant] = (int(TASKS["ch5.prefix_leaks"].run(ch5.prefix_leaks, case).sum()),
                           int(TASKS["ch5.cut_leaks"].run(ch5.cut_leaks, case).sum()))
    assert future["causal"] == future["dropout"] == future["whisper"] == (0, 0)
    assert future["positions_from_end"][0] == 0 < future["positions_from_end"][1]  # only the cut test sees it
    assert all(p > 0 and c > 0 for v, (p, c) in future.items()
               if v not in ("causal", "dropout", "positions_from_end", "whisper"))


def test_the_whisper_model_moves_later_logits_a_little_on_every_numeric_path():
    """Below atol, so no leak; above 0, so a test that ignores atol is caught whatever the rounding."""
    case = next(c for c in TASKS["ch5.prefix_leaks"].make_cases() if c.args[0] == "whisper")
    variant, config, state, idx = case.args
    values = dependence_map(ch5.build_model(variant, config, state, idx.device), idx)
    above = values[torch.ones_like(values, dtype=torch.bool).triu(diagonal=1)]
    assert (above > 100 * torch.finfo(torch.float32).eps).all() and (above < case.kwargs["atol"] / 10).all()
    assert not TASKS["ch5.prefix_leaks"].run(ch5.prefix_leaks, case).any()
    ignored = TASKS["ch5.prefix_leaks"].run(ch5.PREFIX_LEAKS.mutants["atol_ignored"], case)  # change > 0
    assert torch.equal(ignored, torch.ones_like(ignored).triu(diagonal=1))  # every later token, on any path


def test_the_dropout_model_is_handed_over_in_training_mode_and_a_fresh_model_per_call():
    case = next(c for c in TASKS["ch5.prefix_leaks"].make_cases() if c.args[0] == "dropout")
    seen = []

    def spy(model, idx, atol=ch5.ATOL):
        seen.append(model.training)
        model.eval()  # a learner who does not restore the mode changes nothing for the next call
        return ch5.prefix_leaks(model, idx, atol)

    TASKS["ch5.prefix_leaks"].run(spy, case)
    TASKS["ch5.prefix_leaks"].run(spy, case)
    assert seen == [True, True]


def test_the_loss_reference_is_what_the_course_gpt_returns():
    config = ch4.GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=2, n_embd=8)
    model = ch4.build_gpt(config, ch4.random_gpt_state(config, torch.Generator().manual_seed(0)), "cpu")
    windows = torch.randint(0, 17, (3, 9), generator=torch.Generator().manual_seed(1))
    x, y = ch4.shifted_targets(windows)
    with torch.no_grad():
        logits, loss = model(x, y)
    assert torch.allclose(ch4.next_token_loss(logits, y), loss)
    assert torch.isclose(ch4.next_token_loss(torch.zeros(2, 3, 4), torch.tensor([[0, 1, 2], [3, 0, 1]])),
                         torch.tensor(4.0).log())  # the notebook's "predict first"


def test_a_prefix_test_that_always_writes_token_0_is_caught():
    """The no_mask case holds token 0 in the middle: a 'change' to token 0 changes nothing there."""
    case = next(c for c in TASKS["ch5.prefix_leaks"].make_cases() if c.args[0] == "no_mask")
    idx = case.args[3]
    assert int(idx[0, idx.size(1) // 2]) == 0

    def always_zero(model, idx, atol=1e-4):
        model.eval()
        T = idx.size(1)
        changed = idx.repeat(T, 1)
        changed[torch.arange(T), torch.arange(T)] = 0
        change = (model(changed)[0] - model(idx)[0]).abs().amax(dim=-1).T
        return (change > atol).triu(1)

    result = grader.grade("ch5.prefix_leaks", always_zero)
    assert not result.passed and "grader.mutant.ch5.prefix_leaks.same_token" in keys(result), result.text()


def test_the_optional_block_task_grades_by_the_causality_tests():
    """A leaking block loses every case with the pair that assert_causal found; one that hands the
    work to the course's own block (block(x)) is refused by name (docs/exercises.md); the mutants are named."""
    task = TASKS["ch4.causal_block"]
    reference = grader.grade("ch4.causal_block", task.reference)
    assert reference.points == reference.total == len(ch4.BLOCK_SIZES) + 2  # and the drawn inputs, the gradients
    for name in ("no_mask", "softmax_over_queries", "merge_without_transpose"):
        result = grader.grade("ch4.causal_block", task.mutants[name])
        cases = [f for f in result.failures if not f.drawn]
        assert {f.problem.key for f in cases} == {f"grader.mutant.ch4.causal_block.{name}"}
        assert all(f.problem.detail.key == "grader.ch4_block_leak" for f in cases), name
    assert "later input" in grader.grade("ch4.causal_block", task.mutants["no_mask"]).text("en")
    copied = grader.grade("ch4.causal_block", lambda block, x: block(x))  # the task asks to write the block's forward
    assert copied.points == 0 and {f.problem.key for f in copied.failures if not f.drawn} == {"grader.course_copy"}
    unscaled = grader.grade("ch4.causal_block", task.mutants["no_scale"])
    assert all(f.problem.detail.key != "grader.ch4_block_leak" for f in unscaled.failures if not f.drawn)  # causal, only wrong


def test_the_block_task_sees_every_leaking_pair_so_a_mask_one_diagonal_too_wide_is_not_no_mask():
    """assert_causal reports the first pair only, (0, 1) for every leaking block; the task keeps
    every pair, so a block that also reads the next position is named for what it does."""
    case = TASKS["ch4.causal_block"].make_cases()[0]
    T = case.args[2].size(1)
    _, leaks = TASKS["ch4.causal_block"].run(ch4.CAUSAL_BLOCK.mutants["reads_next"], case)
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.equal(leaks[0], above & ~above.triu(2))  # output t moves with input t + 1 only
    _, leaks = TASKS["ch4.causal_block"].run(ch4.CAUSAL_BLOCK.mutants["no_mask"], case)
    assert torch.equal(leaks[0], above)  # with every later input

    def peeks(block, x):  # the right block, plus a little of the next position through the residual stream
        return ch4.causal_block(block, x) + 1e-3 * x.roll(-1, dims=1)

    named = {k for f in grader.grade("ch4.causal_block", peeks).failures for k in f.problem.keys()}
    assert "grader.mutant.ch4.causal_block.reads_next" in named
    assert "grader.mutant.ch4.causal_block.no_mask" not in named
