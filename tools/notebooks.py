"""One source per chapter -> three notebooks (en, de, zh).

Source format (``chapters/src/NN-slug.md``, see docs/authoring.md)::

    ---
    kind: notebook            # or "page" (a plain Markdown page per language)
    ---

    ::::{lang} en
    English prose (MyST Markdown)
    ::::
    ::::{lang} de
    Deutscher Text
    ::::
    ::::{lang} zh
    中文正文
    ::::

    ```{code-cell}
    :tags: [hide-input]
    :alt: en: what the figure shows | de: was die Abbildung zeigt | zh: 图中显示的内容
    :caption: en: A caption | de: Eine Bildunterschrift | zh: 图注
    code, written once for all languages
    ```

A run of ``::::{lang}`` blocks becomes one Markdown cell in each language
and must hold en, de and zh exactly once. Code cells are shared; a
generated setup cell (after the opening prose) sets the notebook's language.
``:alt:`` and ``:caption:`` give the cell's figure its text in each language
(stored as myst-nb cell metadata, ``mystnb: {image: {alt}, figure: {caption}}``);
every figure output needs an ``:alt:``. In a ``kind: page`` source, code cells
become plain ``python`` code blocks (shown, not executed).

Comments in code cells are written in all three languages and each notebook
keeps its own (the code itself is identical)::

    x = q.view(B, T, H, d)  # en: split D into H heads | de: D in H Köpfe aufteilen | zh: 把 D 拆成 H 个头
    # en: a whole-line comment
    # de: ein Kommentar über eine ganze Zeile
    # zh: 整行注释

A neutral lead-in before ``en:`` (``# [B, T]: en: … | de: … | zh: …``) stays in every
language. Messages are shown the same way: ``print(tr("ch8.empty_rows"))`` becomes
``print("Queries, die nichts lesen, pro Zeile des Batches:")`` in the German
notebook, and a call with placeholders an f-string (or ``"…".format(…)``) that
prints exactly what tr() prints (see "Messages in code" below).

Commands (run from the repository root)::

    python -m tools.notebooks build [SOURCE ...]  # render + execute (stores outputs)
    python -m tools.notebooks render              # render only, no execution
    python -m tools.notebooks refresh [SOURCE ...]  # only prose or cell options changed: keep outputs
    python -m tools.notebooks check               # stale / missing language / code drift

Exercises (``exercises/src/NN-slug.md``, same format) mark the learner's part
of a code cell with ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines. Each
gives ``exercises/<lang>/NN-slug.ipynb`` (the stub: each marked region
replaced by a localized TODO comment and ``raise NotImplementedError(...)``,
not executed, no outputs) and ``solutions/<lang>/NN-slug.ipynb`` (markers
dropped, executed, outputs stored). See docs/exercises.md.
"""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import itertools
import json
import pathlib
import re
import string
import sys
import uuid
from dataclasses import dataclass, field

import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
LANGUAGES = ("en", "de", "zh")
SOURCE_DIRS = ("chapters", "exercises")
GENERATED_DIRS = ("solutions",)  # output only: made from exercises/src/
LANG_OPEN = re.compile(r"^::::\{lang\}\s+(\w+)\s*$")
LANG_CLOSE = "::::"
CODE_OPEN = re.compile(r"^```\{code-cell\}(\s+\w+)?\s*$")
CODE_CLOSE = "```"
OPTION = re.compile(r"^:(\w[\w-]*):\s*(.*)$")
# A backtick fence's info string may not hold a backtick (CommonMark): ```{dropdown} with `code` in
# its title is read as a paragraph, and its closing fence opens a code block that swallows what follows.
BACKTICK_DIRECTIVE_WITH_CODE = re.compile(r"^\s*`{3,}\{[\w-]+\}.*`")
# A dropdown's title is its button: a link inside it is a control in a control (axe: nested-interactive).
DROPDOWN_TITLE_WITH_LINK = re.compile(r"^\s*(`{3,}|:{3})\{dropdown\}.*\]\(")
CELL_OPTIONS = ("tags", "alt", "caption")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
SETUP_CODE = 'import attnlab\n\nattnlab.setup("{lang}")  # {comment}'
SETUP_COMMENT = {  # what attnlab.setup does, in the notebook's language
    "en": "language of figures and messages; seeds every RNG; one CPU thread (no waiting on a busy machine)",
    "de": "Sprache der Abbildungen und Meldungen; setzt alle Zufalls-Seeds; ein CPU-Thread (kein Warten auf einem ausgelasteten Rechner)",
    "zh": "设定图和输出信息的语言；为所有随机数生成器设置种子；只用一个 CPU 线程（机器繁忙时不必等待另一个线程）",
}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3"}  # no version: same on every machine
# Runs before attnlab can be imported, so it is plain code: on Colab it installs
# the course package from the repository set in _config.yml and switches on
# Colab's widget manager; anywhere else it does nothing. Hidden on the site.
COLAB_CODE = """\
# @title {title}
import sys

if "google.colab" in sys.modules:
    import importlib
    import importlib.util
    import subprocess

    if importlib.util.find_spec("attnlab") is None:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "{requirement}"],
                             capture_output=True, text=True)
        if pip.returncode:
            raise RuntimeError(pip.stdout + pip.stderr)
        importlib.invalidate_caches()
    from google.colab import output

    output.enable_custom_widget_manager()"""
GENERATED_CELLS = ("colab", "setup")  # code cells the generator adds (not from the source)
COLAB_TITLE = {"en": "Colab only: install the course package (does nothing elsewhere)",
               "de": "Nur für Colab: installiert das Kurspaket (anderswo passiert nichts)",
               "zh": "仅用于 Colab：安装课程软件包（在其他环境中什么也不做）"}
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


THREE_LANGUAGES = r"en:\s(?P<en>.*?)\s\|\sde:\s(?P<de>.*?)\s\|\szh:\s(?P<zh>.*?)\s*$"  # en: … | de: … | zh: …
# "# en: … | de: … | zh: …", also after a neutral lead-in such as a shape: "# [B, T]: en: … | de: … | zh: …"
INLINE_COMMENT = re.compile(r"#\s?(?P<lead>[^#]*?)" + THREE_LANGUAGES)
LOCALIZED_OPTION = re.compile(r"^" + THREE_LANGUAGES)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
LINE_COMMENT = re.compile(r"^(?P<indent>\s*)#\s?(?P<lang>en|de|zh):\s(?P<text>.*?)\s*$")


class SourceError(ValueError):
    """A chapter source that breaks the format (message names file and line)."""


@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    text: dict[str, str] | str  # markdown: {lang: text}; code: the code
    tags: list[str] = field(default_factory=list)
    line: int = 0
    alt: dict[str, str] | None = None  # code cells: the figure's alt text per language
    caption: dict[str, str] | None = None  # code cells: the figure's caption per language


@dataclass
class Source:
    path: pathlib.Path
    meta: dict
    cells: list[Cell]

    @property
    def rel(self) -> str:
        return (self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path).as_posix()

    @property
    def slug(self) -> str:
        return self.path.stem

    def output_path(self, lang: str, root: pathlib.Path = ROOT) -> pathlib.Path:
        section = self.path.parent.parent.name  # chapters/src/x.md -> chapters
        suffix = ".md" if self.meta.get("kind") == "page" else ".ipynb"
        return root / section / lang / f"{self.slug}{suffix}"


def parse_source(path: pathlib.Path) -> Source:
    lines = path.read_text("utf-8").splitlines()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    where = lambda n: f"{shown}:{n + 1}"  # noqa: E731
    meta: dict = {}
    i = 0
    if lines and lines[0] == "---":
        end = lines.index("---", 1)
        meta = yaml.safe_load("\n".join(lines[1:end])) or {}
        i = end + 1
    cells: list[Cell] = []
    group: dict[str, str] | None = None
    group_line = 0

    def close_group() -> None:
        nonlocal group
        if group is not None:
            missing = [lang for lang in LANGUAGES if lang not in group]
            if missing:
                raise SourceError(f"{where(group_line)}: prose block lacks {', '.join(missing)}")
            cells.append(Cell("markdown", group, line=group_line + 1))
            group = None

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := LANG_OPEN.match(line):
            lang = m.group(1)
            if lang not in LANGUAGES:
                raise SourceError(f"{where(i)}: unknown language {lang!r}")
            if group is None:
                group, group_line = {}, i
            if lang in group:
                raise SourceError(f"{where(i)}: second {lang} block in one prose cell (write one block per "
                                  "language; consecutive prose cells need a code cell between them)")
            try:
                end = lines.index(LANG_CLOSE, i + 1)
            except ValueError:
                raise SourceError(f"{where(i)}: unclosed {{lang}} block") from None
            text = "\n".join(lines[i + 1:end]).strip("\n")
            if not text.strip():
                raise SourceError(f"{where(i)}: empty {lang} block")
            for n, block_line in enumerate(lines[i + 1:end], start=i + 1):
                if BACKTICK_DIRECTIVE_WITH_CODE.match(block_line):
                    raise SourceError(f"{where(n)}: a backtick in the title of a ```{{directive}}: Markdown then "
                                      "shows it as text and what follows as code; write it :::{directive} … :::")
                if DROPDOWN_TITLE_WITH_LINK.match(block_line):
                    raise SourceError(f"{where(n)}: a link in a dropdown's title (a link inside its button); "
                                      "name the page in the title and put the link in the dropdown's text")
            group[lang] = text
            i = end + 1
            continue
        close_group()
        if CODE_OPEN.match(line):
            j = i + 1
            options: dict = {}
            while j < len(lines) and (m := OPTION.match(lines[j])):
                name, value = m.groups()
                if name not in CELL_OPTIONS:
                    raise SourceError(f"{where(j)}: unknown cell option :{name}: (known: "
                                      + ", ".join(f":{o}:" for o in CELL_OPTIONS) + ")")
                if name in options:
                    raise SourceError(f"{where(j)}: second :{name}: in one code cell")
                try:
                    options[name] = (yaml.safe_load(value) or []) if name == "tags" else localized_option(name, value)
                except SourceError as error:
                    raise SourceError(f"{where(j)}: {error}") from None
                j += 1
            try:
                end = lines.index(CODE_CLOSE, j)
            except ValueError:
                raise SourceError(f"{where(i)}: unclosed code cell") from None
            code = "\n".join(lines[j:end]).strip("\n")
            try:
                localize_code(code, "en")
            except SourceError as error:
                raise SourceError(f"{where(i)}: {error}") from None
            if unknown := unknown_message_keys(code):
                raise SourceError(f"{where(i)}: tr() of {', '.join(map(repr, unknown))}: no such key in "
                                  "attnlab/messages.toml")
            cells.append(Cell("code", code, options.get("tags", []), line=i + 1,
                              alt=options.get("alt"), caption=options.get("caption")))
            i = end + 1
            continue
        raise SourceError(f"{where(i)}: text outside a {{lang}} block or code cell: {line[:60]!r}")
    close_group()
    return Source(path, meta, cells)


def localized_option(name: str, value: str) -> dict[str, str]:
    """``en: … | de: … | zh: …`` -> ``{"en": …, "de": …, "zh": …}`` (all three, none empty)."""
    m = LOCALIZED_OPTION.match(value.strip())
    texts = {lang: m.group(lang).strip() for lang in LANGUAGES} if m else {}
    if not m or not all(texts.values()):
        present = [lang for lang in LANGUAGES if re.search(rf"(^|\|)\s*{lang}:\s*\S", value)]
        missing = [lang for lang in LANGUAGES if lang not in present] or ["the 'en: … | de: … | zh: …' form"]
        raise SourceError(f":{name}: lacks {', '.join(missing)}: write "
                          f"':{name}: en: … | de: … | zh: …' on one line")
    return texts


def localize_code(code: str, lang: str) -> str:
    """The code with its three-language comments reduced to ``lang``.

    Inline: ``# en: ... | de: ... | zh: ...``; whole lines: three consecutive
    comment lines ``# en: ...``, ``# de: ...``, ``# zh: ...`` (same indent).
    """
    lines = code.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        first = LINE_COMMENT.match(line)
        if first and INLINE_COMMENT.search(line):
            first = None  # a whole-line comment in the one-line form: handled below
        if first and first.group("lang") == "en":
            group = [LINE_COMMENT.match(x) for x in lines[i:i + 3]]
            if (len(group) < 3 or not all(group) or [m.group("lang") for m in group] != list(LANGUAGES)
                    or len({m.group("indent") for m in group}) != 1):
                raise SourceError(f"comment line {line.strip()!r} needs '# de: ...' and '# zh: ...' "
                                  "lines right below it, with the same indent")
            chosen = group[LANGUAGES.index(lang)]
            out.append(f"{chosen.group('indent')}# {chosen.group('text')}")
            i += 3
            continue
        if first:
            raise SourceError(f"comment line {line.strip()!r} must follow a '# en: ...' line")
        if m := INLINE_COMMENT.search(line):
            lead = m.group("lead")
            if lang == "zh" and lead.endswith(": "):  # a neutral lead-in before Chinese: full-width colon, no space
                lead = lead[:-2] + "："
            line = line[:m.start()] + "# " + lead + m.group(lang)
        out.append(line)
        i += 1
    return "\n".join(out)


def strip_comments(code: str) -> str:
    """The code without comments (what must be identical across languages)."""
    import io
    import tokenize

    try:
        tokens = [(tok.type, tok.string) for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                  if tok.type not in (tokenize.COMMENT, tokenize.NL)]
        return json.dumps(tokens, ensure_ascii=False)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return code  # IPython magics and the like: compare as written


