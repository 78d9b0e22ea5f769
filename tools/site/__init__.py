"""Build the three language sites into _build/html/{en,de,zh}/ plus a root page.

    python -m tools.site build    # assets + three Jupyter Book builds + root page
    python -m tools.site serve    # serve _build/html on http://127.0.0.1:8000/

Each build uses _config.yml and _toc.yml with four overrides: the Sphinx
``language`` (theme words, search stemmer; zh_CN uses jieba), the title, the
toc paths (chapters/en/ -> chapters/<lang>/, the same for exercises/ and
solutions/) and the toc's part captions (PART_CAPTIONS). Third-party JavaScript
(MathJax 3, the ipywidgets HTML manager) is installed by npm from
web/package-lock.json and copied into the site, so no page fetches anything
from the internet. Builds run with warnings as errors.

Chinese text: after the builds, each site gets _static/assets/fonts/attnlab-cjk.woff2,
a subset of the package's CJK font (attnlab/fonts/) with exactly the CJK
characters of that site's pages; tools/web/attnlab.css puts it last in every
font stack, so only a browser without a CJK font downloads it.

The modules: layout (where the site is built, its languages and titles), assets (the local
JavaScript), languages (one language's config, toc and Jupyter Book build), pdf_download (the
PDF's link), font_awesome and widget_frames (what each built site's pages lose or shrink),
cjk_font (the Chinese web font), root_page, pipeline (the whole build, in order) and
__main__ (the command line). This package re-exports what other code uses.
"""

from __future__ import annotations

from .assets import ASSETS, MATHJAX_FILES, NODE_MODULES, copy_assets, npm_install, strip_css_source_maps
from .cjk_font import SITE_CSS, WEB_FONT, cjk_ranges, shown_text, site_cjk_characters, write_web_fonts
from .font_awesome import ICON_FONTS, cut_font_awesome, drop_font_awesome_js, icon_characters, named_icon_classes
from .languages import PART_CAPTIONS, SPHINX_LANGUAGE, TOC_SECTIONS, build_language, language_files, localized_toc
from .layout import BUILD, HTML, ROOT, TITLES
from .pdf_download import PDF_DIR, PDF_DOWNLOAD, copy_pdf, pdf_link, site_message
from .pipeline import build, build_once
from .root_page import write_root_page
from .widget_frames import WIDGET_STATE, compress_frames, smaller_png, webp_frame

__all__ = ["ASSETS", "BUILD", "HTML", "ICON_FONTS", "MATHJAX_FILES", "NODE_MODULES", "PART_CAPTIONS", "PDF_DIR",
           "PDF_DOWNLOAD", "ROOT", "SITE_CSS", "SPHINX_LANGUAGE", "TITLES", "TOC_SECTIONS", "WEB_FONT", "WIDGET_STATE",
           "build", "build_language", "cjk_ranges", "compress_frames", "copy_assets", "copy_pdf", "cut_font_awesome",
           "drop_font_awesome_js", "icon_characters", "language_files", "localized_toc", "named_icon_classes",
           "npm_install", "pdf_link", "shown_text", "site_cjk_characters", "site_message", "smaller_png",
           "strip_css_source_maps", "webp_frame", "write_root_page", "write_web_fonts"]
