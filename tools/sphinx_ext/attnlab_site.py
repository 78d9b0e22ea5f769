"""Sphinx extension of the course site (loaded through _config.yml).

* a language switcher on every page, linking the same page in the other
  languages (the three sites lie side by side: _build/html/{en,de,zh}/);
* a MathJax 2 stand-in for the widgets library, which calls
  ``MathJax.Hub.Queue`` while the book loads MathJax 3;
* alt text for widget frames (tools/web/widget-alt.js) and an accessible name
  for the theme's search button that holds its visible words;
* a tab stop on every block that scrolls (tools/web/tab-stops.js), and formulas
  wider than their column set smaller to fit (tools/web/fit-math.js);
* a "Course (PDF)" link in the theme's download menu when the site has the
  course's PDF (``attnlab_pdf``, set by tools/site/ only if ``make pdf`` made one);
* drops script tags that Sphinx 7.4 adds twice (the Thebe inline script:
  "THEBE_JS_URL already declared" in the browser console).
"""

from __future__ import annotations

import html
import re

LANGUAGE_NAMES = {"en": "English", "de": "Deutsch", "zh": "中文"}
SWITCHER_LABEL = {"en": "Language", "de": "Sprache", "zh": "语言"}  # the switcher's accessible name
PAGE_LANGUAGE = re.compile(r"(^|/)(en|de|zh)(/)")


def page_in_language(pagename: str, lang: str) -> str:
    """``chapters/en/01-causal-mask`` -> ``chapters/de/01-causal-mask``; other pages stay."""
    return PAGE_LANGUAGE.sub(lambda m: f"{m.group(1)}{lang}{m.group(3)}", pagename, count=1)


def switcher_html(pagename: str, current: str) -> str:
    up = "../" * (pagename.count("/") + 1)  # from this page up to _build/html/
    links = []
    for lang, name in LANGUAGE_NAMES.items():
        if lang == current:
            links.append(f'<span class="attnlab-lang-current" aria-current="true">{name}</span>')
        else:
            href = f"{up}{lang}/{page_in_language(pagename, lang)}.html"
            links.append(f'<a class="attnlab-lang-link" hreflang="{lang}" lang="{lang}" '
                         f'href="{html.escape(href)}">{name}</a>')
    return (f'<nav class="attnlab-lang" aria-label="{SWITCHER_LABEL[current]}">' + " · ".join(links)
            + "</nav>\n")


def add_pdf_link(context, pdf: dict) -> bool:
    """Append the course's PDF to the theme's download menu (sphinx-book-theme's header button
    group ``download-buttons``); ``pdf``: {"file", "text", "tooltip"}, or empty for no link.
    Returns whether a link was added (pages without the menu, such as search, get none)."""
    if not pdf:
        return False
    for group in context.get("header_buttons") or []:
        if group.get("label") == "download-buttons":
            group["buttons"].append({"type": "link", "url": context["pathto"](pdf["file"], 1),
                                     "text": pdf["text"], "tooltip": pdf["tooltip"],
                                     "icon": "fas fa-file-pdf", "label": "download-course-pdf-button"})
            return True
    return False


def on_page_context(app, pagename, templatename, context, doctree):
    add_pdf_link(context, app.config.attnlab_pdf)
    if "body" in context:
        context["body"] = switcher_html(pagename, app.config.attnlab_language) + context["body"]
    scripts = context.get("script_files")
    if scripts:
        seen, unique = set(), []
        for script in scripts:
            attributes = getattr(script, "attributes", {})
            key = (getattr(script, "filename", str(script)) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))
            if key not in seen:
                seen.add(key)
                unique.append(script)
        scripts[:] = unique


def setup(app):
    app.add_config_value("attnlab_language", "en", "html")
    app.add_config_value("attnlab_pdf", {}, "html")
    app.connect("html-page-context", on_page_context, priority=900)
    app.add_js_file("assets/mathjax2-shim.js", priority=1)
    app.add_js_file("assets/widget-alt.js")  # alt text of every widget frame
    app.add_js_file("assets/tab-stops.js")  # a tab stop on every block that scrolls, whenever it starts to
    app.add_js_file("assets/fit-math.js")  # a formula wider than its column is set smaller (then scrolls)
    app.add_css_file("assets/attnlab.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
