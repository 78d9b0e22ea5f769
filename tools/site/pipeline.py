"""The whole build, step by step: assets, each language's site and the clean-up of its pages,
the root page, the web fonts."""

from __future__ import annotations

import fcntl

from .assets import copy_assets
from .cjk_font import write_web_fonts
from .font_awesome import cut_font_awesome, drop_font_awesome_js
from .languages import build_language
from .layout import BUILD, HTML
from .root_page import write_language_index, write_root_page
from .theme_words import localize_theme_words
from .widget_frames import compress_frames


def build(languages: list[str]) -> None:
    copy_assets()
    HTML.mkdir(parents=True, exist_ok=True)
    for lang in languages:
        build_language(lang)
        write_language_index(lang)
        print(f"{lang}: the theme's English words localized on {localize_theme_words(lang)} pages")
        drop_font_awesome_js(lang)
        sizes = cut_font_awesome(lang)
        before, after = compress_frames(lang)
        print(f"{lang}: widget frames as lossless WebP, pages with widgets {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")
        print(f"{lang}: Font Awesome cut to the pages' icons: " + ", ".join(f"{name} {size / 1024:.1f} KiB"
                                                                      for name, size in sizes.items()))
    write_root_page()
    write_web_fonts(languages)
    print(f"\nThe site is in {HTML}/ (open {HTML / 'index.html'})")


def build_once(run: str, languages: list[str]) -> None:
    """``build(languages)`` from scratch, once for the test run named ``run``, however many
    processes ask: the first to take the lock builds, the others wait for it and find the
    marker. ``make test`` starts one in the background while pip installs the rest of the venv
    (a fresh clone's pip keeps one core busy, the build takes the other); the site tests call it
    too, so a site is there even when no background build ran or it failed (then they build
    again and show its error)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    marker = BUILD / "site-built-for-run"
    with open(BUILD / "site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the build fails
        if not (marker.exists() and marker.read_text() == run):
            marker.unlink(missing_ok=True)
            build(languages)
            marker.write_text(run)
