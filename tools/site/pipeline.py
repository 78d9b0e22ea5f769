"""The whole build, step by step: assets, each language's site and the clean-up of its pages,
the root page, the web fonts."""

from __future__ import annotations

from .assets import copy_assets
from .cjk_font import write_web_fonts
from .font_awesome import cut_font_awesome, drop_font_awesome_js
from .languages import build_language
from .layout import HTML
from .root_page import write_root_page
from .widget_frames import compress_frames


def build(languages: list[str]) -> None:
    copy_assets()
    HTML.mkdir(parents=True, exist_ok=True)
    for lang in languages:
        build_language(lang)
        drop_font_awesome_js(lang)
        sizes = cut_font_awesome(lang)
        before, after = compress_frames(lang)
        print(f"{lang}: widget frames as lossless WebP, pages with widgets {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")
        print(f"{lang}: Font Awesome cut to the pages' icons: " + ", ".join(f"{name} {size / 1024:.1f} KiB"
                                                                      for name, size in sizes.items()))
    write_root_page()
    write_web_fonts(languages)
    print(f"\nThe site is in {HTML}/ (open {HTML / 'index.html'})")
