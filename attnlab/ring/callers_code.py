"""The caller's own functions on the ranks: ``run_ring(jobs, P, code=...)``.

A process cannot import a function from a notebook, but it can run its source text:
:func:`code_of` turns the caller's functions (a chapter's cells, a learner's answer)
into source text, and every rank runs it over the package's own functions
(``_functions``), so that the package's ``ring_attention`` calls the caller's
``pass_on``. The text runs among the names the package's functions see
(:func:`ring_globals`), as when ``attnlab.ring`` was one module.
"""

from __future__ import annotations

import math

from .. import inputs
from ..i18n import tr
from .attention import allgather_attention, pass_around, pass_on, ring_attention
from .layouts import shard_positions


def ring_globals() -> dict:
    """The names of every module of :mod:`attnlab.ring` together, under the package's name: what
    the package's functions and the caller's source text may name on the ranks (torch, dist,
    math, time, chapter 3's tiles, the ring's own functions and classes)."""
    import attnlab.ring as package

    from . import attention, callers_code, cli, jobs, layouts, processes

    namespace: dict = {}
    for module in (layouts, attention, jobs, callers_code, processes, cli):
        namespace.update((name, value) for name, value in vars(module).items() if not name.startswith("__"))
    namespace.update((name, value) for name, value in vars(package).items()  # __name__ "attnlab.ring", ...
                     if name.startswith("__") and name not in ("__all__", "__path__"))
    return namespace


def code_of(functions) -> str:
    """Source text of the caller's functions for ``run_ring(..., code=...)``.

    ``functions``: a function, a list of functions, or a dict {name: function}; a dict runs
    each function under the given name (``{"pass_on": blocking_pass_on}`` makes the package's
    ``ring_attention`` call ``blocking_pass_on``). A process cannot import a function from a
    notebook, but it can run its source text."""
    import inspect
    import textwrap

    if callable(functions):
        functions = [functions]
    if not isinstance(functions, (list, tuple, dict)):
        raise TypeError(tr("ring.error_code", got=inputs.describe(functions)))
    named = functions.items() if isinstance(functions, dict) else [(getattr(f, "__name__", None), f) for f in functions]
    parts = []
    for name, function in named:
        if not callable(function) or not isinstance(name, str):
            raise TypeError(tr("ring.error_code", got=inputs.describe(function)))
        if function.__name__ == "<lambda>":  # its source is the whole line it sits in, not a definition
            raise TypeError(tr("ring.error_code_lambda", name=name))
        try:
            source = textwrap.dedent(inspect.getsource(function))
        except (OSError, TypeError):
            raise TypeError(tr("ring.error_code", got=inputs.describe(function))) from None
        parts.append(source)
        if name != function.__name__:
            parts.append(f"{name} = {function.__name__}\n")
    return "\n".join(parts)


def _functions(code: str) -> dict:
    """The package's functions, with the caller's source text run over them (see :func:`code_of`)."""
    namespace = dict(ring_globals(), math=math, rank_notes=[])  # math: chapter 9's attend_tiles needs it
    if code:  # the package's functions first, as source text, so that they call the caller's versions
        package = code_of([shard_positions, pass_on, ring_attention, allgather_attention, pass_around])
        exec(compile(package, __file__, "exec"), namespace)  # noqa: S102
        exec(compile(code, "<code given to run_ring>", "exec"), namespace)  # noqa: S102 (the caller's own code)
    return namespace
