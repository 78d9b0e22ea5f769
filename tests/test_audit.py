"""attnlab.audit: chapter 5's tests on tiny Hugging Face models (chapter 10). Nothing is downloaded."""

import subprocess
import sys
import pathlib

import pytest
import torch

pytest.importorskip("transformers")

from attnlab import i18n  # noqa: E402
from attnlab.audit import (Adapter, audit, audit_table, course_mask, generate_matches, library_mask, main,  # noqa: E402
                           tiny_model)

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def english():
    i18n.set_language("en")
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "gemma3"])
def test_every_decoder_is_causal_under_eager_and_sdpa_padded_or_not_and_its_cache_agrees(name):
    rows = audit(name, T=6)
    assert len(rows) == 4 and all(row.causal and row.cache_ok and row.as_expected for row in rows)


def test_bert_and_t5s_encoder_read_ahead_and_t5s_decoder_is_causal():
    bert = audit("bert", implementations=("sdpa",), paddings=("none",), T=6)
    assert [row.leaks["prefix"] for row in bert] == [(0, 1)] and bert[0].as_expected and bert[0].cache_ok is None
    t5 = {row.part: row for row in audit("t5", implementations=("eager",), T=6)}
    assert not t5["encoder"].causal and t5["decoder"].causal and t5["decoder"].cache_ok
    assert all(row.as_expected for row in t5.values())


def test_a_layer_that_adds_its_own_mask_leaks_only_on_sdpas_fast_path():
    rows = {row.padding: row for row in audit("llama", implementations=("audit_own_mask",), T=6)}
    assert rows["none"].leaks == {"prefix": (0, 1), "cut": (0, 1), "jacobian": (0, 1)}
    assert rows["none"].cache_ok is False and not rows["none"].as_expected
    assert rows["left"].causal and rows["left"].cache_ok  # padding makes the library build the mask


def test_an_attention_function_that_drops_the_mask_leaks_everywhere():
    rows = audit("llama", implementations=("audit_drops_mask",), T=6)
    assert all(not row.causal and not row.as_expected for row in rows)


def test_the_librarys_masks_equal_the_course_mask_builder():
    for impl in ("eager", "sdpa"):
        model = tiny_model("llama", impl)
        keep = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
        assert torch.equal(library_mask(model, 6, keep), course_mask(6, keep=keep))
        positions = torch.tensor([[0, 1, 2, 0, 1, 0]])  # three packed sequences
        assert torch.equal(library_mask(model, 6, position_ids=positions), course_mask(6, position_ids=positions))
        assert torch.equal(library_mask(model, 3, past=5), course_mask(3, 8))  # lower right
    window = tiny_model("mistral", "eager")
    assert torch.equal(library_mask(window, 7, window=True), course_mask(7, window=4))
    sdpa = tiny_model("llama", "sdpa")
    assert library_mask(sdpa, 6) is None and library_mask(sdpa, 1, past=5) is None  # the is_causal fast path
    assert library_mask(tiny_model("llama", "eager"), 6) is not None


def test_generate_with_and_without_the_cache_agrees_with_left_padding():
    model = tiny_model("llama", "sdpa")
    prompts = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(0))
    assert generate_matches(model, prompts, [6, 3], new_tokens=3) == {"tokens": True, "logits": True}
    leaky = tiny_model("llama", "audit_own_mask")
    assert generate_matches(leaky, prompts, [6, 6], new_tokens=3)["logits"] is False  # no padding: the leak


def test_the_table_speaks_the_readers_language():
    rows = audit("llama", implementations=("sdpa",), paddings=("none",), T=4)
    i18n.set_language("de")
    table = audit_table(rows)
    assert "Abschneidetest" in table and "muss kausal sein: ok" in table
    i18n.set_language("zh")
    assert "截断测试" in audit_table(rows)


def test_the_verdict_names_a_leak_only_where_the_tests_found_one():
    from attnlab.audit import AuditRow

    none = {"prefix": None, "cut": None, "jacobian": None}
    rows = [AuditRow("m", "sdpa", "none", None, True, none, False),  # cache disagrees, no leak found
            AuditRow("m", "sdpa", "left", None, True, dict(none, prefix=(0, 1)), True, True)]
    try:
        for lang, ok, differ, leak in [("en", "must be causal: ok", "must be causal: OUTPUTS DIFFER",
                                        "must be causal: LEAK"),
                                       ("zh", "应为因果：符合", "应为因果：结果不一致", "应为因果：泄露")]:
            i18n.set_language(lang)
            first, second = audit_table(rows).splitlines()[1:]
            assert first.endswith(differ) and second.endswith(leak), (first, second)
            assert audit_table([AuditRow("m", "sdpa", "none", None, True, none, True)]).endswith(ok)
    finally:
        i18n.set_language("en")


