"""The footer of every page, in the page's language: the licences of the course text and figures,
the code and the bundled font, and how to cite the course (LICENSE-CONTENT.md, LICENSE,
attnlab/fonts/OFL.txt, CITATION.cff; docs/decisions.md, "Licences and citation").

``tools/site/languages.py`` puts it into each language's ``html.extra_footer``; the links lead to
the files in the repository (``published.file_url``) and to the licence's deed in the language.
"""

from __future__ import annotations

import html

from .published import file_url

WORDS = {
    "en": {"text": "Course text and figures", "code": "code", "font": "bundled font", "cite": "How to cite"},
    "de": {"text": "Kurstext und Abbildungen", "code": "Code", "font": "mitgelieferte Schrift", "cite": "Zitieren"},
    "zh": {"text": "课程文字与图", "code": "代码", "font": "随附字体", "cite": "引用方式"},
}
CC_BY_DEED = {"en": "https://creativecommons.org/licenses/by/4.0/",
              "de": "https://creativecommons.org/licenses/by/4.0/deed.de",
              "zh": "https://creativecommons.org/licenses/by/4.0/deed.zh-hans"}
COLON = {"en": ": ", "de": ": ", "zh": "："}
PARENS = {"en": (" (", ")"), "de": (" (", ")"), "zh": ("（", "）")}


def footer_html(lang: str) -> str:
    """One line: 'Course text and figures: CC BY 4.0 · code: MIT · bundled font: SIL OFL 1.1 · How to cite'."""
    words, colon, (open_, close) = WORDS[lang], COLON[lang], PARENS[lang]

    def link(href: str, text: str) -> str:
        return f'<a href="{html.escape(href)}">{html.escape(text)}</a>'

    parts = [f"{words['text']}{colon}{link(file_url('LICENSE-CONTENT.md'), 'CC BY 4.0')}"
             f"{open_}{link(CC_BY_DEED[lang], 'creativecommons.org')}{close}",
             f"{words['code']}{colon}{link(file_url('LICENSE'), 'MIT')}",
             f"{words['font']}{colon}{link(file_url('attnlab/fonts/OFL.txt'), 'SIL OFL 1.1')}",
             link(file_url("CITATION.cff"), f"{words['cite']}{open_}CITATION.cff{close}")]
    return '<p class="attnlab-licence">' + " · ".join(parts) + "</p>"
