"""One tr("key", ...) call of a code cell written out as text in the notebook's language.

Which calls the generator can write out (a constant key that attnlab/messages.toml has, no
``lang=``, not inside a function or class the package defines too), and how one becomes a
string literal, an f-string or ``"…".format(…)`` that prints exactly what tr() prints
(see tools/notebooks/messages.py for the whole rule).
"""

from __future__ import annotations

import ast
import functools
import re
import string

from .source_format import ROOT

MESSAGE_FUNCTIONS = ("tr", "attnlab.tr", "i18n.tr")


def _FULL_WIDTH_END(text: str) -> bool:
    """Whether ``text`` ends with full-width punctuation (after which Chinese puts no space)."""
    import unicodedata

    return unicodedata.east_asian_width(text[-1]) in "WF" and unicodedata.category(text[-1])[0] == "P"

NO_REWRITE_INSIDE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
CODE_WIDTH = 120  # an f-string longer than this is split into adjacent literals, one per line


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


def unknown_message_keys(code: str) -> list[str]:
    """Keys of tr("key") calls that attnlab/messages.toml lacks."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    catalog = _message_catalog()
    return [key for n in ast.walk(tree) if _is_message_call(n) for key in _message_keys(n) if key not in catalog]
