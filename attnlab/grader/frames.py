"""Whose code a stack frame runs: the learner's (a notebook cell, a script), the course's (``attnlab``),
torch's or another library's, told apart by the frame's file as a real path. The grader asks it who
called one of the course's functions (a copy of the task's answer) or reseeded the global RNG.
"""

from __future__ import annotations

import os
import sys
import sysconfig

import torch

_LIBRARIES = tuple(os.path.realpath(p) for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                                 sysconfig.get_paths()["stdlib"]})
_COURSE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # .../attnlab
_TORCH = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep  # the separator: not torchvision's files
_KIND: dict[str, bool] = {}
_REAL: dict[str, str] = {}


def _real_path(filename: str) -> str:
    """A code object's file as a real path (cached): a venv reached through a symbolic link names
    torch's files by the link, and they must still read as torch's."""
    if filename not in _REAL:
        _REAL[filename] = os.path.realpath(filename) if not filename.startswith("<") else filename
    return _REAL[filename]


def _torch_file(filename: str) -> bool:
    """A file of torch itself (``module(x)``'s frames between the learner and ``forward``)."""
    return _real_path(filename).startswith(_TORCH)


def _learner_file(filename: str) -> bool:
    """True for code the learner wrote (a notebook cell, a script), not the course's, torch's or a library's."""
    if filename not in _KIND:
        real = _real_path(filename)
        _KIND[filename] = not (real.startswith(_COURSE) or real.startswith(_TORCH) or real.startswith(_LIBRARIES)
                               or filename.startswith("<frozen"))
    return _KIND[filename]


_GRADER = os.path.join(_COURSE, "grader") + os.sep
_FRAME_KINDS: dict[str, str] = {}


def frame_kind(filename: str) -> str:
    """``"learner"``, ``"course"`` (attnlab, the grader's chapter modules included), ``"grader"`` (attnlab/grader)
    or ``"library"`` (torch, site-packages, the standard library, frozen modules): whose code runs in a frame."""
    kind = _FRAME_KINDS.get(filename)
    if kind is None:
        real = _real_path(filename)
        if real.startswith(_GRADER):
            kind = "grader"
        elif real.startswith(_COURSE + os.sep):
            kind = "course"
        elif real.startswith(_TORCH) or real.startswith(_LIBRARIES) or filename.startswith("<frozen"):
            kind = "library"
        else:
            kind = "learner"
        _FRAME_KINDS[filename] = kind
    return kind


def _called_by_learner(frame) -> bool:
    """Is ``frame`` (the function called) called from the learner's code, directly or through torch
    (``module(x)`` runs ``forward`` from torch's ``Module.__call__``)?"""
    caller = frame.f_back
    while caller is not None and _torch_file(caller.f_code.co_filename):
        caller = caller.f_back
    return caller is not None and _learner_file(caller.f_code.co_filename)


def _learners_subclass(frame) -> bool:
    """A method of the course's class, run on an object of a class the learner derived from it."""
    if not frame.f_code.co_varnames or frame.f_code.co_varnames[0] != "self":
        return False
    cls = type(frame.f_locals.get("self"))
    module = sys.modules.get(cls.__module__)
    return module is not None and _learner_file(getattr(module, "__file__", None) or "<learner>")

