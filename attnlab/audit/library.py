"""What the auditor needs from Hugging Face ``transformers``: the module itself or a clear error.

``transformers`` is the optional extra ``attnlab[audit]`` (pinned in requirements/lock.txt):
:func:`require_transformers` returns it, or says how to install it. :func:`registered_as` reads how the
library registers a class with its auto classes (causal LM, masked LM, sequence to sequence): the
auditor's expectation of a class comes from that registration, never from the class's name.
"""

from __future__ import annotations

import functools

from ..i18n import tr

try:
    import transformers
except ImportError:  # pragma: no cover - the message says how to install the extra
    transformers = None


def require_transformers():
    """The ``transformers`` module, or a clear error saying how to install it."""
    if transformers is None:
        raise ImportError(tr("audit.no_transformers"))
    transformers.logging.set_verbosity_error()  # no warnings on stderr (a notebook would fail)
    return transformers


def _registered_config(config) -> bool:
    """Is ``type(config)`` registered with ``AutoModelForCausalLM`` (or BERT or T5, built by class)?"""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return type(config).__name__ in ("BertConfig", "T5Config") or type(config) in MODEL_FOR_CAUSAL_LM_MAPPING


def registered_as(model_class) -> str | None:
    """How ``transformers`` registers ``model_class`` (a class or its name): ``"causal"`` (a class of
    ``AutoModelForCausalLM``), ``"masked"`` (``AutoModelForMaskedLM``), ``"seq2seq"``
    (``AutoModelForSeq2SeqLM``), or ``None`` (a base model, or a class the auto mappings do not list).
    The expectation comes from this registration, never from the class's name."""
    tf = require_transformers()
    name = model_class if isinstance(model_class, str) else getattr(model_class, "__name__", "")
    for kind, mapping in _mappings(tf).items():
        if name in mapping:
            return kind
    return None


@functools.lru_cache(maxsize=None)
def _mapping_names(tf_version: str) -> dict:
    from transformers.models.auto import modeling_auto

    names = {}
    for kind, attr in (("causal", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"), ("masked", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
                       ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES")):
        mapping = getattr(modeling_auto, attr, {})
        names[kind] = frozenset(n for value in mapping.values() for n in ((value,) if isinstance(value, str) else value))
    return names


def _mappings(tf) -> dict:
    return _mapping_names(tf.__version__)
