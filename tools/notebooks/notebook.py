"""One source in one language as an unexecuted notebook.

The notebook's metadata, the two code cells the generator adds (Colab's install cell and
the setup cell that sets the language), the prose and code cells of the source with the
figures' alt texts and captions; which figures lack an alt text; and how a notebook is
written to disk (sorted keys, one-space indent, UTF-8).
"""

from __future__ import annotations

import json
import pathlib

import nbformat
import yaml

from .messages import render_code
from .source_format import ROOT
from .sources import Source

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
SETUP_CODE = 'import attnlab\n\nattnlab.setup("{lang}")  # {comment}'
SETUP_COMMENT = {  # what attnlab.setup does, in the notebook's language
    "en": "language of figures and messages; seeds every RNG; one CPU thread (no waiting on a busy machine)",
    "de": "Sprache der Abbildungen und Meldungen; setzt alle Zufalls-Seeds; ein CPU-Thread (kein Warten auf einem ausgelasteten Rechner)",
    "zh": "设定图和输出信息的语言；为所有随机数生成器设置种子；只用一个 CPU 线程（机器繁忙时不必等待另一个线程）",
}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3"}  # no version: same on every machine
# Runs before attnlab can be imported, so it is plain code: on Colab it installs
# the course package from the repository set in _config.yml and switches on
# Colab's widget manager; anywhere else it does nothing. Hidden on the site.
COLAB_CODE = """\
# @title {title}
import sys

if "google.colab" in sys.modules:
    import importlib
    import importlib.util
    import subprocess

    if importlib.util.find_spec("attnlab") is None:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "{requirement}"],
                             capture_output=True, text=True)
        if pip.returncode:
            raise RuntimeError(pip.stdout + pip.stderr)
        importlib.invalidate_caches()
    from google.colab import output

    output.enable_custom_widget_manager()"""
GENERATED_CELLS = ("colab", "setup")  # code cells the generator adds (not from the source)
COLAB_TITLE = {"en": "Colab only: install the course package (does nothing elsewhere)",
               "de": "Nur für Colab: installiert das Kurspaket (anderswo passiert nichts)",
               "zh": "仅用于 Colab：安装课程软件包（在其他环境中什么也不做）"}
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


def colab_requirement(root: pathlib.Path = ROOT) -> str:
    """What the Colab cell installs: the runtime package from the course repository."""
    repository = yaml.safe_load((root / "_config.yml").read_text("utf-8"))["repository"]
    return f"attnlab @ git+{repository['url']}@{repository.get('branch', 'main')}"


def colab_cell(lang: str) -> nbformat.NotebookNode:
    """The first code cell: installs attnlab on Colab (form view there), removed on the site."""
    code = COLAB_CODE.format(title=COLAB_TITLE[lang], requirement=colab_requirement())
    cell = nbformat.v4.new_code_cell(code, id="colab")
    cell.metadata.update({"tags": ["remove-cell"], "cellView": "form"})
    return cell


def render_notebook(source: Source, lang: str) -> nbformat.NotebookNode:
    """The unexecuted notebook of ``source`` in ``lang`` (deterministic ids)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC),
                   "language_info": dict(LANGUAGE_INFO),
                   "attnlab": {"source": source.rel, "language": lang}}
    setup_code = SETUP_CODE.format(lang=lang, comment=SETUP_COMMENT[lang])
    setup = [colab_cell(lang), nbformat.v4.new_code_cell(setup_code, id="setup")]
    if not source.cells or source.cells[0].kind != "markdown":
        nb.cells.extend(setup)
    for n, cell in enumerate(source.cells, start=1):
        if cell.kind == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.text[lang], id=f"md-{n:03d}")
        else:
            new = nbformat.v4.new_code_cell(render_code(cell.text, lang), id=f"code-{n:03d}")
            if cell.tags:
                new.metadata["tags"] = list(cell.tags)
            figure_text = {}  # myst-nb's cell-level render options (image alt, figure caption)
            if cell.alt:
                figure_text["image"] = {"alt": cell.alt[lang]}
            if cell.caption:
                figure_text["figure"] = {"caption": cell.caption[lang]}
            if figure_text:
                new.metadata["mystnb"] = figure_text
        nb.cells.append(new)
        if n == 1 and cell.kind == "markdown":
            nb.cells.extend(setup)  # right after the title and introduction
    return nb


def figures_without_alt(nb: nbformat.NotebookNode) -> list[str]:
    """Ids of code cells that show a picture but have no alt text (screen readers would read a file path)."""
    return [cell.id for cell in nb.cells if cell.cell_type == "code"
            and any(output.get("output_type") in ("display_data", "execute_result")
                    and any(kind in output.get("data", {}) for kind in IMAGE_TYPES) for output in cell.outputs)
            and not cell.metadata.get("mystnb", {}).get("image", {}).get("alt")]


def write_notebook(nb: nbformat.NotebookNode, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    path.write_text(text, "utf-8")
