"""`make lab` really works: a chapter runs in JupyterLab and its widgets respond live.

Starts JupyterLab (pinned in requirements/lock.txt) on 127.0.0.1 with a token,
opens a copy of the German chapter 1 with its outputs cleared, runs all cells
in a real kernel, clicks a widget control and checks that the picture changes
and that no cell wrote to stderr. A second, tiny notebook does the same with
the explorers in callback mode, the mode Colab gets (attnlab/figures/live.py).
"""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from site_support import launch_chromium

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "attnlab-test-token"
CHAPTER = ROOT / "chapters" / "de" / "01-causal-mask.ipynb"
SETTINGS = {  # no news, no update checks, every cell in the DOM
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def cleared_copy(source: pathlib.Path, target: pathlib.Path) -> None:
    nb = nbformat.read(source, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, target)


def callback_notebook(target: pathlib.Path) -> None:
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('import os\n\nos.environ["ATTNLAB_WIDGETS"] = "callbacks"\n'
                                          'import attnlab\n\nattnlab.setup("de")'),
                nbformat.v4.new_code_cell("from attnlab.figures.widgets import mask_explorer_for\n\n"
                                          'mask_explorer_for("die Maske verbirgt die Zukunft")')]
    nbformat.write(nb, target)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("lab")
    work = home / "work"
    work.mkdir()
    cleared_copy(CHAPTER, work / CHAPTER.name)
    callback_notebook(work / "callbacks.ipynb")
    for name, value in SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
    env.pop("ATTNLAB_WIDGETS", None)
    log = open(home / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={work}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly", "--LabApp.news_url="],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # about 5 s here; generous for a slow CI machine
        while True:
            assert server.poll() is None, (home / "server.log").read_text()
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "JupyterLab did not start within 300 s"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser(playwright):  # the worker's one Playwright (tests/conftest.py): a second one in the same thread fails
    browser = launch_chromium(playwright)
    yield browser
    browser.close()


CURRENT = "window.jupyterapp.shell.currentWidget"
RUN_ALL = f"""async () => {{
    const panel = {CURRENT};
    await panel.sessionContext.ready;
    await window.jupyterapp.commands.execute('notebook:run-all-cells');
}}"""
CELLS = f"""() => Array.from({CURRENT}.content.model.cells)
    .filter(cell => cell.type === 'code')
    .map(cell => ({{id: cell.id, count: cell.executionCount,
                   outputs: cell.outputs.toJSON().map(o => ({{type: o.output_type, name: o.name || '',
                                                              text: o.text || o.evalue || ''}}))}}))"""


def open_and_run(browser, url, name):
    """Open ``name`` in JupyterLab, run all cells; returns the page, its code cells and what it requested."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    workspace = re.sub(r"\W", "-", name)  # a workspace of its own: Lab restores no other tab
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/{name}?token={TOKEN}")
    page.wait_for_function(f"window.jupyterapp && {CURRENT} && {CURRENT}.context.path === {json.dumps(name)} "
                           f"&& {CURRENT}.sessionContext.session && {CURRENT}.sessionContext.session.kernel",
                           timeout=300_000)
    page.evaluate(RUN_ALL)
    cells = page.evaluate(CELLS)
    remote = [u for u in requests if not re.match(r"^(http://127\.0\.0\.1[:/]|data:|blob:)", u)]
    return page, cells, remote, errors


def visible_frames(page):
    return page.eval_on_selector_all(
        ".jp-OutputArea .jupyter-widgets img", "els => els.filter(e => e.offsetParent !== null).map(e => e.src)")


def click_changes_the_picture(page, group):
    group.scroll_into_view_if_needed()
    before = visible_frames(page)
    assert before, "no widget picture visible"
    buttons = group.locator("button")
    buttons.nth(buttons.count() - 1).click()
    deadline = time.monotonic() + 60
    while visible_frames(page) == before and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    return visible_frames(page) != before


def assert_clean(cells):
    assert cells and all(cell["count"] is not None for cell in cells), "not every cell ran"
    for cell in cells:
        for output in cell["outputs"]:
            assert output["type"] != "error" and output["name"] != "stderr", (cell["id"], output["text"][:500])


def test_a_german_chapter_runs_in_jupyterlab_and_its_explorer_responds(lab, browser):
    page, cells, remote, errors = open_and_run(browser, lab, CHAPTER.name)
    assert_clean(cells)
    assert len(cells) > 10
    assert remote == [] and errors == []
    explorer = page.locator(".jp-OutputArea .widget-toggle-buttons").first
    assert click_changes_the_picture(page, explorer)
    page.screenshot(path=str(screenshot("lab_de_chapter1_widget")))
    page.context.close()


def test_explorers_in_callback_mode_respond_in_a_live_kernel(lab, browser):
    page, cells, remote, errors = open_and_run(browser, lab, "callbacks.ipynb")
    assert_clean(cells)
    assert remote == [] and errors == []
    groups = page.locator(".jp-OutputArea .widget-toggle-buttons")
    assert groups.count() == 3  # step, row, mask
    for g in range(3):
        assert click_changes_the_picture(page, groups.nth(g)), g
    page.context.close()


def screenshot(name: str) -> pathlib.Path:
    folder = ROOT / "_build" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.png"
