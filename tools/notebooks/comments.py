"""Code comments in three languages: each notebook keeps its own, and none is left in English.

A source writes a comment once per language (``# en: … | de: … | zh: …`` on one line, or
three whole lines ``# en:``, ``# de:``, ``# zh:``); :func:`localize_code` keeps the one of a
notebook's language. :func:`strip_comments` gives what must be identical in every language,
and :func:`untranslated_comments` finds comments a de or zh reader would see in English.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from .source_format import LANGUAGES, SOLUTION_BEGIN, SOLUTION_END, THREE_LANGUAGES, SourceError

if TYPE_CHECKING:
    from .sources import Source

# "# en: … | de: … | zh: …", also after a neutral lead-in such as a shape: "# [B, T]: en: … | de: … | zh: …"
INLINE_COMMENT = re.compile(r"#\s?(?P<lead>[^#]*?)" + THREE_LANGUAGES)
LINE_COMMENT = re.compile(r"^(?P<indent>\s*)#\s?(?P<lang>en|de|zh):\s(?P<text>.*?)\s*$")


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