# --------------------------------------------------------------------------
# Messages in code: tr("key", ...) -> a string literal or f-string in the notebook's language
#
# A cell that prints ``tr("ch8.empty_rows")`` hides what it prints; each notebook
# shows the catalog text itself instead, the way it shows its own comments:
#
#     print(tr("ch7.cross_sees", n=int(moved.sum()), total=T_dec))            # source
#     print(f"{int(moved.sum())} of {T_dec} decoder positions changed")        # en notebook
#     print(f"{int(moved.sum())} von {T_dec} Decoder-Positionen ändern sich")  # de notebook
#
# The text is ``catalog()[key][lang]`` with each placeholder replaced by the
# keyword argument's expression (``{x:.3f}`` stays ``{x:.3f}``; an argument that
# is a constant, or a tr() call without placeholders, is written into the text).
# An f-string evaluates ``format(value, spec)`` like str.format, so the printed
# text is the same. Where an f-string would not be exactly tr() (a language
# that orders placeholders differently while the arguments call functions, an
# argument used twice or never, an f-string inside an argument, a comment inside
# the call), the notebook shows ``"text {n}".format(n=...)``: the same
# str.format call that tr() makes. Not rewritten: keys computed at run time
# (``tr(f"ring.layout.{layout}")``), calls with ``lang=``, and calls inside a
# def or class that the package defines too (``shard_positions``: a chapter shows
# the package's code where it teaches it, tests/test_taught_code.py compares the
# two, and its errors are the package's messages). ``**values`` gives the
# ``.format(**values)`` form.

MESSAGE_FUNCTIONS = ("tr", "attnlab.tr", "i18n.tr")


def _FULL_WIDTH_END(text: str) -> bool:
    """Whether ``text`` ends with full-width punctuation (after which Chinese puts no space)."""
    import unicodedata

    return unicodedata.east_asian_width(text[-1]) in "WF" and unicodedata.category(text[-1])[0] == "P"

NO_REWRITE_INSIDE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
CODE_WIDTH = 120  # an f-string longer than this is split into adjacent literals, one per line


@dataclass
class MessageRewrite:
    key: str
    new: str  # the notebook's text
    old: str  # the source's tr(...) call
    form: str  # "literal", "f-string" or "format"
    at: int = -1  # where ``new`` starts in the cell as rendered


@functools.lru_cache(maxsize=1)
def package_definitions() -> frozenset[str]:
    """Names of the functions and classes that attnlab's modules define at top level."""
    names = set()
    for path in (ROOT / "attnlab").rglob("*.py"):
        names |= {node.name for node in ast.parse(path.read_text("utf-8")).body if isinstance(node, NO_REWRITE_INSIDE)}
    return frozenset(names)


def _message_catalog() -> dict[str, dict[str, str]]:
    from attnlab.i18n import catalog

    return catalog()


def placeholders_of(template: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return ["?"]


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_message_call(node: ast.AST) -> bool:
    """A tr("key", name=value, ...) call whose text the generator can write out.

    Also ``tr("a" if flag else "b")``: two keys, no placeholders.
    """
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) in MESSAGE_FUNCTIONS and len(node.args) == 1):
        return False
    key = node.args[0]
    if isinstance(key, ast.IfExp) and _is_key(key.body) and _is_key(key.orelse):
        return not node.keywords
    return _is_key(key) and all(k.arg != "lang" for k in node.keywords)


def _message_keys(call: ast.Call) -> list[str]:
    key = call.args[0]
    return [key.body.value, key.orelse.value] if isinstance(key, ast.IfExp) else [key.value]


def _message_key(call: ast.Call) -> str:
    return " | ".join(_message_keys(call))


def _calls_something(node: ast.AST) -> bool:
    return any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)) for n in ast.walk(node))


def _quoted(text: str) -> str:
    """A plain string literal of ``text``: double quotes unless the text has them and no single ones."""
    quote = "'" if '"' in text and "'" not in text else '"'
    return quote + _string_literal(text, quote) + quote


def _string_literal(text: str, quote: str = '"', braces: bool = False) -> str:
    """``text`` as the inside of a Python string literal (escaped; braces doubled for an f-string)."""
    body = text.replace("\\", "\\\\").replace(quote, "\\" + quote)
    body = body.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return body.replace("{", "{{").replace("}", "}}") if braces else body