def test_bad_input_gets_a_clear_message():
    with pytest.raises(ValueError, match="unknown model: gpt5"):
        audit("gpt5")
    with pytest.raises(ValueError, match="padding must be one of"):
        Adapter(tiny_model("llama"), padding="top")
    with pytest.raises(ValueError, match=r"Pass part='encoder' or part='decoder', for example Adapter\(model, part="):
        Adapter(tiny_model("t5"))  # chapter 10's one-line adapter routes an encoder-decoder here (issue 52)
    with pytest.raises(TypeError, match="audit takes a model name"):
        audit(42)


def test_the_command_line(capsys):
    assert main(["LlamaForCausalLM", "--implementations", "sdpa", "--length", "5", "--lang", "de"]) == 0
    out = capsys.readouterr().out
    assert "LlamaForCausalLM" in out and "wie erwartet" in out
    assert main(["llama", "--implementations", "audit_own_mask", "--length", "5", "--lang", "en"]) == 1
    assert "NOT as expected" in capsys.readouterr().out
    assert main(["NoSuchModel"]) == 2
    assert "unknown model: NoSuchModel" in capsys.readouterr().err


def test_the_command_line_from_a_shell():
    result = subprocess.run([sys.executable, "-m", "attnlab.audit", "MistralConfig", "--implementations", "eager",
                             "--length", "5"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "all 2 rows as expected" in result.stdout and result.stderr == ""


def test_the_chapters_own_mask_attention_is_the_packages():
    """Chapter 10 shows own_mask_attention in a cell; the package holds the same code (docstring aside)."""
    import ast
    import inspect

    import nbformat

    from attnlab import audit as audit_module

    def body(source):
        node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)
                    and n.name == "own_mask_attention")
        statements = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body  # without the docstring
        return [ast.dump(s) for s in statements if not isinstance(s, ast.ImportFrom)]

    nb = nbformat.read(ROOT / "chapters" / "en" / "10-auditing-a-real-model.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "def own_mask_attention" in c.source)
    assert body(cell) == body(inspect.getsource(audit_module.own_mask_attention))


def test_padded_equals_unpadded_for_a_correct_model_on_both_sides():
    from attnlab.audit import padding_matches, padding_reads

    ids = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(0))
    for name in ("gpt2", "llama", "bert"):  # learned positions (gpt2, bert) too: position_ids count the real tokens
        model = tiny_model(name, "eager")
        for side in ("left", "right"):
            assert padding_matches(model, ids, side), (name, side)
            assert padding_reads(model, ids, side) == {}
    t5 = tiny_model("t5", "sdpa")
    assert padding_matches(t5, ids, "left", part="encoder") and padding_matches(t5, ids, "left", part="decoder")


def test_the_mask_dropping_model_reads_the_padding_on_both_sides_and_the_padding_blind_one_only_on_the_left():
    from attnlab.audit import padding_matches, padding_reads

    ids = torch.randint(1, 128, (1, 4), generator=torch.Generator().manual_seed(0))
    drops = tiny_model("llama", "audit_drops_mask")
    assert not padding_matches(drops, ids, "left") and not padding_matches(drops, ids, "right")
    assert padding_reads(drops, ids, "left") == {t: [0, 1, 2] for t in range(4)}  # the padding before
    assert padding_reads(drops, ids, "right") == {t: [4, 5, 6] for t in range(4)}  # the padding after
    blind = tiny_model("llama", "audit_ignores_padding")
    assert not padding_matches(blind, ids, "left") and padding_reads(blind, ids, "left") == {t: [0, 1, 2] for t in range(4)}
    assert padding_matches(blind, ids, "right") and padding_reads(blind, ids, "right") == {}  # the causal rule hides it
    rows = {row.padding: row for row in audit("llama", implementations=("audit_ignores_padding",), T=5)}
    assert rows["none"].causal and rows["none"].padding_ok is None and rows["none"].as_expected
    assert rows["left"].causal and rows["left"].padding_ok is False and not rows["left"].as_expected
    assert "padded = unpadded" in audit_table(list(rows.values()))


