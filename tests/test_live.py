"""attnlab.figures.live: explorers driven by Python callbacks (Colab, ipywidgets 7)."""

import os
import pathlib
import subprocess
import sys
import types

import ipywidgets as widgets
import pytest

import attnlab
from attnlab.figures import live
from attnlab.figures.widgets import mask_explorer_for, nested_stack, toggle

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def colab(monkeypatch):
    google = types.ModuleType("google")
    google.colab = types.ModuleType("google.colab")
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", google.colab)


def test_the_mode_follows_colab_ipywidgets_and_the_override(monkeypatch, colab):
    monkeypatch.delenv(live.MODE_VARIABLE, raising=False)
    assert live.use_callbacks()  # Colab
    monkeypatch.setenv(live.MODE_VARIABLE, "stack")
    assert not live.use_callbacks()
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.delenv(live.MODE_VARIABLE)
    assert not live.use_callbacks()  # Jupyter with ipywidgets 8: Stack + jslink
    monkeypatch.setenv(live.MODE_VARIABLE, "callbacks")
    assert live.use_callbacks()
    monkeypatch.setenv(live.MODE_VARIABLE, "stack")
    monkeypatch.delattr(widgets, "Stack")  # ipywidgets 7
    assert live.use_callbacks()


def test_a_callback_stack_shows_the_frame_of_the_current_indices_and_draws_each_once(monkeypatch):
    monkeypatch.setenv(live.MODE_VARIABLE, "callbacks")
    a, b = toggle(["x", "y"]), toggle(["1", "2", "3"])
    drawn = []

    def render(i, j):
        drawn.append((i, j))
        return widgets.Label(f"{i}{j}")

    box, links = nested_stack([a, b], render)
    assert links == [] and [c.value for c in box.children] == ["00"]
    b.index = 2
    a.index = 1
    assert [c.value for c in box.children] == ["12"]
    a.index = 0
    b.index = 0
    assert [c.value for c in box.children] == ["00"]
    assert drawn == [(0, 0), (0, 2), (1, 2)]  # each frame drawn when first shown, then kept


def test_the_mask_explorer_in_callback_mode_shows_the_same_frames_as_the_stack(monkeypatch):
    attnlab.setup("de")  # frames are drawn when first shown, in the language of that moment
    try:
        monkeypatch.setenv(live.MODE_VARIABLE, "stack")
        stacked = mask_explorer_for("die Maske hilft")
        monkeypatch.setenv(live.MODE_VARIABLE, "callbacks")
        live_one = mask_explorer_for("die Maske hilft")
        shown = live_one.children[4]
        for mask, step, row in [(0, 0, 0), (0, 2, 3), (1, 2, 3), (1, 1, 0)]:
            live_one.mask_control.index, live_one.step_control.index, live_one.row_control.index = mask, step, row
            expected = stacked.children[4].children[mask].children[step].children[row]
            assert bytes(shown.children[0].value) == bytes(expected.value), (mask, step, row)
    finally:
        attnlab.setup("en")
    assert repr(live_one) == repr(stacked)


def test_explorers_work_with_the_real_ipywidgets_7(tmp_path):
    """Colab has shipped ipywidgets 7.7.1: install it beside the project and build an explorer."""
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tmp_path),
                          "ipywidgets==7.7.1", "ipython_genutils==0.2.0"], capture_output=True, text=True)
    if pip.returncode:
        pytest.skip(f"could not install ipywidgets 7.7.1 from the package index: {pip.stderr[-300:]}")
    code = """
import ipywidgets, attnlab
from attnlab.figures.widgets import mask_explorer_for, tile_explorer
assert ipywidgets.__version__ == "7.7.1" and not hasattr(ipywidgets, "Stack")
attnlab.setup("zh")
explorer = mask_explorer_for("模型 不能 偷看")
shown = explorer.children[4]
before = bytes(shown.children[0].value)
explorer.row_control.index = 2
assert bytes(shown.children[0].value) != before
tile_explorer(T=16, blocks=(2, 4)).children[2].children[0].value
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop(live.MODE_VARIABLE, None)
    run = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
