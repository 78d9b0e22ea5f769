"""Which cells nbval does not compare, and why (tests/ignored_outputs.toml).

A stored output must hold on any machine (docs/decisions.md). The only cells whose output
nbval ignores are listed with the reason, and each is followed by a compared code cell, so
what the prose says about a timing, a trained digit or a GPU-only result is still checked.
"""

import pathlib
import tomllib

from tools import notebooks

ROOT = pathlib.Path(__file__).resolve().parent.parent
LISTED = tomllib.loads((ROOT / "tests" / "ignored_outputs.toml").read_text("utf-8"))["cell"]
TAG = "nbval-ignore-output"


def first_code_line(code: str) -> str:
    return next(line.strip() for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def ignored_cells() -> list[tuple[str, str, int, list]]:
    """(source, first code line, line in the source, the code cells after it) of every tagged cell."""
    found = []
    for source in notebooks.find_sources():
        code_cells = [cell for cell in source.cells if cell.kind == "code"]
        for n, cell in enumerate(code_cells):
            if TAG in cell.tags:
                found.append((source.rel, first_code_line(cell.text), cell.line, code_cells[n + 1:]))
    return found


def test_every_ignored_output_is_listed_with_a_reason_and_no_listed_cell_is_gone():
    tagged = {(rel, starts) for rel, starts, _, _ in ignored_cells()}
    listed = {(entry["source"], entry["starts"]) for entry in LISTED}
    assert all(entry.get("why", "").strip() for entry in LISTED), "an entry without a reason"
    assert len(listed) == len(LISTED), "an entry is listed twice"
    unlisted = sorted(tagged - listed)
    assert not unlisted, f"tagged {TAG} but not in tests/ignored_outputs.toml (add it with the reason): {unlisted}"
    gone = sorted(listed - tagged)
    assert not gone, f"listed in tests/ignored_outputs.toml but no such tagged cell any more: {gone}"


def test_a_compared_code_cell_follows_every_ignored_one():
    for rel, starts, line, after in ignored_cells():
        assert after, f"{rel}:{line} ({starts!r}) is the last code cell: nothing compared checks its claim"
        assert TAG not in after[0].tags, (f"{rel}:{line} ({starts!r}) is followed by another ignored cell: the "
                                          "cell after an ignored one must be compared")