def test_helpers_accept_the_natural_readings():
    model = tiny_model("Llama")  # a name in another case
    ids = [[5, 17, 42, 8]]
    assert Adapter(model)(ids).shape == (1, 4, 128) and Adapter(model)(torch.tensor([5, 17, 42, 8])).shape == (1, 4, 128)
    from attnlab.audit import leaks_of

    assert leaks_of(Adapter(model), ids) == leaks_of(Adapter(model), torch.tensor([5, 17, 42, 8])) \
        == {"prefix": None, "cut": None, "jacobian": None}
    assert torch.equal(course_mask(4, keep=[[1, 1, 0, 0]]), course_mask(4, keep=torch.tensor([[1, 1, 0, 0]])))
    assert torch.equal(Adapter(model, "left", pad=0)(ids), Adapter(model)(ids))  # a padding of length 0
    with pytest.raises(ValueError, match="pad must be at least 0"):
        Adapter(model, "left", pad=-1)
    assert len(audit("llama", implementations="sdpa", paddings="none", T=4)) == 1  # one implementation as a string
    assert generate_matches(model, [[5, 17, 42], [0, 8, 9]], [3, 2], new_tokens=2) == {"tokens": True, "logits": True}
    base = audit(pytest.importorskip("transformers").LlamaModel(model.config), implementations=("sdpa",),
                 paddings=("none",), T=4)  # no .logits: its hidden states are tested
    assert base[0].expected_causal and base[0].as_expected


@pytest.mark.parametrize("language, needle", [("en", "must be one that runs here"), ("de", "hier auf der CPU läuft")])
def test_bad_input_gets_a_clear_localized_message(language, needle):
    i18n.set_language(language)
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=needle):
        tiny_model("llama", "no_such_attention")
    with pytest.raises(ValueError, match="flex_attention"):
        audit("llama", implementations=("flex_attention",))
    with pytest.raises(ValueError, match="T"):
        audit("gpt2", T=70)  # longer than its 64 positions, with the padding
    with pytest.raises(TypeError, match="T"):
        audit("llama", T="8")
    with pytest.raises(ValueError, match="0 to 127" if language == "en" else "Vokabular"):
        Adapter(model)(torch.tensor([[1, 500]]))
    with pytest.raises(ValueError, match="ids"):
        Adapter(model)(torch.rand(1, 4))
    with pytest.raises(ValueError, match="lengths"):
        generate_matches(model, torch.ones(2, 4, dtype=torch.long), [4])  # one length for two prompts
    with pytest.raises(ValueError, match="lengths"):
        generate_matches(model, torch.ones(2, 4, dtype=torch.long), [4, 0])  # a prompt of padding only
    with pytest.raises(ValueError, match="attention_mask"):
        library_mask(model, 6, torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="audit"):
        Adapter(torch.nn.Linear(2, 2))

    class NoLogits(torch.nn.Module):
        config = model.config

        def forward(self, input_ids=None, attention_mask=None):
            return {"hidden": input_ids}

    with pytest.raises(TypeError, match="logits"):
        Adapter(NoLogits())(torch.tensor([[1, 2]]))


def test_the_command_line_answers_bad_arguments_in_the_readers_language(capsys):
    assert main(["llama", "--length", "x", "--lang", "de"]) == 2
    assert "--length muss eine ganze Zahl" in capsys.readouterr().err
    assert main(["llama", "--lang", "fr"]) == 2
    assert "--lang must be en, de or zh" in capsys.readouterr().err
    assert main(["llama", "--implementations", "nope", "--lang", "en"]) == 2
    assert "attn_implementation must be one that runs here" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--lang", "zh"])  # no target
    assert exit_.value.code == 2 and "参数有误" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["llama", "--bogus", "--lang", "de"])
    assert exit_.value.code == 2 and "unbekannte Argumente: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--help", "--lang", "de"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "Aufruf:" in out and "diese Hilfe anzeigen" in out and "Optionen" in out
    assert i18n.get_language() == "en"  # --lang holds for the call only


