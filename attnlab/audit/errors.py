"""How the auditor reports what went wrong: its own reasons, a crash of the library, an error in one line.

:class:`Keyed` is the auditor's own reason for a verdict (a message key, rendered in each reader's
language); :class:`LibraryError` a crash of the library on a valid input, with :func:`repro_line`, a
one-line command that repeats it with the library alone; :func:`one_line` any exception as one line.
"""

from __future__ import annotations

import re

from ..i18n import tr

class Keyed(RuntimeError):
    """The auditor's own reason for a verdict, as a message key and its values: the JSON keeps both, so the
    page renders the reason in each reader's language (``str()`` of it is the English text)."""

    def __init__(self, key: str, **values):
        super().__init__(tr(key, lang="en", **values))
        self.key, self.values = key, values


class LibraryError(RuntimeError):
    """The library crashed on a valid input (a model it built, token ids in its vocabulary): a finding."""

    def __init__(self, message: str, repro: str):
        super().__init__(message)
        self.message, self.repro = message, repro


# transformers' message for an optional package that is not installed ("TimmWrapperModel requires the
# timm library but it was not found in your environment"): the environment lacks it, the library is fine
MISSING_PACKAGE = re.compile(r"ImportError: .* requires the \S+ library but it was not found")


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (no traceback). A first line
    that ends in a colon announces the next one ("... validator 'validate_architecture':"), so that one is
    joined to it."""
    text = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if first.endswith(":") and len(text) > 1:
        first = f"{first} {text[1]}"
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def repro_line(config, model_class, padding: str, cached: bool) -> str:
    """A one-line Python command that builds the tiny model from the library alone and makes the call
    that failed (the non-default config values, the first half of 8 tokens, then one cached step)."""
    try:
        default = type(config)().to_dict()
    except Exception:
        default = {}
    diff = {k: v for k, v in config.to_dict().items()
            if k not in ("transformers_version", "architectures", "model_type", "dtype", "torch_dtype")
            and isinstance(v, (int, float, bool, str)) and default.get(k, object()) != v}
    call = "o = m(x[:, :4], use_cache=True); m(x[:, 4:5], use_cache=True, cache=o.cache)" if cached \
        else "m(x)"
    return (f"python -c \"import torch, transformers as t; m = t.{model_class.__name__}(t.{type(config).__name__}"
            f"(**{diff!r})).eval(); x = torch.ones(1, 8, dtype=torch.long); {call}\"")
