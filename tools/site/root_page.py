"""The root page (_build/html/index.html): it sends a browser to the site in its language; and each
language's own front door (_build/html/LANG/index.html), which sends it to that language's first page."""

from __future__ import annotations

import json

from .cjk_font import WEB_FONT, cjk_ranges
from .languages import SPHINX_LANGUAGE
from .layout import HTML, TITLES

ROOT_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="en/_static/favicon.svg">
<title>Causal Attention, Step by Step</title>
<script>
(function () {{
  var langs = (navigator.languages || [navigator.language || "en"]).map(function (l) {{ return l.toLowerCase(); }});
  var pick = "en";
  for (var i = 0; i < langs.length; i++) {{
    var l = langs[i].slice(0, 2);
    if (l === "en" || l === "de" || l === "zh") {{ pick = l; break; }}
  }}
  var pages = {pages};
  if (!/[?&]stay\\b/.test(location.search)) location.replace(pages[pick]);
}})();
</script>
<style>
@font-face {{ font-family: "attnlab Noto Sans SC"; src: url("zh/{web_font}") format("woff2");
  font-display: block; unicode-range: {unicode_range}; }}
body {{ font-family: sans-serif, "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "Noto Sans CJK SC",
  "Source Han Sans SC", "Noto Sans SC", "WenQuanYi Micro Hei", "attnlab Noto Sans SC";
  max-width: 36rem; margin: 4rem auto; line-height: 1.6; }}
</style>
</head><body>
<h1>Causal Attention, Step by Step</h1>
<ul>
{links}
</ul>
</body></html>
"""


def write_root_page() -> None:
    pages = {lang: f"{lang}/chapters/{lang}/index.html" for lang in TITLES}
    links = "\n".join(f'<li><a href="{pages[lang]}" hreflang="{lang}" lang="{lang}">{TITLES[lang]}</a></li>'
                      for lang in TITLES)
    unicode_range = ", ".join(f"U+{lo:04X}-{hi:04X}" for lo, hi in cjk_ranges())
    (HTML / "index.html").write_text(ROOT_PAGE.format(pages=json.dumps(pages), links=links, unicode_range=unicode_range,
                                                      web_font=WEB_FONT.as_posix()), "utf-8")


# Jupyter Book writes LANG/index.html as one bare <meta> refresh: no document, no language, no icon, so
# a browser asked the server for /favicon.ico, a 404 that Chromium once logged as a console error of
# the page loaded next in the same tab (the page pass failed once in a dozen runs of make test).
LANGUAGE_INDEX = """<!DOCTYPE html>
<html lang="{html_lang}"><head><meta charset="utf-8">
<meta http-equiv="Refresh" content="0; url={first}">
<link rel="icon" href="_static/favicon.svg">
<title>{title}</title>
</head><body><p><a href="{first}">{title}</a></p></body></html>
"""


def write_language_index(lang: str) -> None:
    """LANG/index.html: a small page in the language that refreshes to its first page at once."""
    first = f"chapters/{lang}/index.html"
    html_lang = SPHINX_LANGUAGE[lang].replace("_", "-")  # as Sphinx writes it on every other page (zh-CN)
    page = LANGUAGE_INDEX.format(html_lang=html_lang, first=first, title=TITLES[lang])
    (HTML / lang / "index.html").write_text(page, "utf-8")