class _MessageWriter:
    """Rewrites the message calls of one code cell for one language."""

    def __init__(self, code: str, lang: str, tree: ast.AST):
        self.code, self.lang, self.tree = code, lang, tree
        self.catalog = _message_catalog()
        lines = code.split("\n")
        self.starts = [0]
        for line in lines:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.lines = lines

    def offset(self, lineno: int, col: int) -> int:
        """Character offset of ast's (line, UTF-8 byte column)."""
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def column(self, node: ast.AST) -> int:
        return len(self.lines[node.lineno - 1].encode("utf-8")[:node.col_offset].decode("utf-8"))

    def outermost_calls(self, node: ast.AST) -> list[ast.Call]:
        """The message calls under ``node`` that no other message call contains, in source order."""
        found = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, NO_REWRITE_INSIDE) and child.name in package_definitions():
                continue  # the package's own function, shown where it is taught: its messages stay tr()
            if _is_message_call(child) and all(key in self.catalog for key in _message_keys(child)):
                found.append(child)
            else:
                found += self.outermost_calls(child)
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))

    def text_of(self, node: ast.AST) -> str:
        """The source text of ``node`` with the message calls inside it rewritten."""
        start, end = self.span(node)
        text = self.code[start:end]
        for call in reversed(self.outermost_calls(node)):
            a, b = self.span(call)
            text = text[:a - start] + self.rewrite(call)[0] + text[b - start:]
        return text

    def rewrite(self, call: ast.Call) -> tuple[str, str | None, str]:
        """(new text, its value if it is a constant string, form) of one message call."""
        if isinstance(call.args[0], ast.IfExp):  # tr("a" if flag else "b") -> ("A" if flag else "B")
            if any(placeholders_of(self.catalog[key][self.lang]) for key in _message_keys(call)):
                return self.text_of_call_unchanged(call), None, "unchanged"
            body, orelse = (_quoted(self.catalog[key][self.lang].format()) for key in _message_keys(call))
            return f"({body} if {self.text_of(call.args[0].test)} else {orelse})", None, "literal"
        key = call.args[0].value
        template = self.catalog[key][self.lang]
        try:
            pieces = list(string.Formatter().parse(template))
        except ValueError:
            return self.text_of_call_unchanged(call), None, "unchanged"
        names = [k.arg for k in call.keywords]
        fields = [name for _, name, _, _ in pieces if name is not None]
        if None in names:  # tr("key", **values): which names come is known only at run time
            return self.as_format(call, template), None, "format"
        if not call.keywords and not fields:
            text = template.format()
            return _quoted(text), text, "literal"
        if any(name not in names for name in fields):
            return self.text_of_call_unchanged(call), None, "unchanged"  # tr() raises KeyError: leave it to do so
        values: dict[str, tuple[str, object]] = {}  # name -> ("const", value) or ("expr", text)
        for keyword in call.keywords:
            value = keyword.value
            inner = (self.rewrite(value) if _is_message_call(value) and all(k in self.catalog for k in _message_keys(value))
                     else None)
            if isinstance(value, ast.Constant) and isinstance(value.value, (str, int, float)):
                values[keyword.arg] = ("const", value.value)
            elif inner is not None and inner[1] is not None:
                values[keyword.arg] = ("const", inner[1])  # a message without placeholders: its text
            else:
                values[keyword.arg] = ("expr", value)
        fstring = self.as_fstring(call, pieces, names, fields, values)
        if fstring is not None:
            return fstring
        return self.as_format(call, template), None, "format"

    def text_of_call_unchanged(self, call: ast.Call) -> str:
        start, end = self.span(call)
        return self.code[start:end]

    def as_format(self, call: ast.Call, template: str) -> str:
        """``"template".format(name=value, ...)``: exactly the str.format call tr() makes, arguments as written."""
        start, _ = self.span(call)
        text = self.text_of(call)
        _, key_end = self.span(call.args[0])
        arguments = text[key_end - start:].lstrip().removeprefix(",").lstrip(" ")
        if arguments.startswith("\n"):
            arguments = arguments.lstrip()
        return f"{_quoted(template)}.format({arguments}"

    def as_fstring(self, call, pieces, names, fields, values) -> tuple[str, None, str] | None:
        expressions = {name: v for name, (kind, v) in values.items() if kind == "expr"}
        uses = {name: fields.count(name) for name in names}
        if any(uses[name] == 0 for name in expressions):
            return None  # an argument tr() evaluates but never prints
        if any(uses[name] > 1 and not isinstance(node, (ast.Name, ast.Constant)) for name, node in expressions.items()):
            return None  # an expression printed twice would run twice
        order = [name for name in dict.fromkeys(fields) if name in expressions]
        if order != [name for name in names if name in expressions] and sum(map(_calls_something, expressions.values())) > 1:
            return None  # this language prints the arguments in another order: they would run in another order
        texts = {}
        for name, node in expressions.items():
            text = self.text_of(node)
            if _is_message_call(node) and all(k in self.catalog for k in _message_keys(node)):
                text, _, form = self.rewrite(node)
                if form not in ("literal", "unchanged"):
                    return None  # an f-string inside an f-string: str.format reads better
            if "\n" in text:
                if "#" in text or '"""' in text or "'''" in text:
                    return None
                text = re.sub(r"\s*\n\s*", " ", text)
            if "\\" in text or isinstance(node, ast.JoinedStr) or any(isinstance(n, ast.JoinedStr) for n in ast.walk(node)):
                return None  # Python < 3.12: no backslash or nested f-string inside an f-string's braces
            if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Dict, ast.Set, ast.DictComp, ast.SetComp)):
                return None  # braces or a colon of its own: reads better as .format(values={...})
            if isinstance(node, ast.Tuple):
                text = f"({text})"
            elif _is_message_call(node) and isinstance(node.args[0], ast.IfExp):
                text = text[1:-1]  # ("A" if flag else "B") needs no parentheses inside braces
            texts[name] = text
        quotes = [q for q in ('"', "'") if not any(q in t for t in texts.values())]
        if not quotes:
            return None
        literal_text = "".join(literal for literal, _, _, _ in pieces)
        quote = next((q for q in quotes if q not in literal_text), quotes[0])
        parts: list[tuple[str, bool]] = []  # (text, is a field); literal text unescaped
        for literal, name, spec, conversion in pieces:
            if literal:
                parts.append((literal, False))
            if name is None:
                continue
            if "{" in spec or "\\" in spec or quote in spec or not name.isidentifier():
                return None  # nested specs, attribute/index fields: leave them to str.format
            if name in expressions:
                field_text = "{" + texts[name] + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                parts.append((field_text, True))
            else:  # a constant: written into the text as str.format would
                value = values[name][1]
                value = {"r": repr, "s": str, "a": ascii}[conversion](value) if conversion else value
                parts.append((format(value, spec), False))
        if not any(is_field for _, is_field in parts):
            text = "".join(p for p, _ in parts)
            return _quoted(text), text, "literal"
        parts = [(p if is_field else _string_literal(p, quote, braces=True), is_field) for p, is_field in parts]
        return self.layout(call, parts, quote), None, "f-string"

    def layout(self, call: ast.Call, parts: list[tuple[str, bool]], quote: str) -> str:
        """One f-string, or adjacent f-strings on several lines where one would be wider than CODE_WIDTH."""
        column = self.column(call)
        one = "f" + quote + "".join(p for p, _ in parts) + quote
        rest = len(self.lines[call.end_lineno - 1]) - len(
            self.lines[call.end_lineno - 1].encode("utf-8")[:call.end_col_offset].decode("utf-8"))
        if column + len(one) + rest <= CODE_WIDTH:
            return one
        chunks: list[list[tuple[str, bool]]] = [[]]
        width = column
        for part in parts:
            pieces = [part] if part[1] else [(w, False) for w in re.findall(r"\S*\s*", part[0]) if w]
            for piece in pieces:
                if chunks[-1] and width + len(piece[0]) + 3 > CODE_WIDTH:
                    chunks.append([])
                    width = column
                chunks[-1].append(piece)
                width += len(piece[0])
        lines = [("f" if any(f for _, f in chunk) else "") + quote + "".join(p for p, _ in chunk) + quote for chunk in chunks]
        text = ("\n" + " " * column).join(lines)
        return text if self.inside_brackets(call) else "(" + ("\n" + " " * (column + 1)).join(lines) + ")"

    def splice(self, call: ast.Call, field: ast.FormattedValue, text: str) -> tuple[int, int, str] | None:
        """A message without placeholders inside an f-string field: (start, end, new text).

        ``f"| {tr('ch8.empty_rows_zero')}"`` -> ``f"| leere Zeilen sind 0:"``; with a format
        spec the field stays and shows the text: ``{tr('label.ratio'):>6}`` -> ``{'Verhältnis':>6}``.
        """
        import io
        import tokenize

        spec_node = field.format_spec
        if spec_node is not None and not all(isinstance(v, ast.Constant) for v in spec_node.values):
            return None
        spec = "".join(v.value for v in spec_node.values) if spec_node is not None else ""
        conversion = {-1: None, 115: str, 114: repr, 97: ascii}[field.conversion]
        start, end = self.span(call)
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(self.code).readline))
        except (tokenize.TokenError, SyntaxError):
            return None
        string_token = next((t for t in tokens if t.type == tokenize.STRING
                             and self.starts[t.start[0] - 1] + t.start[1] <= start < self.starts[t.end[0] - 1] + t.end[1]), None)
        if string_token is None:
            return None
        quote = string_token.string.lstrip("rRbBfFuU")[0]
        other = "'" if quote == '"' else '"'
        if spec or conversion:
            if not any(c in text for c in (other, "\\", "\n", quote)) and '"""' not in string_token.string:
                return start, end, other + text + other  # the field stays: {'Verhältnis':>6}
            text = format(conversion(text) if conversion else text, spec)
        brace = self.code.rfind("{", 0, start)
        close = self.code.find("}", end)
        if brace < 0 or close < 0 or self.code[brace + 1:start].strip():
            return None
        end = close + 1
        if text and _FULL_WIDTH_END(text) and self.code[end:end + 1] == " ":
            end += 1  # f"{tr('k')} {x}" -> f"相同：{x}": no space after a full-width colon
        return brace, end, _string_literal(text, quote, braces=True)

    def inside_brackets(self, call: ast.Call) -> bool:
        """Whether the call is an argument of a call or an item of a list/tuple/dict/set display (lines may break)."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and (call in node.args or call in [k.value for k in node.keywords]):
                return True
            if isinstance(node, (ast.List, ast.Set)) and call in node.elts:
                return True
            if isinstance(node, ast.Dict) and (call in node.values or call in node.keys):
                return True
        return False


def localize_messages(code: str, lang: str, rewrites: list[MessageRewrite] | None = None) -> str:
    """The code with every message call that can be written out shown as text in ``lang`` (see above)."""
    if "tr(" not in code:
        return code
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # IPython magics and the like: shown as written
    writer = _MessageWriter(code, lang, tree)
    fields = {id(n.value): n for n in ast.walk(tree) if isinstance(n, ast.FormattedValue)}
    out = code
    done = []
    for call in reversed(writer.outermost_calls(tree)):
        start, end = writer.span(call)
        new, text, form = writer.rewrite(call)
        if id(call) in fields:  # inside an f-string: only a text without placeholders, spliced in
            if text is None or (splice := writer.splice(call, fields[id(call)], text)) is None:
                continue
            start, end, new = splice
        if form == "unchanged":
            continue
        out = out[:start] + new + out[end:]
        done.append(MessageRewrite(_message_key(call), new, code[start:end], form, start))
    shift = 0
    for rewrite in reversed(done):  # source order: each one moves the ones after it
        rewrite.at += shift
        shift += len(rewrite.new) - len(rewrite.old)
    if rewrites is not None:
        rewrites.extend(reversed(done))
    return out


def unknown_message_keys(code: str) -> list[str]:
    """Keys of tr("key") calls that attnlab/messages.toml lacks."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    catalog = _message_catalog()
    return [key for n in ast.walk(tree) if _is_message_call(n) for key in _message_keys(n) if key not in catalog]


