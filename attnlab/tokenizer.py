"""A character-level tokenizer for German, Chinese and English (no download).

Each character is one token: a Latin letter, an umlaut and a Chinese
character alike. The vocabulary is every character of the course's training
text (``attnlab/data/corpus.{en,de,zh}.txt``) and of its example sentence in
the three languages (``tr("sentence")``), plus one id for characters it has
never seen (``UNKNOWN``, id 0) and one id for the ``MASK`` token of masked
language modelling (chapter 7, id 1). ``encode`` refuses a character outside
its vocabulary with an error that names it (``errors="strict"``, the default, as
in ``str.encode``); ``errors="replace"`` encodes it as ``UNKNOWN``, the
replacement character U+FFFD (which ``bytes.decode`` uses; ``str.encode``
replaces with ``?``).
"""

from __future__ import annotations

import numbers
from functools import lru_cache
from importlib import resources

LANGUAGES = ("en", "de", "zh")
UNKNOWN = "\ufffd"  # the replacement character, id 0
MASK = "\u2588"  # a full block, id 1: BERT's [MASK] (chapter 7)
SPECIALS = (UNKNOWN, MASK)


class CharTokenizer:
    """``encode("text") -> [ids]``, ``decode([ids]) -> "text"``."""

    def __init__(self, characters: str):
        self.chars = list(SPECIALS) + sorted(set(characters) - set(SPECIALS))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @property
    def mask_id(self) -> int:
        return self.ids[MASK]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """One id per character. A character outside the vocabulary is an error that names it
        (``errors="strict"``), or id 0, ``UNKNOWN`` (``errors="replace"``); the parameter's name and
        meaning are those of ``str.encode`` and ``bytes.decode``."""
        from .i18n import tr
        from .inputs import describe

        if not isinstance(text, str):
            raise TypeError(tr("error.encode_text", got=describe(text)))
        if errors not in ("strict", "replace"):
            raise ValueError(tr("error.encode_errors", got=describe(errors)))
        first = {}  # unknown character -> its first position
        for i, c in enumerate(text):
            if c not in self.ids:
                first.setdefault(c, i)
        if first and errors == "strict":
            shown = [tr("error.encode_unknown_char", char=c, code=f"U+{ord(c):04X}", position=i)
                     for c, i in list(first.items())[:5]]
            raise ValueError(tr("error.encode_unknown", chars=tr("error.list_separator").join(shown)))
        return [self.ids.get(c, 0) for c in text]

    def decode(self, ids) -> str:
        from .i18n import tr
        from .inputs import describe

        if getattr(ids, "ndim", 1) != 1 or isinstance(ids, (str, bytes)):
            raise TypeError(tr("error.decode_shape", got=describe(ids)))  # a batch [B, T]: decode one row
        ids = ids.tolist() if hasattr(ids, "tolist") else [i.item() if getattr(i, "ndim", None) == 0 else i for i in ids]
        if any(isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in ids):
            raise TypeError(tr("error.decode_shape", got=describe(ids)))
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(tr("error.decode_ids", high=self.vocab_size - 1, bad=bad[:5]))
        return "".join(self.chars[int(i)] for i in ids)


@lru_cache(maxsize=None)
def corpus(lang: str) -> str:
    """The course's own prose in ``lang`` (chapters 1 to 3), the small GPT's training text."""
    if lang not in LANGUAGES:
        from .i18n import tr

        raise ValueError(tr("error.corpus_lang", langs=", ".join(LANGUAGES), got=repr(lang)))
    return resources.files("attnlab").joinpath("data", f"corpus.{lang}.txt").read_text("utf-8")


@lru_cache(maxsize=1)
def course_tokenizer() -> CharTokenizer:
    """One tokenizer for all three languages: every character of the three corpora and example sentences."""
    from .i18n import tr

    sentences = "".join(tr("sentence", lang=lang) for lang in LANGUAGES)
    return CharTokenizer("".join(corpus(lang) for lang in LANGUAGES) + sentences)