def test_changed_configs_bert_as_a_decoder_and_right_padding_rows():
    import transformers

    from attnlab.audit import tiny_config

    config = tiny_config("bert")
    config.is_decoder = True  # BERT as a decoder: built as BertLMHeadModel, must be causal, has a cache
    rows = audit(config, implementations=("sdpa",), paddings=("none",), T=4)
    assert rows[0].expected_causal and rows[0].causal and rows[0].cache_ok
    no_cache = audit(transformers.BertForMaskedLM(config), implementations=("sdpa",), paddings=("none",), T=4)
    assert no_cache[0].cache_ok is None and no_cache[0].as_expected  # a head that returns no cache: column empty
    right = audit("mistral", implementations=("sdpa",), paddings=("right",), T=5)
    assert right[0].padding_ok and "right" in audit_table(right)


def test_the_jacobian_test_reads_the_real_tokens_columns_on_either_side():
    # the embedding of a padded run returns pad + T vectors; the real tokens come first with right
    # padding: the last T columns would be the wrong ones there (an output against the input 3 later)
    from attnlab.audit import test_maps
    from attnlab.causality import find_leaks

    ids = torch.randint(1, 128, (1, 4), generator=torch.Generator().manual_seed(0))
    right = Adapter(tiny_model("llama", "sdpa"), "right")
    jacobian = test_maps(right, ids)["jacobian"]  # [T, T]
    assert jacobian.shape == (4, 4) and bool((torch.diagonal(jacobian) > 0).all())  # output t reads input t
    left = Adapter(right.model, "left")  # find_leaks takes a padded adapter too (its embedding returns pad + T vectors)
    leaks = find_leaks(left, ids, embedding=left.get_input_embeddings())
    assert leaks == {"prefix": None, "cut": None, "jacobian": None}
    encoder = Adapter(tiny_model("t5", "sdpa"), "right", part="encoder")
    assert find_leaks(encoder, ids, embedding=encoder.get_input_embeddings())["jacobian"] == (0, 1)


# --------------------------------------------------------------------------
# Issue 35: verdicts to trust (each case the sweep over transformers met, on a tiny model; no download)


def test_encoder_family_causal_lm_classes_are_built_as_decoders_and_say_so():
    from attnlab.audit import audit_target

    verdict = audit_target("RobertaForCausalLM", ("sdpa",), ("none",), T=5)  # the RoBERTa family of #48745
    assert verdict.kind == "ok" and verdict.rows[0].expected_causal and verdict.rows[0].causal
    assert verdict.notes == [("audit.note_set", {"setting": "is_decoder=True"})]
    for lang, needle in [("en", "as the library intends"), ("de", "wie die Bibliothek es vorsieht"), ("zh", "按库的本意")]:
        assert needle in verdict.note_lines(lang)[0]
    for name in ("BertLMHeadModel", "BertGenerationDecoder", "OpenAIGPTLMHeadModel"):  # from the registration,
        rows = audit_target(name, ("eager",), ("none",), T=4).rows  # not the name: none may "read ahead"
        assert rows and all(row.expected_causal and row.causal for row in rows), name


def test_only_positions_shift_when_padding_is_not_read():
    # RoBERTa counts positions from padding_idx + 1, so its padded logits differ; the padding is not read
    from attnlab.audit import audit_target

    verdict = audit_target("RobertaForMaskedLM", ("eager",), ("left",), T=5)
    row = verdict.rows[0]
    assert verdict.kind == "ok" and row.padding_ok is False and row.padding_read is False and row.as_expected
    assert "positions only" in audit_table(verdict.rows) and "padding is not read" in verdict.reason("en")
    i18n.set_language("zh")
    assert "仅位置偏移" in audit_table(verdict.rows) and "padding 没有被读取" in verdict.reason()


def test_tolerances_scale_with_the_logits():
    from attnlab.audit import cached_matches, tolerance

    assert tolerance(torch.tensor([0.5, -0.2])) == 1e-5 and tolerance(torch.tensor([25.0, -3.0])) == pytest.approx(2.5e-4)
    model = tiny_model("llama", "eager")
    with torch.no_grad():
        model.lm_head.weight.mul_(3000.0)  # logits in the thousands: float32 noise far above a fixed 1e-5
    ids = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(0))
    assert cached_matches(model, ids) and cached_matches(model, ids, "left")


def test_a_recurrent_models_cached_steps_get_the_steps_own_mask():
    import transformers

    from attnlab.audit import audit_target, step_mask

    verdict = audit_target("MambaForCausalLM", IMPLEMENTATIONS_BOTH, ("none", "left"), T=5)
    assert verdict.kind == "ok" and all(row.cache_ok for row in verdict.rows)
    assert [key for key, _ in verdict.notes] == ["audit.note_skipped"] and verdict.notes[0][1]["impl"] == "sdpa"
    mamba = transformers.MambaForCausalLM(transformers.MambaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
                                                                   state_size=4))
    ids, mask = torch.ones(1, 6, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)
    assert step_mask(mamba, ids, mask, 4, 5, None) is None  # as generate() passes it: none after the prefill
    assert step_mask(tiny_model("llama"), ids, mask, 4, 5, None).shape == (1, 5)  # attention: cache + step