def render_code(code: str, lang: str, rewrites: list[MessageRewrite] | None = None) -> str:
    """A code cell as the ``lang`` notebook shows it: its comments and its messages in ``lang``."""
    return localize_messages(localize_code(code, lang), lang, rewrites)


def neutral_code(code: str, rewrites: list[MessageRewrite]) -> str:
    """A notebook's code with its written-out messages turned back into the source's tr() calls.

    ``rewrites`` (from :func:`render_code`, in order) are looked for where the generator
    put them, else (an exercise stub or solution, whose solution markers moved the code)
    one after another from the last one found, so two keys with the same text in one
    language, or a short text that also occurs in the code, cannot be confused. A text
    that is not where it should be stays, and the code then differs from the other languages'.
    """
    if all(r.at >= 0 and code[r.at:r.at + len(r.new)] == r.new for r in rewrites):
        for rewrite in reversed(rewrites):
            code = code[:rewrite.at] + rewrite.old + code[rewrite.at + len(rewrite.new):]
        return code
    out, cursor = [], 0
    for rewrite in rewrites:
        at = code.find(rewrite.new, cursor)
        if at < 0:
            continue
        out += [code[cursor:at], rewrite.old]
        cursor = at + len(rewrite.new)
    return "".join(out) + code[cursor:]


def find_sources(names: list[str] | None = None) -> list[Source]:
    paths = sorted(p for d in SOURCE_DIRS for p in (ROOT / d / "src").glob("*.md"))
    if names:
        wanted = {pathlib.Path(n).resolve() for n in names}
        paths = [p for p in paths if p.resolve() in wanted]
    return [parse_source(p) for p in paths]


def colab_requirement(root: pathlib.Path = ROOT) -> str:
    """What the Colab cell installs: the runtime package from the course repository."""
    repository = yaml.safe_load((root / "_config.yml").read_text("utf-8"))["repository"]
    return f"attnlab @ git+{repository['url']}@{repository.get('branch', 'main')}"


def colab_cell(lang: str) -> nbformat.NotebookNode:
    """The first code cell: installs attnlab on Colab (form view there), removed on the site."""
    code = COLAB_CODE.format(title=COLAB_TITLE[lang], requirement=colab_requirement())
    cell = nbformat.v4.new_code_cell(code, id="colab")
    cell.metadata.update({"tags": ["remove-cell"], "cellView": "form"})
    return cell


def render_notebook(source: Source, lang: str) -> nbformat.NotebookNode:
    """The unexecuted notebook of ``source`` in ``lang`` (deterministic ids)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC),
                   "language_info": dict(LANGUAGE_INFO),
                   "attnlab": {"source": source.rel, "language": lang}}
    setup_code = SETUP_CODE.format(lang=lang, comment=SETUP_COMMENT[lang])
    setup = [colab_cell(lang), nbformat.v4.new_code_cell(setup_code, id="setup")]
    if not source.cells or source.cells[0].kind != "markdown":
        nb.cells.extend(setup)
    for n, cell in enumerate(source.cells, start=1):
        if cell.kind == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.text[lang], id=f"md-{n:03d}")
        else:
            new = nbformat.v4.new_code_cell(render_code(cell.text, lang), id=f"code-{n:03d}")
            if cell.tags:
                new.metadata["tags"] = list(cell.tags)
            figure_text = {}  # myst-nb's cell-level render options (image alt, figure caption)
            if cell.alt:
                figure_text["image"] = {"alt": cell.alt[lang]}
            if cell.caption:
                figure_text["figure"] = {"caption": cell.caption[lang]}
            if figure_text:
                new.metadata["mystnb"] = figure_text
        nb.cells.append(new)
        if n == 1 and cell.kind == "markdown":
            nb.cells.extend(setup)  # right after the title and introduction
    return nb


# The landing page's list of chapters comes from one place: _toc.yml gives the chapters
# and their order, each chapter's first heading (``# 4 · Title``) its number and title in
# every language. The source writes only what each chapter teaches:
#
#     ```{chapter-list}
#     01-causal-mask: why position $t$ may read only positions $0..t$, …
#     02-multi-head-attention: $D$, $H$ and $d$, …
#     ```
#
# and the page shows ``1. **The causal mask** – why position …``. A chapter of the toc
# without a line, a line for a chapter the toc lacks, or a number that is not the
# chapter's place in the toc is an error; a renamed chapter makes the page stale.
CHAPTER_LIST = re.compile(r"^```\{chapter-list\}\n(?P<body>.*?)\n```$", re.M | re.S)
CHAPTER_TITLE = re.compile(r"^# (?P<number>\d+) · (?P<title>.+)$")


def toc_chapters(root: pathlib.Path = ROOT) -> list[str]:
    """Slugs of the numbered chapters (``NN-slug``), in the order of _toc.yml."""
    toc = yaml.safe_load((root / "_toc.yml").read_text("utf-8"))
    files = [entry["file"] for part in toc["parts"] for entry in part.get("chapters", [])]
    return [f.rsplit("/", 1)[1] for f in files if f.startswith("chapters/en/") and re.match(r"\d\d-", f.rsplit("/", 1)[1])]


def chapter_title(slug: str, lang: str, root: pathlib.Path = ROOT) -> tuple[int, str]:
    """(number, title) of a chapter in ``lang``, from the first heading of its source."""
    source = parse_source(root / "chapters" / "src" / f"{slug}.md")
    first = next(cell for cell in source.cells if cell.kind == "markdown").text[lang].splitlines()[0]
    if not (m := CHAPTER_TITLE.match(first)):
        raise SourceError(f"{source.rel}: the {lang} block must start with '# N · Title', not {first[:60]!r}")
    return int(m.group("number")), m.group("title")


def chapter_list_separator(title: str, lang: str) -> str:
    """What comes between a chapter's bold title and what it teaches: a spaced dash in en and de,
    where a colon after a title that ends in a question mark would print "?**:"; in zh a full-width
    colon, or nothing after a full-width question mark, which already ends the title."""
    if lang == "zh":
        return "" if title.endswith(("？", "?")) else "："
    return " – "


def bold_title(title: str, lang: str) -> str:
    """A chapter title in bold. In zh a closing full-width question mark goes after the ``**``:
    CommonMark does not close ``**`` that follows punctuation and precedes a Chinese character
    (``**…吗？**针对`` would show its asterisks), so the list writes ``**…吗**？针对``."""
    if lang == "zh" and title.endswith("？"):
        return f"**{title[:-1]}**？"
    return f"**{title}**"


def chapter_list(body: str, lang: str, where: str, root: pathlib.Path = ROOT) -> str:
    """The numbered Markdown list of a ``{chapter-list}`` block in ``lang`` (see above)."""
    entries: dict[str, str] = {}
    for line in body.splitlines():
        slug, sep, text = line.partition(": ")
        if not sep or not text.strip():
            raise SourceError(f"{where}: {{chapter-list}} line {line[:60]!r} must be 'NN-slug: what it teaches'")
        if slug in entries:
            raise SourceError(f"{where}: {{chapter-list}} names {slug} twice ({lang})")
        entries[slug] = text.strip()
    chapters = toc_chapters(root)
    if missing := [slug for slug in chapters if slug not in entries]:
        raise SourceError(f"{where}: {{chapter-list}} ({lang}) lacks {', '.join(missing)}, which _toc.yml lists")
    if extra := [slug for slug in entries if slug not in chapters]:
        raise SourceError(f"{where}: {{chapter-list}} ({lang}) names {', '.join(extra)}, which _toc.yml does not list")
    lines = []
    for place, slug in enumerate(chapters, start=1):
        number, title = chapter_title(slug, lang, root)
        if number != place:
            raise SourceError(f"{where}: chapter {slug} is numbered {number} but is number {place} in _toc.yml")
        lines.append(f"{number}. {bold_title(title, lang)}{chapter_list_separator(title, lang)}{entries[slug]}")
    return "\n".join(lines)


def page_text(text: str, lang: str, where: str) -> str:
    """A page's Markdown in ``lang`` with its ``{chapter-list}`` written out."""
    return CHAPTER_LIST.sub(lambda m: chapter_list(m.group("body"), lang, where), text)


def render_page(source: Source, lang: str) -> str:
    """A plain Markdown page; its code cells become ``python`` code blocks (not executed)."""
    header = f"<!-- Generated from {source.rel} by tools/notebooks.py: edit the source, not this file. -->\n\n"
    parts = [page_text(cell.text[lang], lang, f"{source.rel}:{cell.line}") if cell.kind == "markdown"
             else f"```python\n{render_code(cell.text, lang)}\n```"
             for cell in source.cells]
    return header + "\n\n".join(parts) + "\n"


def reader_text(source: Source, lang: str) -> str:
    """Everything a reader of ``lang`` sees from ``source``: prose, code with its comments, alt texts, captions."""
    parts = []
    for cell in source.cells:
        if cell.kind == "markdown":
            parts.append(cell.text[lang])
        else:
            parts.append(render_code(cell.text, lang))
            parts += [texts[lang] for texts in (cell.alt, cell.caption) if texts]
    return "\n".join(parts)


def figures_without_alt(nb: nbformat.NotebookNode) -> list[str]:
    """Ids of code cells that show a picture but have no alt text (screen readers would read a file path)."""
    return [cell.id for cell in nb.cells if cell.cell_type == "code"
            and any(output.get("output_type") in ("display_data", "execute_result")
                    and any(kind in output.get("data", {}) for kind in IMAGE_TYPES) for output in cell.outputs)
            and not cell.metadata.get("mystnb", {}).get("image", {}).get("alt")]


