"""A grader's answer used as a stand-in learner in a test (a list instead of a tensor, a fixed
generator, ...). The grader refuses its own answers by their code objects (grader.course_copy,
docs/exercises.md); a learner's function with the same code is another code object, which this makes."""

import types


def _renamed(code: types.CodeType) -> types.CodeType:
    consts = tuple(_renamed(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_name=f"learner_{code.co_name}", co_consts=consts)


def learner_copy(fn):
    copy = types.FunctionType(_renamed(fn.__code__), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy
