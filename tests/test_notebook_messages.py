"""The generator writes tr("key", ...) calls out as text in the notebook's language.

A cell's ``print(tr("ch8.empty_rows"))`` shows the reader the catalog text itself
(``print("Queries, die nichts lesen, pro Zeile des Batches:")``), with placeholders as
f-string fields; what it prints must stay exactly what tr() prints.
"""

import ast
import itertools
import string

import nbformat
import pytest

from attnlab import i18n
from tools import notebooks
from tools.notebooks import message_writer

CATALOG = {
    "t.plain": {"en": "rows with NaN:", "de": "Zeilen mit NaN:", "zh": "含 NaN 的行："},
    "t.rows": {"en": "{n} rows", "de": "{n} Zeilen", "zh": "{n} 行"},
    "t.mean": {"en": "mean {x:.3f}, set {{a, b}}", "de": "Mittel {x:.3f}, Menge {{a, b}}", "zh": "均值 {x:.3f}，集合 {{a, b}}"},
    "t.pairs": {"en": "{n} of {total} pairs", "de": "{n} von {total} Paaren", "zh": "{total} 对中的 {n} 对"},
    "t.side": {"en": "{side}, row {b}", "de": "{side}, Zeile {b}", "zh": "{side}，第 {b} 行"},
    "t.right": {"en": "padded right", "de": "rechts aufgefüllt", "zh": "右侧填充"},
    "t.left": {"en": "padded left", "de": "links aufgefüllt", "zh": "左侧填充"},
    "t.twice": {"en": "{n} and {n}", "de": "{n} und {n}", "zh": "{n} 和 {n}"},
    "t.quote": {"en": 'say "{word}"', "de": "sag „{word}“", "zh": "说「{word}」"},
}


@pytest.fixture
def catalog(monkeypatch):
    monkeypatch.setattr(message_writer, "_message_catalog", lambda: CATALOG)


def rendered(code, lang="de"):
    rewrites = []
    out = notebooks.localize_messages(code, lang, rewrites)
    compile(out, "<cell>", "exec")
    return out, rewrites


def test_a_message_without_placeholders_becomes_a_plain_string(catalog):
    out, rewrites = rendered('print(tr("t.plain"), x)')
    assert out == 'print("Zeilen mit NaN:", x)'
    assert [(r.key, r.form, r.old) for r in rewrites] == [("t.plain", "literal", 'tr("t.plain")')]
    assert rendered('print(tr("t.plain"))', "zh")[0] == 'print("含 NaN 的行：")'


def test_placeholders_become_f_string_fields_with_the_argument_expressions(catalog):
    assert rendered('print(tr("t.rows", n=n))', "en")[0] == 'print(f"{n} rows")'
    out, _ = rendered('print(tr("t.mean", x=a.mean()))')
    assert out == 'print(f"Mittel {a.mean():.3f}, Menge {{a, b}}")'  # the spec stays, literal braces escaped
    assert rendered('y = tr("t.quote", word=w)', "en")[0] == "y = f'say \"{w}\"'"
    assert rendered('print(tr("t.quote", word=d["k"]))', "en")[0] == """print(f'say "{d["k"]}"')"""
    assert rendered("print(tr('t.quote', word=d['k']))", "en")[0] == """print(f"say \\"{d['k']}\\"")"""


def test_an_argument_that_is_a_constant_or_a_message_is_written_into_the_text(catalog):
    out, rewrites = rendered('titles = [tr("t.side", side=tr("t.right"), b=b), tr("t.side", side=tr("t.left"), b=0)]')
    assert out == 'titles = [f"rechts aufgefüllt, Zeile {b}", "links aufgefüllt, Zeile 0"]'
    assert [r.form for r in rewrites] == ["f-string", "literal"]
    assert rendered('print(tr("t.right" if right else "t.left"))', "en")[0] == \
        'print(("padded right" if right else "padded left"))'
    assert rendered('print(tr("t.rows", n=tr("t.right" if right else "t.left")))', "en")[0] == \
        """print(f'{"padded right" if right else "padded left"} rows')"""


@pytest.mark.parametrize("code, why", [
    ('print(tr("t.pairs", n=int(m.sum()), total=m.numel()))', "zh prints the calls in another order"),
    ('print(tr("t.twice", n=next(it)))', "an expression printed twice would run twice"),
    ('print(tr("t.plain", n=next(it)))', "an argument evaluated but never printed"),
    ('print(tr("t.rows", n=tr(f"t.{name}")))', "an f-string inside an f-string"),
    ('print(tr("t.rows", **values))', "names known only at run time"),
])
def test_where_an_f_string_would_differ_from_tr_the_notebook_shows_str_format(catalog, code, why):
    out, rewrites = rendered(code, "zh")
    assert rewrites[0].form == "format", why
    assert out.startswith('print("') and '".format(' in out


def test_every_form_prints_exactly_what_tr_prints(catalog, monkeypatch):
    monkeypatch.setattr(i18n, "catalog", lambda: CATALOG)
    cases = ['tr("t.pairs", n=int(m.sum()), total=m.numel())', 'tr("t.pairs", n=3, total=len(m))',
             'tr("t.mean", x=m.sum() / 3)', 'tr("t.twice", n=next(it))', 'tr("t.side", side=tr("t.left"), b=m[0])',
             'tr("t.quote", word=str(m))', 'tr("t.rows", **{"n": 5})', 'tr("t.plain")']
    for code, lang in itertools.product(cases, notebooks.LANGUAGES):
        results = []
        for text in (code, rendered(code, lang)[0]):
            namespace = {"tr": i18n.tr, "m": __import__("torch").arange(4.0), "it": iter(range(10))}
            i18n.set_language(lang)
            try:
                results.append(eval(text, namespace))
            finally:
                i18n.set_language("en")
        assert results[0] == results[1], (code, lang, results)


def test_a_message_inside_an_f_string_is_spliced_into_its_text(catalog):
    assert rendered("print(f\"| {tr('t.plain')} {x}\")")[0] == 'print(f"| Zeilen mit NaN: {x}")'
    assert rendered("print(f\"{'T':>5} {tr('t.plain'):>16}\")")[0] == "print(f\"{'T':>5} {'Zeilen mit NaN:':>16}\")"
    assert rendered("print(f\"{tr('t.rows', n=2)}\")")[0] == 'print(f"2 Zeilen")'
    assert rendered("print(f\"{tr('t.rows', n=k)}\")")[0] == "print(f\"{tr('t.rows', n=k)}\")"  # stays


def test_a_long_f_string_is_split_into_adjacent_literals_inside_the_call(catalog):
    code = 'print(tr("t.pairs", n=' + "a" * 60 + ", total=" + "b" * 60 + "))"
    out, _ = rendered(code, "en")
    assert out.count("\n") >= 1 and all(len(line) <= notebooks.CODE_WIDTH for line in out.split("\n"))
    assert ast.dump(ast.parse(out)).count("FormattedValue") == 2


def test_functions_the_package_defines_keep_tr_and_local_helpers_do_not(catalog):
    code = ('def shard_positions(T, P, layout):\n    raise ValueError(tr("t.rows", n=T))\n\n\n'
            'def report(n):\n    print(tr("t.rows", n=n))')
    out, _ = rendered(code)
    assert 'raise ValueError(tr("t.rows", n=T))' in out and 'print(f"{n} Zeilen")' in out


def test_an_unknown_key_is_an_error_with_file_and_line(tmp_path):
    path = tmp_path / "chapters" / "src" / "99-test.md"
    path.parent.mkdir(parents=True)
    path.write_text('---\nkind: notebook\n---\n\n```{code-cell}\nprint(tr("no.such.key"))\n```\n', "utf-8")
    with pytest.raises(notebooks.SourceError, match=r"99-test.md:5: tr\(\) of 'no.such.key': no such key"):
        notebooks.parse_source(path)


def test_neutral_code_turns_a_short_text_back_where_the_generator_put_it(catalog):
    code = "print(model.parameters, f\"{tr('t.plain')}\")"
    CATALOG["t.plain"]["en"] = "parameters"
    try:
        rewrites = []
        out = notebooks.localize_messages(code, "en", rewrites)
    finally:
        CATALOG["t.plain"]["en"] = "rows with NaN:"
    assert out == 'print(model.parameters, f"parameters")' and rewrites[0].at == out.index('s")') - 9
    assert notebooks.neutral_code(out, rewrites) == code


def test_neutral_code_turns_the_texts_back_in_order_even_when_two_keys_read_alike():
    rewrites = [notebooks.MessageRewrite("a", '"gleich"', 'tr("a")', "literal"),
                notebooks.MessageRewrite("b", '"gleich"', 'tr("b")', "literal")]
    assert notebooks.neutral_code('x = "gleich"; y = "gleich"', rewrites) == 'x = tr("a"); y = tr("b")'


# The real chapters --------------------------------------------------------------

def sample_for(specs):
    """A value that every format spec of one placeholder accepts."""
    for value in ("v{0}'\"", 7, 2.718281828, [1, 2.5]):
        try:
            [format(value, spec) for spec in specs]
            return value
        except (ValueError, TypeError):
            continue
    raise AssertionError(specs)


def message_calls():
    """(source, line, call text with every argument that is not a constant replaced by a name)."""
    found = []
    for source in notebooks.find_sources():
        for cell in source.cells:
            if cell.kind != "code":
                continue
            code = notebooks.localize_code(cell.text, "en")
            try:
                tree = ast.parse(code)
            except SyntaxError:
                continue
            writer = message_writer._MessageWriter(code, "en", tree)
            for call in writer.outermost_calls(tree):
                found.append((source.rel, cell.line, call))
    return found


CALLS = message_calls()


def with_samples(call, samples, catalog):
    """``call`` with every argument that is not a constant replaced by a name bound to a sample value."""
    if isinstance(call.args[0], ast.IfExp):
        call.args[0].test = ast.Constant(len(samples) % 2 == 0)
        return call
    for keyword in call.keywords:
        if keyword.arg is None:
            keyword.value = ast.parse("{'" + "': 1, '".join(placeholders(catalog, call)) + "': 1}", mode="eval").body
        elif message_writer._is_message_call(keyword.value):
            with_samples(keyword.value, samples, catalog)
        elif not isinstance(keyword.value, ast.Constant):
            specs = [spec for text in catalog[call.args[0].value].values()
                     for _, name, spec, _ in string.Formatter().parse(text) if name == keyword.arg]
            name = f"_v{len(samples)}"
            samples[name] = sample_for(specs)
            keyword.value = ast.Name(name)
    return call


def placeholders(catalog, call):
    return sorted(i18n.placeholders(catalog[call.args[0].value]["en"]))


def test_the_chapters_have_many_messages_the_generator_writes_out():
    assert len(CALLS) >= 150


@pytest.mark.parametrize("lang", notebooks.LANGUAGES)
def test_every_message_of_every_chapter_prints_exactly_what_tr_prints(lang):
    catalog = i18n.catalog()
    checked = 0
    for rel, line, call in CALLS:
        samples = {}
        code = ast.unparse(with_samples(ast.parse(ast.unparse(call), mode="eval").body, samples, catalog))
        new, rewrites = notebooks.localize_messages(code, lang, []), None
        i18n.set_language(lang)
        try:
            expected = eval(code, {"tr": i18n.tr, **samples})
            got = eval(new, {"tr": i18n.tr, **samples})
        finally:
            i18n.set_language("en")
        assert got == expected, (rel, line, code, new)
        checked += 1
    assert checked == len(CALLS)


@pytest.mark.parametrize("lang", notebooks.LANGUAGES)
def test_a_rewritten_call_evaluates_the_same_argument_expressions(lang):
    for rel, line, call in CALLS:
        code = ast.unparse(call)
        rewrites = []
        new = notebooks.localize_messages(code, lang, rewrites)
        if not rewrites or rewrites[0].form != "f-string":
            continue
        arguments = sorted(ast.dump(k.value) for k in call.keywords
                           if not isinstance(k.value, ast.Constant) and not message_writer._is_message_call(k.value))
        fields = sorted(ast.dump(n.value) for n in ast.walk(ast.parse(new, mode="eval"))
                        if isinstance(n, ast.FormattedValue) and not message_writer._is_message_call(n.value)
                        and not (isinstance(n.value, ast.IfExp)  # a choice between two messages
                                 and all(message_writer._is_message_call(b) or isinstance(b, ast.Constant)
                                         for b in (n.value.body, n.value.orelse))))
        assert fields == arguments, (rel, line, code, new)


def test_a_changed_german_text_is_code_drift(tmp_path):
    source = next(s for s in notebooks.find_sources() if s.slug.startswith("08-"))
    notebooks.render(source, tmp_path)
    assert not [p for p in notebooks.check(tmp_path) if "code differs" in p and source.rel in p]
    path = source.output_path("de", tmp_path)
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and '"Queries, die nichts lesen' in c.source)
    cell.source = cell.source.replace('"Queries, die nichts lesen', '"Queries, die alles lesen')
    notebooks.write_notebook(nb, path)
    assert any("code differs" in p and source.rel in p for p in notebooks.check(tmp_path))