IMPLEMENTATIONS_BOTH = ("eager", "sdpa")


def test_the_bart_family_cache_bug_is_a_library_error_with_a_repro_that_fails_the_same_way():
    from attnlab.audit import audit_target

    verdict = audit_target("BartForCausalLM", ("eager",), ("none",), T=4)
    assert verdict.kind == "library_error" and verdict.exit_status == 1
    assert verdict.message.startswith("IndexError") and "'decoder_layers': 2" in verdict.repro
    code = verdict.repro.split('-c "', 1)[1].rstrip('"')
    with pytest.raises(IndexError):
        exec(code, {})  # the one-line repro: the library alone, no attnlab
    for lang, word in [("en", "LIBRARY ERROR"), ("de", "FEHLER DER BIBLIOTHEK"), ("zh", "库的错误")]:
        assert verdict.word(lang) == word and verdict.message in verdict.reason(lang)


def test_every_verdict_kind_reads_right_in_every_language():
    from attnlab.audit import AuditRow, Verdict

    none = {"prefix": None, "cut": None, "jacobian": None}
    rows = {"ok": [AuditRow("m", "sdpa", "none", None, True, none, True)],
            "leak": [AuditRow("m", "sdpa", "none", None, True, dict(none, cut=(0, 2)), False)],
            "differ": [AuditRow("m", "sdpa", "none", None, True, none, False, cache_diff=3e-3)]}
    verdicts = [Verdict("m", kind, rows.get(kind, []), [], "RuntimeError: boom") for kind in
                ("ok", "leak", "differ", "library_error", "not_applicable", "could_not_audit")]
    assert [v.exit_status for v in verdicts] == [0, 1, 1, 1, 0, 2]
    for lang in ("en", "de", "zh"):
        texts = [v.word(lang) + v.reason(lang) for v in verdicts]
        assert len(set(texts)) == 6 and "{" not in "".join(texts)
        assert "： " not in "".join(texts) and ("(0, 2)" in texts[1] or "0" in texts[1])
    assert "input 2" in verdicts[1].reason("en") and "3.0e-03" in verdicts[2].reason("en")


def test_what_a_class_refuses_or_cannot_take_is_a_verdict_not_a_traceback(capsys, tmp_path, monkeypatch):
    import transformers

    from attnlab.audit import audit_target

    class EmbedsOnly(transformers.LlamaForCausalLM):
        def forward(self, inputs_embeds=None, attention_mask=None):  # no input_ids
            return super().forward(inputs_embeds=inputs_embeds, attention_mask=attention_mask)

    assert audit_target(EmbedsOnly, ("eager",), ("none",), T=4).kind == "not_applicable"
    (tmp_path / "mine.py").write_text("import transformers\n\nclass MyConfig(transformers.PreTrainedConfig):\n"
                                      "    model_type = 'mine'\n")
    (tmp_path / "broken.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    verdict = audit_target("mine:MyConfig", ("eager",), ("none",), T=4)  # the README's example, unregistered
    assert verdict.kind == "could_not_audit" and "not registered with AutoModelForCausalLM" in verdict.message
    assert len(verdict.message) < 300  # one line, not the list of 200 registered configs
    with pytest.raises(ValueError, match="importing broken failed inside the module: ModuleNotFoundError"):
        audit("broken:MyModel")
    assert len(audit("LlamaForCausalLM", implementations="sdpa", paddings="none", T=4)) == 1  # as the CLI takes it
    assert main(["mine:MyConfig", "--implementations", "eager", "--length", "4"]) == 2
    out = capsys.readouterr()
    assert "COULD NOT AUDIT" in out.out and "Traceback" not in out.out + out.err
    assert main(["llama", "--implementations", ""]) == 2  # not "all 0 rows as expected"
    assert "at least one attention implementation" in capsys.readouterr().err


def test_another_transformers_version_says_which_check_it_cannot_run():
    from attnlab.audit import Adapter as A, NoCache, cache_keyword

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None):
            pass

    class Neither(torch.nn.Module):
        def forward(self, input_ids=None, attention_mask=None):
            pass

    assert cache_keyword(Old) == "past_key_values" and cache_keyword(Neither) is None
    assert cache_keyword(type(tiny_model("llama"))) == "cache"
    neither = Neither()
    neither.config = tiny_model("llama").config
    with pytest.raises(NoCache, match="cache check cannot run"):
        A(neither, cached=True)(torch.tensor([[1, 2, 3]]))


@pytest.mark.parametrize("language, usage, heading, needs", [
    ("en", "usage: python -m attnlab.audit", "\noptions:\n", "--length needs a value"),
    ("de", "Aufruf: python -m attnlab.audit", "\nOptionen:\n", "--length braucht einen Wert"),
    ("zh", "用法：python -m attnlab.audit", "\n选项：\n", "--length 需要一个值")])
def test_the_command_lines_usage_headings_and_errors_read_right_in_each_language(capsys, language, usage, heading,
                                                                                   needs):
    with pytest.raises(SystemExit):
        main(["--help", "--lang", language])
    text = capsys.readouterr().out
    assert text.startswith(usage) and heading in text and "： " not in text and "：:" not in text
    with pytest.raises(SystemExit) as exit_:
        main(["llama", "--lang", language, "--length"])
    assert exit_.value.code == 2 and needs in capsys.readouterr().err
    for target, word in [("meta-llama/Llama-3-8B", {"en": "Hub id", "de": "Hugging Face Hub", "zh": "Hub 的 id"}),
                         ("./checkpoints/config.json", {"en": "file path", "de": "Dateipfad", "zh": "文件路径"})]:
        assert main([target, "--lang", language]) == 2
        err = capsys.readouterr().err
        assert word[language] in err and "LlamaForCausalLM" in err and "Traceback" not in err


def test_the_sweep_gives_each_target_a_verdict_within_its_time_limit():
    from attnlab.audit import sweep, sweep_summary, sweep_table

    verdicts = sweep(["llama", "NoSuchModel"], ("sdpa",), ("none",), T=4, workers=2, limit=120)
    assert [v.kind for v in verdicts] == ["ok", "could_not_audit"] and "unknown model" in verdicts[1].message
    slow = sweep(["gemma3"], ("sdpa",), ("none",), T=4, workers=1, limit=0.01)[0]
    assert slow.kind == "could_not_audit" and "time limit" in slow.message
    assert "NoSuchModel" in sweep_table(verdicts) and "2 targets" in sweep_summary(verdicts)


# Issue 35, the sweep's COULD NOT AUDIT rows: a family's own settings build a valid tiny config, and say so


@pytest.mark.parametrize("name, setting", [
    ("DeepseekV3ForCausalLM", "head_dim=8"),  # multi-head latent attention: the rotary part of a head
    ("DbrxForCausalLM", "attn_config.rope_theta=10000.0"),  # a field the library reads but does not declare
    ("XmodForCausalLM", "default_language=en_XX"),
    ("MusicgenForCausalLM", "num_codebooks=1"),
])
def test_a_family_that_needs_its_own_settings_is_built_with_them_and_says_what_was_set(name, setting):
    from attnlab.audit import FAMILIES, audit_target

    verdict = audit_target(name, ("eager",), ("none",), T=4)
    assert verdict.kind == "ok", (verdict.kind, verdict.message)
    settings = [values["setting"] for key, values in verdict.notes if key == "audit.note_set"]
    assert setting in settings and len(FAMILIES) >= 20


def test_models_that_scale_their_embeddings_in_place_or_read_a_text_vocabulary_are_audited():
    from attnlab.audit import audit_target

    for name in ("CTRLLMHeadModel", "Gemma3ForConditionalGeneration"):  # in-place `embeds *= ...`; a text config's vocab
        verdict = audit_target(name, ("eager",), ("none",), T=4)
        assert verdict.kind == "ok", (name, verdict.message)


