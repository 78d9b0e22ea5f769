"""Messages in code: a cell's tr() calls shown as text in the notebook's language, and back.

:func:`render_code` gives a code cell as a notebook in one language shows it (its comments
and its messages in that language); :func:`neutral_code` turns a notebook's written-out
messages back into the source's tr() calls, so that the code of the three languages can be
compared.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .comments import localize_code
from .message_writer import _message_key, _MessageWriter

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


@dataclass
class MessageRewrite:
    key: str
    new: str  # the notebook's text
    old: str  # the source's tr(...) call
    form: str  # "literal", "f-string" or "format"
    at: int = -1  # where ``new`` starts in the cell as rendered


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
