"""One language's site: its _config.yml and _toc.yml, and its Jupyter Book build.

Each build uses _config.yml and _toc.yml with these overrides: the Sphinx ``language`` (theme
words, search stemmer; zh_CN uses jieba), the title, the footer (licences, how to cite) and the
search field's words in the language, the toc paths (chapters/en/ -> chapters/<lang>/, the same for
exercises/ and solutions/) and the toc's part captions (PART_CAPTIONS); every virtual environment
inside the repository is excluded (venv_folders). Builds run with warnings as errors.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import yaml

from .footer import footer_html
from .layout import BUILD, HTML, ROOT, TITLES
from .pdf_download import copy_pdf, pdf_link

SPHINX_LANGUAGE = {"en": "en", "de": "de", "zh": "zh_CN"}
TOC_SECTIONS = ("chapters", "exercises", "solutions")  # folders with one subfolder per language
# The search field's placeholder: the theme's "Search this book..." has no German or Chinese translation.
SEARCH_FIELD = {"en": "Search the course…", "de": "Im Kurs suchen …", "zh": "在课程中搜索……"}
PART_CAPTIONS = {"Chapters": {"en": "Chapters", "de": "Kapitel", "zh": "章节"},
                 "Exercises": {"en": "Exercises", "de": "Übungen", "zh": "练习"},
                 "Solutions": {"en": "Solutions", "de": "Lösungen", "zh": "参考答案"}}


def venv_folders(root: pathlib.Path = ROOT) -> list[str]:
    """Every virtual environment inside the repository, whatever its name (``make site VENV=.venv-3.12``,
    ``python -m venv env``): the folders up to two levels down that hold a ``pyvenv.cfg``. Sphinx
    would otherwise read the Markdown of every installed package (3,482 warnings, each an error)."""
    found = []
    for depth in ("*/pyvenv.cfg", "*/*/pyvenv.cfg"):
        found += [marker.parent.relative_to(root).as_posix() for marker in root.glob(depth)]
    return sorted(found)


def language_files(lang: str) -> tuple[pathlib.Path, pathlib.Path]:
    """_config.yml and _toc.yml for one language, written under _build/config/."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text("utf-8"))
    config["exclude_patterns"] = [*config["exclude_patterns"], *venv_folders()]
    config["title"] = TITLES[lang]
    config["sphinx"]["config"]["language"] = SPHINX_LANGUAGE[lang]
    config["sphinx"]["config"]["attnlab_language"] = lang
    config["sphinx"]["config"]["attnlab_pdf"] = pdf_link(lang)
    config["html"]["extra_footer"] = footer_html(lang)  # the licences and how to cite, in the language
    config["sphinx"]["config"].setdefault("html_theme_options", {})["search_bar_text"] = SEARCH_FIELD[lang]
    # Paths in _config.yml are relative to the repository root; this copy lives elsewhere.
    config["sphinx"]["local_extensions"] = {name: str(ROOT / path) for name, path
                                            in config["sphinx"]["local_extensions"].items()}
    sphinx_config = config["sphinx"]["config"]
    sphinx_config["html_extra_path"] = [str(ROOT / p) for p in sphinx_config["html_extra_path"]]
    sphinx_config["html_favicon"] = str(ROOT / sphinx_config["html_favicon"])
    toc_text = localized_toc((ROOT / "_toc.yml").read_text("utf-8"), lang)
    folder = BUILD / "config"
    folder.mkdir(parents=True, exist_ok=True)
    config_path, toc_path = folder / f"_config.{lang}.yml", folder / f"_toc.{lang}.yml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), "utf-8")
    toc_path.write_text(toc_text, "utf-8")
    return config_path, toc_path


def localized_toc(toc_text: str, lang: str) -> str:
    """_toc.yml for ``lang``: paths under <section>/en/ -> <section>/<lang>/, part captions translated."""
    for section in TOC_SECTIONS:
        toc_text = toc_text.replace(f"{section}/en/", f"{section}/{lang}/")
    toc = yaml.safe_load(toc_text)
    for part in toc.get("parts", []):
        part["caption"] = PART_CAPTIONS[part["caption"]][lang]
    return yaml.safe_dump(toc, allow_unicode=True, sort_keys=False)


def build_language(lang: str) -> None:
    config_path, toc_path = language_files(lang)
    staging = BUILD / "lang" / lang
    shutil.rmtree(staging, ignore_errors=True)  # a clean build: incremental builds hide errors
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jupyter_book), "build", str(ROOT), "--builder", "html", "--config", str(config_path),
           "--toc", str(toc_path), "--path-output", str(staging), "-W", "-n", "--keep-going"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    target = HTML / lang
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(staging / "_build" / "html"), target)
    copy_pdf(lang)  # the link is in the pages exactly when the config had one (language_files)
