"""The reports for transformers' maintainers (docs/findings/*.md): every repro still fails as described on the
locked versions, every flagged row of the committed sweep has a report, and every report is in the form an
upstream issue takes. The repros run in this process, one after another (tiny configs: seconds in all)."""

import contextlib
import io
import json
import pathlib
import re
import warnings

import pytest

transformers = pytest.importorskip("transformers")

ROOT = pathlib.Path(__file__).resolve().parent.parent
FINDINGS = sorted(p for p in (ROOT / "docs" / "findings").glob("*.md") if p.name != "README.md")
DATA = json.loads((ROOT / "attnlab" / "data" / "audit-transformers.json").read_text("utf-8"))
LOCKED = (ROOT / "requirements" / "lock.txt").read_text("utf-8")


def repro_and_expectations(path: pathlib.Path) -> tuple[str, list[tuple[str, str]]]:
    text = path.read_text("utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    expect = re.findall(r"<!-- expect: (raises|prints) (.*?) -->", text)
    return code, expect


@pytest.mark.skipif(f"transformers=={transformers.__version__}" not in LOCKED, reason="not the locked transformers")
def test_every_repro_still_fails_as_its_report_describes():
    import torch

    failures = []
    for path in FINDINGS:
        code, expect = repro_and_expectations(path)
        assert expect, f"{path.name}: no <!-- expect: ... --> under its repro"
        out, raised = io.StringIO(), None
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            try:
                exec(compile(code, str(path), "exec"), {"__name__": "__repro__"})  # torch and transformers alone
            except Exception as error:  # noqa: BLE001 - the failure the report describes
                raised = f"{type(error).__name__}: {error}"
        for how, what in expect:
            if how == "raises" and not (raised or "").startswith(what):
                failures.append(f"{path.name}: expected to raise {what!r}, got {raised!r}")
            if how == "prints" and what not in out.getvalue().splitlines():
                failures.append(f"{path.name}: expected the line {what!r}, printed {out.getvalue()!r}")
        if raised and not any(how == "raises" for how, _ in expect):
            failures.append(f"{path.name}: raised {raised!r}")
    assert not failures, "\n".join(failures)


def test_every_report_has_the_parts_of_an_upstream_issue_and_names_upstream_work_or_says_none_was_found():
    assert len(FINDINGS) >= 10
    for path in FINDINGS:
        text = path.read_text("utf-8")
        assert text.startswith("# "), path.name
        for part in ("**Environment:**", "**Expected", "**Actual:**", "**Related upstream:**", "transformers 5.24.0"):
            assert part in text, (path.name, part)
        related = text.split("**Related upstream:**", 1)[1]
        assert re.search(r"\[(?:PR )?#\d+\]\(https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+\)", related) \
            or "no report" in related, path.name
        code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
        imports = set(re.findall(r"^(?:import|from) (\w+)", code, re.M))
        assert imports <= {"torch", "transformers"}, (path.name, imports)  # the library alone


def test_every_flagged_row_of_the_sweep_has_a_report_and_the_page_links_it():
    named = {name.strip() for path in FINDINGS
             for match in re.findall(r"<!-- classes: (.*?) -->", path.read_text("utf-8")) for name in match.split(",")}
    flagged = {v["target"] for v in DATA["verdicts"] if v["kind"] in ("leak", "differ", "library_error")}
    assert flagged <= named, sorted(flagged - named)
    every_call = {v["target"] for v in DATA["verdicts"] if (v.get("packing") or {}).get("kind") == "leaks"
                  and all(row["isolated"] is False for row in v["packing"]["rows"])}
    assert len(every_call & named) >= 30  # the two reports that trace why every call leaks
    page = (ROOT / "chapters" / "src" / "transformers-causality.md").read_text("utf-8")
    for path in FINDINGS:
        assert f"docs/findings/{path.name})" in page, path.name