def test_the_auditors_own_reasons_are_message_keys_rendered_in_each_language():
    from attnlab.audit import Verdict

    timeout = Verdict.keyed("BltForCausalLM", "could_not_audit", "audit.reason_timeout", seconds="120")
    again = Verdict.from_dict(timeout.to_dict())  # as the page reads it from the JSON
    assert again.message == "no verdict within the time limit of 120 s of CPU time" == again.reason("en")
    assert again.reason("de") == "Kein Urteil innerhalb des Zeitlimits von 120 s Rechenzeit"
    assert again.reason("zh") == "在 120 秒 CPU 时间的限制内没有得出结论"
    cached = Verdict.keyed("CpmAntForCausalLM", "could_not_audit", "audit.reason_cached_pass_failed",
                           message="RuntimeError: boom")
    assert "Prüfwerkzeug" in cached.reason("de") and "审查工具" in cached.reason("zh")
    assert "library" not in cached.reason("en")  # the auditor's failure is not blamed on the library
    old = Verdict.from_dict({"target": "x", "kind": "could_not_audit", "message": "E: m"})  # a JSON of before
    assert old.reason("en") == "the library could not build or run the model: E: m"


# Issue 49: the packing check, a leak that stays a leak, true verdicts where the cause was the auditor's


def test_packing_check_finds_which_calls_keep_packed_documents_apart():
    from attnlab.audit import CALLS, check_packing

    packing = check_packing("llama", ("sdpa",))
    assert packing.kind == "leaks" and [row.call for row in packing.rows] == list(CALLS)
    apart = {row.call: row.isolated for row in packing.rows}
    assert apart == {"default": False, "no_cache": True, "no_cache_ones": False}  # the library's gate, as measured
    assert all(row.reads for row in packing.rows if not row.isolated)  # the others' tokens move them: not positions
    assert "Only these keep them apart: use_cache=False, no attention_mask (sdpa)" in packing.reason("en")
    assert "Nur diese halten sie auseinander: use_cache=False ohne attention_mask (sdpa)" in packing.reason("de")
    assert "只有以下调用能把它们隔开：use_cache=False 且不传 attention_mask（sdpa）" in packing.reason("zh")
    model = tiny_model("llama", "audit_drops_mask")  # a model as a reader built it: checked as it is
    broken = check_packing(model)
    assert broken.kind == "leaks" and not any(row.isolated for row in broken.rows)
    assert "every call tried" in broken.reason("en")
    assert check_packing("t5").kind == "not_applicable" and "encoder-decoder" in check_packing("t5").reason("en")
    with pytest.raises(ValueError, match="at least two documents"):
        check_packing("llama", lengths=(8,))


def test_a_leak_found_before_a_crash_stays_a_leak_with_the_crash_as_its_second_line():
    from attnlab.audit import Verdict, audit_target

    verdict = audit_target("CpmAntForCausalLM", ("eager",), ("none",), T=4)  # every token is "context"
    assert verdict.kind == "leak" and verdict.exit_status == 1 and verdict.rows[0].leaking
    first, second = Verdict.from_dict(verdict.to_dict()).reason("en").split("\n")
    assert first.startswith("the prefix test finds output 0 reading") and second.startswith("then: the auditor's cached")
    assert "danach:" in verdict.reason("de") and "随后：" in verdict.reason("zh")
    assert verdict.packing.kind == "not_applicable" and "position_ids" in verdict.packing.reason("en")


def test_a_batch_the_library_cannot_take_is_a_library_error_and_an_assistant_is_not_applicable():
    from attnlab.audit import audit_target, no_cache

    verdict = audit_target("XLNetLMHeadModel", ("eager",), ("left",), T=4)  # its prefix test runs a batch
    assert verdict.kind == "library_error" and "torch.ones(2, 8" in verdict.repro and "attention_mask" in verdict.repro
    with pytest.raises(RuntimeError, match="broadcast shape"):
        exec(verdict.repro.split('-c "', 1)[1].rstrip('"'), {})  # the library alone
    assistant = audit_target("Gemma4UnifiedAssistantForCausalLM", ("eager",), ("none",), T=4)
    assert assistant.kind == "not_applicable" and "shared_kv_states" in assistant.reason("en")
    import transformers

    assert no_cache(transformers.GraniteMoeForCausalLM) == {"use_cache": False}  # through **kwargs


def test_the_table_says_leak_only_for_a_decoder_and_t_says_why_it_is_bounded():
    from attnlab.audit import AuditRow

    encoder = AuditRow("m", "sdpa", "none", None, False, {"prefix": None, "cut": None, "jacobian": None}, None)
    assert audit_table([encoder]).endswith("may read ahead: OUTPUTS DIFFER")  # reads no future: not a leak
    with pytest.raises(ValueError, match=r"between 2 and 61: .* \(3 pad tokens, then the T tokens\) must fit .* 64 "):
        audit("gpt2", T=1)
