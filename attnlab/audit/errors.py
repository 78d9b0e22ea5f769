"""How the auditor reports what went wrong: its own reasons, a crash of the library, an error in one line.

:class:`Keyed` is the auditor's own reason for a verdict (a message key, rendered in each reader's
language); :class:`LibraryError` a crash of the library on a valid input, with :func:`repro_line`, a
one-line command that repeats it with the library alone; :func:`one_line` any exception as one line.
"""

from __future__ import annotations

import re

from ..i18n import tr

def render(key: str, values: dict | None, lang: str | None = None) -> str:
    """Message ``key`` with ``values`` in ``lang``; a value named ``..._key`` is itself a message, a key or a
    ``[key, values]`` pair, rendered in the same language and passed without the suffix
    (``test_key="ch5.test_jacobian"`` gives ``test``)."""
    def nested(value):
        return tr(value, lang=lang) if isinstance(value, str) else render(value[0], value[1], lang)

    return tr(key, lang=lang, **{name.removesuffix("_key") if name.endswith("_key") else name:
                                 nested(value) if name.endswith("_key") else value
                                 for name, value in (values or {}).items()})


class Keyed(RuntimeError):
    """The auditor's own reason for a verdict, as a message key and its values: the JSON keeps both, so the
    page renders the reason in each reader's language (``str()`` of it is the English text)."""

    def __init__(self, key: str, **values):
        super().__init__(render(key, values, "en"))
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


def _changed(values: dict, default: dict) -> dict:
    """The plain values (numbers, strings, booleans) of a config's dict that differ from its default's."""
    return {k: v for k, v in values.items()
            if k not in ("transformers_version", "architectures", "model_type", "dtype", "torch_dtype")
            and isinstance(v, (int, float, bool, str)) and default.get(k, object()) != v}


def repro_line(config, model_class, padding: str, cached: bool, batch: int = 1) -> str:
    """A one-line Python command that builds the tiny model from the library alone and makes the call
    that failed (the non-default config values; the first half of 8 tokens, then one cached step; or, not
    cached, one call on ``batch`` rows of 8 tokens, with an all-ones ``attention_mask`` where ``padding``
    is not ``"none"``)."""
    try:
        default = type(config)().to_dict()
    except Exception:
        default = {}
    diff = _changed(config.to_dict(), default)
    for key, value in config.to_dict().items():  # a sub-config (Blt's four): the sizes that differ, as a dict
        if key.endswith("_config") and isinstance(value, dict) and isinstance(default.get(key), dict):
            sub = _changed(value, default[key])
            if sub:
                diff[key] = sub
    call = "o = m(x[:, :4], use_cache=True); m(x[:, 4:5], use_cache=True, cache=o.cache)" if cached \
        else "m(x)" if padding == "none" else "m(x, attention_mask=torch.ones_like(x))"
    return (f"python -c \"import torch, transformers as t; m = t.{model_class.__name__}(t.{type(config).__name__}"
            f"(**{diff!r})).eval(); x = torch.ones({batch}, 8, dtype=torch.long); {call}\"")
