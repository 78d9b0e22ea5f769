"""Printed labels and numbers in every stored notebook output, as each language writes them.

Chinese: no full-width colon followed by a space (``print("每行之和：", x)`` puts one there;
use ``attnlab.labeled`` or a placeholder). German: no number grouped with commas
(``65,536`` reads as a decimal fraction; ``attnlab.number`` gives ``65 536``), and no whole number
of five digits or more left ungrouped (``131072 Bytes``; German groups from 10 000 on, DIN 1333). Reads
the stored JSON only (about 1 s).
"""

import json
import re

import pytest

from tools import notebooks

NOTEBOOKS = sorted(p for section in (*notebooks.SOURCE_DIRS, *notebooks.GENERATED_DIRS) for lang in ("de", "zh")
                   for p in (notebooks.ROOT / section / lang).glob("*.ipynb"))
COLON_SPACE = re.compile(r"： ")
COMMA_GROUPED = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d.])")  # 65,536 or 1,234,567; not [0,1,2]
# 131072 or 1048576 on its own; not the digits of a decimal (0.12345, 49152.0), a name (float32), an
# exponent (1e-10000) or a narrow-no-break-space group (65\u202f536)
UNGROUPED = re.compile(r"(?<![\w.,\u202f+-])\d{5,}(?![\w.\u202f])")


def output_lines(path):
    for cell in json.loads(path.read_text("utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            texts = ["".join(output["text"])] if "text" in output else []
            texts += ["".join(v) for k, v in output.get("data", {}).items() if k in ("text/plain", "text/markdown")]
            for text in texts:
                for line in text.splitlines():
                    yield cell.get("id"), line


def test_the_patterns_find_what_they_should():
    assert COLON_SPACE.search("每行之和： tensor([1.])") and not COLON_SPACE.search("每行之和：tensor([1.])")
    assert COMMA_GROUPED.search("Parameter 65,536 (4 x D^2 = 65,536)") and COMMA_GROUPED.search("= 47,040 (32 %")
    assert not COMMA_GROUPED.search("[0, 1, 2, 3]") and not COMMA_GROUPED.search("[0,1,2]")
    assert not COMMA_GROUPED.search("tensor([0.5000,0.2500])") and not COMMA_GROUPED.search("65\u202f536")
    assert UNGROUPED.search("Formel: 131072 Bytes") and UNGROUPED.search("T = 1048576 Tokens")
    assert UNGROUPED.search("FLOPs der Matrixprodukte 2359296")
    assert not UNGROUPED.search("131\u202f072 Bytes") and not UNGROUPED.search("tensor([0.12345])")
    assert not UNGROUPED.search("A   49152.0 MiB") and not UNGROUPED.search("8192 B") and not UNGROUPED.search("x_10000")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(notebooks.ROOT).as_posix())
def test_no_chinese_colon_space_and_no_comma_grouped_or_ungrouped_german_number(path):
    lang = path.parent.name
    patterns = (COLON_SPACE,) if lang == "zh" else (COMMA_GROUPED, UNGROUPED)
    found = [(cell, line[:120]) for cell, line in output_lines(path) if any(p.search(line) for p in patterns)]
    assert found == [], found