def write_notebook(nb: nbformat.NotebookNode, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    path.write_text(text, "utf-8")


def render(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write the three unexecuted files of ``source`` under ``root``."""
    if is_exercise(source):
        return render_exercise_files(source, root)
    written = []
    for lang in LANGUAGES:
        out = source.output_path(lang, root)
        out.parent.mkdir(parents=True, exist_ok=True)
        if source.meta.get("kind") == "page":
            out.write_text(render_page(source, lang), "utf-8")
        else:
            write_notebook(render_notebook(source, lang), out)
        written.append(out)
    return written


def stable_widget_ids(nb: nbformat.NotebookNode, seed: str) -> nbformat.NotebookNode:
    """Replace the random widget model ids by ids derived from ``seed`` and their order."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    text = json.dumps(nb, ensure_ascii=False)
    for n, old in enumerate(list(state)):
        text = text.replace(old, uuid.uuid5(uuid.NAMESPACE_URL, f"attnlab:{seed}:{n}").hex)
    return nbformat.from_dict(json.loads(text))


def execute(path: pathlib.Path, timeout: int = 300) -> None:
    """Run a notebook in a fresh kernel; store outputs and widget state in place.

    Fails on any error output and on anything written to stderr (warnings
    included, such as matplotlib's missing-glyph warning).
    """
    from nbclient import NotebookClient

    path = path.resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            record_timing=False, resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" or output.get("name") == "stderr":
                raise RuntimeError(f"{path.relative_to(ROOT)} cell {cell.id}: unexpected output\n"
                                   f"{output.get('text') or output.get('evalue')}")
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = coalesce_streams(cell.outputs)
    if missing := figures_without_alt(nb):
        raise RuntimeError(f"{path.relative_to(ROOT)}: cells {missing} show a figure without alt text: "
                           "add ':alt: en: … | de: … | zh: …' to the code cell in the source")
    nb.metadata.language_info = dict(LANGUAGE_INFO)
    nb = stable_widget_ids(nb, path.relative_to(ROOT).as_posix())
    write_notebook(nb, path)


def coalesce_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) chunks: how a print is split depends on timing."""
    merged: list = []
    for output in outputs:
        if (output.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1]["name"] == output["name"]):
            merged[-1]["text"] += output["text"]
        else:
            merged.append(output)
    return merged


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as rendered, before execution (what a source change alters)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def compared_code(nb: nbformat.NotebookNode, source: Source, lang: str, neutral=lambda code: code) -> list[str]:
    """What must be identical in every language: each code cell without comments, its messages turned back into tr()."""
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.id not in GENERATED_CELLS]
    rewrites = []
    for cell in source.cells:
        if cell.kind == "code":
            rewrites.append([])
            render_code(cell.text, lang, rewrites[-1])
    return [strip_comments(neutral_code(neutral(code), done)) for code, done in itertools.zip_longest(cells, rewrites, fillvalue=[])
            if code != []]


# A comment that a German or Chinese reader sees in English. A comment written without
# ``en:/de:/zh:`` stays the same in every language, so it may hold only what needs no
# translation: shapes and formulas (``# [B, H, T, d] -> [B, T, D]``, ``# dV = A^T dO``).
# A word of three or more letters in it (or a two-letter English word, SHORT_ENGLISH) must be
# a name the cell's code uses, a word with a digit or an underscore (``T_kv``, ``float32``),
# an abbreviation in capitals, a gradient (``dO``), or one of CODE_WORDS; anything else (``each``, ``greedy``, ``may attend``) is English prose. The
# same holds for comments in the ``python`` blocks of a de or zh prose block (a hint's
# code) that the en block has word for word.
CODE_WORDS = frozenset({"noqa", "rowsum", "sqrt", "exp", "log", "max", "min", "sum", "softmax", "tril", "triu", "bool",
                        "block"})
SHORT_ENGLISH = frozenset({"on", "at", "of", "to", "is", "in", "by", "or", "if", "it", "as", "an", "be", "we", "no", "up"})
_PROSE_CODE_BLOCK = re.compile(r"^(?P<indent> *)```(?:python|py|\{code-block\} python)\n(?P<code>.*?)\n(?P=indent)```$", re.M | re.S)


def _comments(code: str) -> list[tuple[int, str]]:
    import io
    import tokenize

    try:
        return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [(n + 1, line[line.index("#"):]) for n, line in enumerate(code.split("\n")) if line.lstrip().startswith("#")]


def _names(code: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"#.*", "", code)))


def english_words(comment: str, names: set[str]) -> list[str]:
    """The words of an untranslated comment that are prose, not code (see above)."""
    words = re.findall(r"[A-Za-z][A-Za-z0-9_]*", comment.lstrip("#"))
    return [w for w in words if (len(w) > 2 or w.lower() in SHORT_ENGLISH) and w not in names and w not in CODE_WORDS
            and not w.isupper() and not re.fullmatch(r"d[A-Z]\w*", w)  # dO, dV: a gradient's name
            and not re.search(r"[0-9_]", w) and w not in (SOLUTION_BEGIN[2:].split() + SOLUTION_END[2:].split())]


def untranslated_comments(source: Source) -> list[str]:
    """``file:line: comment`` for every comment a de or zh reader of ``source`` would see in English."""
    found = []
    for cell in source.cells:
        if cell.kind == "code":
            names = _names(cell.text)
            english = {text for _, text in _comments(localize_code(cell.text, "en"))}
            for lang in ("de", "zh"):
                for line, text in _comments(localize_code(cell.text, lang)):
                    if text in english and (words := english_words(text, names)):
                        found.append(f"{source.rel}:{cell.line + line}: {lang}: {text!r} ({', '.join(words)})")
            continue
        english = {text for block in _PROSE_CODE_BLOCK.finditer(cell.text["en"]) for _, text in _comments(block["code"])}
        for lang in ("de", "zh"):
            for block in _PROSE_CODE_BLOCK.finditer(cell.text[lang]):
                names = _names(block["code"])
                for _, text in _comments(block["code"]):
                    if text in english and (words := english_words(text, names)):
                        found.append(f"{source.rel}:{cell.line}: {lang} prose: {text!r} ({', '.join(words)})")
    return sorted(set(found), key=found.index)


def check(root: pathlib.Path = ROOT) -> list[str]:
    """Problems with the committed files: stale, missing, orphaned, code drift, English comments in de/zh."""
    problems: list[str] = []
    try:
        sources = find_sources()
    except SourceError as error:
        return [str(error)]
    expected: set[pathlib.Path] = set()
    for source in sources:
        problems += [f"{where}: an English comment in the {where.split(': ')[1]} notebook; write it "
                     "'# en: … | de: … | zh: …' (only shapes and formulas stay untranslated)"
                     for where in untranslated_comments(source)]
        if is_exercise(source):
            problems += check_exercise(source, root, expected)
            continue
        code_by_lang = {}
        for lang in LANGUAGES:
            out = source.output_path(lang, root)
            expected.add(out)
            rel = out.relative_to(root)
            if not out.exists():
                problems.append(f"{rel}: missing, run `make notebooks`")
                continue
            if source.meta.get("kind") == "page":
                if out.read_text("utf-8") != render_page(source, lang):
                    problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
                continue
            committed = nbformat.read(out, as_version=4)
            if strip_outputs(committed) != render_notebook(source, lang):
                problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
            code_by_lang[lang] = compared_code(committed, source, lang)
            unexecuted = [c.id for c in committed.cells if c.cell_type == "code" and c.execution_count is None]
            if unexecuted:
                problems.append(f"{rel}: cells {unexecuted[:3]} not executed, run `make notebooks`")
            if no_alt := figures_without_alt(committed):
                problems.append(f"{rel}: cells {no_alt} show a figure without alt text (add :alt: in {source.rel})")
        if len(code_by_lang) == len(LANGUAGES) and len({json.dumps(v) for v in code_by_lang.values()}) > 1:
            problems.append(f"{source.rel}: code differs between the en/de/zh notebooks")
    for section in (*SOURCE_DIRS, *GENERATED_DIRS):
        for lang in LANGUAGES:
            for path in sorted((root / section / lang).glob("*")):
                if path.suffix in (".ipynb", ".md") and path not in expected:
                    problems.append(f"{path.relative_to(root)}: no source in "
                                    f"{'exercises' if section in GENERATED_DIRS else section}/src/ makes it")
    return problems


# --------------------------------------------------------------------------
# Exercises: one source -> stub notebooks (exercises/<lang>/) and solutions (solutions/<lang>/)

SOLUTION_BEGIN = "# BEGIN SOLUTION"
SOLUTION_END = "# END SOLUTION"


def is_exercise(source: Source) -> bool:
    return source.path.parent.parent.name == "exercises"


def is_stub(path: pathlib.Path) -> bool:
    """An exercise notebook (exercises/<lang>/x.ipynb): rendered, never executed."""
    return path.parent.parent.name == "exercises" and path.parent.name in LANGUAGES


def solution_path(source: Source, lang: str, root: pathlib.Path = ROOT) -> pathlib.Path:
    return root / GENERATED_DIRS[0] / lang / f"{source.slug}.ipynb"


def stub_lines(indent: str, lang: str) -> list[str]:
    """What replaces a solution region in the learner's notebook (texts from attnlab/messages.toml)."""
    from attnlab.i18n import tr

    return [f"{indent}# {tr('grader.stub.todo', lang=lang)}",
            f"{indent}raise NotImplementedError({json.dumps(tr('grader.stub.raise', lang=lang), ensure_ascii=False)})"]


def solution_regions(code: str) -> list[tuple[int, int]]:
    """(begin, end) line numbers of every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` pair."""
    regions, begin = [], None
    for n, line in enumerate(code.split("\n")):
        marker = line.strip()
        if marker == SOLUTION_BEGIN:
            if begin is not None:
                raise SourceError(f"code line {n + 1}: {SOLUTION_BEGIN} inside another solution region")
            begin = n
        elif marker == SOLUTION_END:
            if begin is None:
                raise SourceError(f"code line {n + 1}: {SOLUTION_END} without {SOLUTION_BEGIN}")
            if n == begin + 1:
                raise SourceError(f"code line {n + 1}: empty solution region")
            regions.append((begin, n))
            begin = None
    if begin is not None:
        raise SourceError(f"code line {begin + 1}: {SOLUTION_BEGIN} without {SOLUTION_END}")
    return regions


def exercise_code(code: str, lang: str, solution: bool) -> str:
    """The solution (markers dropped) or the stub (each region -> TODO + raise) of a code cell."""
    lines = code.split("\n")
    out: list[str] = []
    last = 0
    for begin, end in solution_regions(code):
        out += lines[last:begin]
        if solution:
            out += lines[begin + 1:end]
        else:
            out += stub_lines(lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())], lang)
        last = end + 1
    return "\n".join(out + lines[last:])


