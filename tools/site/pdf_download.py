"""The download menu's link to the course's PDF, made only when ``make pdf`` made the PDF."""

from __future__ import annotations

import pathlib
import shutil
import tomllib

from .layout import BUILD, HTML, ROOT

PDF_DIR = BUILD / "pdf"  # where `make pdf` (tools/pdf.py) writes <lang>.pdf
PDF_DOWNLOAD = pathlib.Path("_static") / "downloads"  # inside each language site
MESSAGES = ROOT / "attnlab" / "messages.toml"  # read as a file: the site build never imports attnlab


def site_message(key: str, lang: str) -> str:
    table = tomllib.loads(MESSAGES.read_text("utf-8"))
    for part in key.split("."):
        table = table[part]
    return table[lang]


def pdf_link(lang: str) -> dict:
    """The download menu's link to the course's PDF (tools/sphinx_ext, ``attnlab_pdf``), or {} when
    ``make pdf`` has made none: a site built without it has no link that leads nowhere."""
    if not (PDF_DIR / f"{lang}.pdf").is_file():
        return {}
    return {"file": (PDF_DOWNLOAD / f"{lang}.pdf").as_posix(), "text": site_message("site.pdf_link", lang),
            "tooltip": site_message("site.pdf_tooltip", lang)}


def copy_pdf(lang: str) -> pathlib.Path | None:
    """Put _build/pdf/<lang>.pdf into the built site where pdf_link's link points, if there is one."""
    source, target = PDF_DIR / f"{lang}.pdf", HTML / lang / PDF_DOWNLOAD / f"{lang}.pdf"
    if not source.is_file():
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return target
