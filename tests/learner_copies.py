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


def as_learner(fn):
    """``fn`` as a learner's own answer: a function copied (learner_copy), a class subclassed with copies of its
    methods (the grader refuses its own answers handed in, and their code called from a learner's frame)."""
    if isinstance(fn, type):
        methods = {name: learner_copy(value) for name, value in vars(fn).items() if isinstance(value, types.FunctionType)}
        return type(fn.__name__, (fn,), methods)
    if isinstance(fn, types.FunctionType):
        return learner_copy(fn)
    return fn


def learner_tasks(tasks: dict) -> dict:
    """``{task id: Task}`` whose reference, mutants and alternatives are learner copies (for tests that hand
    them to ``grade`` or call them inside a test's own answer); grading still uses the real task by its id."""
    import dataclasses

    return {task_id: dataclasses.replace(task, reference=as_learner(task.reference),
                                         mutants={name: as_learner(m) for name, m in task.mutants.items()},
                                         alternatives=[as_learner(a) for a in task.alternatives])
            for task_id, task in tasks.items()}
