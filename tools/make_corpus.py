"""Write the training text of the course's small GPT: attnlab/data/corpus.{en,de,zh}.txt.

The text is the course's own prose (chapters 1 to 3), so it needs no licence
and no download. Code cells, code blocks, directives and link targets are
dropped; what remains is plain sentences. The corpus is a frozen snapshot: it
is regenerated only by running this script (``python tools/make_corpus.py``),
so that editing a chapter does not change the trained model of later chapters.
"""

from __future__ import annotations

import pathlib
import re

from tools.notebooks import LANGUAGES, ROOT, parse_source

CHAPTERS = ["01-causal-mask.md", "02-multi-head-attention.md", "03-sdpa-flash-attention.md"]
OUT = ROOT / "attnlab" / "data"


def plain_text(markdown: str) -> str:
    lines, in_fence = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", ":::")):
            in_fence = not in_fence if line.strip().startswith("```") else in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)  # [text](url) -> text
        line = re.sub(r"^#+\s*", "", line).replace("**", "").replace("`", "")
        line = re.sub(r"^\s*[-*]\s+", "", line).strip()
        if line and not line.startswith(("|", "<", ":")):
            lines.append(line)
    return "\n".join(lines)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for lang in LANGUAGES:
        parts = []
        for name in CHAPTERS:
            source = parse_source(ROOT / "chapters" / "src" / name)
            parts += [plain_text(cell.text[lang]) for cell in source.cells if cell.kind == "markdown"]
        text = "\n".join(p for p in parts if p) + "\n"
        path = OUT / f"corpus.{lang}.txt"
        path.write_text(text, "utf-8")
        print(f"{path.relative_to(ROOT)}: {len(text)} characters, {len(set(text))} distinct")


if __name__ == "__main__":
    main()
