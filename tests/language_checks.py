"""Shared checks that a learner's bad input gets a clear message in the reader's language."""

import pytest

import attnlab


def message(lang, exception, call):
    """The message ``call`` raises in ``lang`` (the language is reset to English afterwards)."""
    attnlab.set_language(lang)
    try:
        with pytest.raises(exception) as info:
            call()
    finally:
        attnlab.set_language("en")
    return str(info.value)


def assert_message_in_languages(exception, call, words_by_language):
    """``call`` raises ``exception`` whose text holds every word given for each language."""
    for lang, words in words_by_language.items():
        text = message(lang, exception, call)
        for word in words:
            assert word in text, (lang, text)
