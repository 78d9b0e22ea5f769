"""Bold and italics in the Chinese prose render as such: no literal ``**`` reaches the page.

CommonMark (markdown-it-py, which myst-parser uses) closes ``**`` only when the delimiter is
right-flanking: a closing ``**`` that follows punctuation must itself be followed by whitespace or
punctuation. ``**先预测一下：**当`` and ``**预填充（prefill）**在`` therefore show their asterisks
and nothing is bold; the course writes ``**先预测一下**：当`` and ``**预填充**（prefill）在``.

Every zh Markdown cell of every chapter and exercise source (and each generated page, the
landing page's chapter list included) is parsed with markdown-it-py's CommonMark preset plus the
dollarmath and colon-fence plugins the site enables; the bodies of directives (``{dropdown}``
hints, ``:::`` notes) are parsed the same way. Text outside code and math must not contain ``**``.
"""

import pathlib
import sys

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import notebooks  # noqa: E402

SOURCES = sorted([*(ROOT / "chapters" / "src").glob("*.md"), *(ROOT / "exercises" / "src").glob("*.md")])
MD = MarkdownIt("commonmark").use(dollarmath_plugin).use(colon_fence_plugin)


def literal_stars(text: str) -> list[str]:
    """The inline passages of ``text`` whose rendered text still holds ``**``."""
    hits: list[str] = []

    def walk(tokens) -> None:
        for tok in tokens:
            info = tok.info.strip()
            if tok.type in ("fence", "colon_fence") and info.startswith("{") and not info.startswith("{code-cell"):
                title = info.partition("}")[2].strip()
                body = "\n".join(line for line in tok.content.splitlines() if not line.startswith(":"))
                walk(MD.parse(title + "\n\n" + body if title else body))
            elif tok.type == "inline":
                if any(child.type == "text" and "**" in child.content for child in tok.children or []):
                    hits.append(tok.content)

    walk(MD.parse(text))
    return hits


def zh_markdown(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, Markdown) of each zh block and zh caption of a source. Read with the generator's own
    block markers, not ``parse_source``, whose checks of every code cell take seconds."""
    lines = path.read_text("utf-8").splitlines()
    page = lines[:1] == ["---"] and "kind: page" in lines[1:lines.index("---", 1)]
    parts, i = [], 0
    while i < len(lines):
        m = notebooks.LANG_OPEN.match(lines[i])
        if m:
            end = lines.index(notebooks.LANG_CLOSE, i + 1)
            if m.group(1) == "zh":
                text = "\n".join(lines[i + 1:end])
                parts.append((i + 1, notebooks.page_text(text, "zh", f"{path.name}:{i + 1}") if page else text))
            i = end + 1
            continue
        if lines[i].startswith(":caption:") and "| zh: " in lines[i]:
            parts.append((i + 1, lines[i].split("| zh: ", 1)[1]))
        i += 1
    return parts


def test_the_check_sees_the_known_failures():
    assert literal_stars("**先预测一下：**当 $T_q = 1$ 时")
    assert literal_stars("**预填充（prefill）**在一次前向传播中")
    assert literal_stars("```{dropdown} 提示 1\n**先预测一下：**当\n```")
    assert not literal_stars("**先预测一下**：当 $T_q = 1$ 时，`a**b` 与 $a^{**}$")
    assert not literal_stars("**预填充**（prefill）在")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_no_literal_asterisks_in_zh(path):
    rel = path.relative_to(ROOT).as_posix()
    found = [f"{rel}:{line}: {hit[:80]}" for line, text in zh_markdown(path) for hit in literal_stars(text)]
    assert not found, "a ** that CommonMark does not close (move the full-width punctuation outside the bold):\n" + "\n".join(found)