def render_exercise(source: Source, lang: str, solution: bool) -> nbformat.NotebookNode:
    """The exercise notebook (the stub) or its solution, unexecuted."""
    nb = render_notebook(source, lang)
    nb.metadata["attnlab"]["notebook"] = "solution" if solution else "exercise"
    first = nb.cells[0]
    if solution and first.cell_type == "markdown" and first.source.startswith("# "):
        from attnlab.i18n import tr

        title, newline, rest = first.source[2:].partition("\n")
        first.source = f"# {tr('grader.solution_title', lang=lang, title=title)}{newline}{rest}"
        # The intro's "Stuck? Here is the solution" paragraph would link the solution page to itself:
        # on the solution page a note that points back to the exercise takes its place, right after
        # the intro's first paragraph, before the instructions that the solution does not need.
        own_link = f"](../../{GENERATED_DIRS[0]}/{lang}/{source.slug}.ipynb)"
        note = tr("grader.solution_note", lang=lang, link=f"../../exercises/{lang}/{source.slug}.ipynb")
        paragraphs = [p for p in first.source.split("\n\n") if own_link not in p]
        first.source = "\n\n".join(paragraphs[:2] + [note] + paragraphs[2:])
    regions = 0
    for cell, code_cell in zip([c for c in nb.cells if c.cell_type == "code" and c.id not in GENERATED_CELLS],
                               [c for c in source.cells if c.kind == "code"]):
        try:
            regions += len(solution_regions(cell.source))
            cell.source = exercise_code(cell.source, lang, solution)
        except SourceError as error:
            raise SourceError(f"{source.rel}:{code_cell.line}: {error}") from None
    if not regions:
        raise SourceError(f"{source.rel}: an exercise needs at least one {SOLUTION_BEGIN} ... {SOLUTION_END} region")
    return nb


def render_exercise_files(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write the stub and the solution of ``source`` in every language (unexecuted)."""
    written = []
    for lang in LANGUAGES:
        for path, solution in ((source.output_path(lang, root), False), (solution_path(source, lang, root), True)):
            write_notebook(render_exercise(source, lang, solution), path)
            written.append(path)
    return written


def _stub_code(nb: nbformat.NotebookNode, source: Source, lang: str) -> list[str]:
    """Code of a stub without comments, its localized raise message and messages made neutral."""
    raise_line = stub_lines("", lang)[1]
    return compared_code(nb, source, lang, lambda code: code.replace(raise_line, "raise NotImplementedError()"))


def check_exercise(source: Source, root: pathlib.Path, expected: set[pathlib.Path]) -> list[str]:
    """Stale, missing, executed stubs, unexecuted solutions, code drift of one exercise source."""
    problems: list[str] = []
    stub_code: dict[str, list[str]] = {}
    solution_code: dict[str, list[str]] = {}
    for lang in LANGUAGES:
        for out, solution in ((source.output_path(lang, root), False), (solution_path(source, lang, root), True)):
            expected.add(out)
            rel = out.relative_to(root)
            if not out.exists():
                problems.append(f"{rel}: missing, run `make notebooks`")
                continue
            committed = nbformat.read(out, as_version=4)
            try:
                rendered = render_exercise(source, lang, solution)
            except SourceError as error:
                return [str(error)]
            if strip_outputs(committed) != rendered:
                problems.append(f"{rel}: stale versus {source.rel}, run `make notebooks`")
            code_cells = [c for c in committed.cells if c.cell_type == "code"]
            if solution:
                solution_code[lang] = compared_code(committed, source, lang)
                unexecuted = [c.id for c in code_cells if c.execution_count is None]
                if unexecuted:
                    problems.append(f"{rel}: cells {unexecuted[:3]} not executed, run `make notebooks`")
            else:
                stub_code[lang] = _stub_code(committed, source, lang)
                if any(c.outputs or c.execution_count is not None for c in code_cells) or "widgets" in committed.metadata:
                    problems.append(f"{rel}: an exercise notebook must have no outputs, run `make notebooks`")
    for kind, code_by_lang in (("exercise", stub_code), ("solution", solution_code)):
        if len(code_by_lang) == len(LANGUAGES) and len({json.dumps(v) for v in code_by_lang.values()}) > 1:
            problems.append(f"{source.rel}: {kind} code differs between the en/de/zh notebooks")
    return problems


def executed_paths(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The notebooks of ``source`` that ``build`` executes: a chapter's, or an exercise's solutions."""
    if source.meta.get("kind") == "page":
        return []
    if is_exercise(source):
        return [solution_path(source, lang, root) for lang in LANGUAGES]
    return [source.output_path(lang, root) for lang in LANGUAGES]


def refresh(source: Source, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Render ``source`` again (prose, alt texts, captions, tags, exercise stubs) and keep the
    outputs and widget state of the executed notebooks.

    Only for changes that cannot alter what a cell prints: refuses, and leaves every file as
    it was, when any code cell's id, code (comments aside) or order differs from what was
    executed (run ``build`` then).
    """
    executed = {path: nbformat.read(path, as_version=4) for path in executed_paths(source, root) if path.exists()}
    before = {path: path.read_bytes() for path in executed}
    written = render(source, root)
    code = lambda nb: [(c.id, strip_comments(c.source)) for c in nb.cells if c.cell_type == "code"]  # noqa: E731
    fresh = {path: nbformat.read(path, as_version=4) for path in executed}
    changed = [path for path in executed if code(fresh[path]) != code(executed[path])]
    if changed:
        for path, data in before.items():
            path.write_bytes(data)
        raise SourceError(f"{changed[0].relative_to(root)}: code changed since it was executed; "
                          "run `python -m tools.notebooks build` instead")
    for path, old in executed.items():
        new = fresh[path]
        outputs = {c.id: c for c in old.cells if c.cell_type == "code"}
        for cell in new.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = outputs[cell.id].outputs, outputs[cell.id].execution_count
        for key in ("widgets", "language_info"):
            if key in old.metadata:
                new.metadata[key] = old.metadata[key]
        write_notebook(new, path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "render", "check", "refresh"])
    parser.add_argument("sources", nargs="*", help="source files (default: all)")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = check()
        print("\n".join(problems) or "notebooks are up to date")
        return 1 if problems else 0
    if args.command == "refresh":
        for source in find_sources(args.sources):
            for path in refresh(source):
                print(f"refreshed {path.relative_to(ROOT)}")
        return 0
    for source in find_sources(args.sources):
        for path in render(source):
            if args.command == "build" and path.suffix == ".ipynb" and not is_stub(path):
                print(f"executing {path.relative_to(ROOT)}", flush=True)
                execute(path)
            else:
                print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
