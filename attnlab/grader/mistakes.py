"""The mistakes an output shows: the known mistakes (mutants) whose output it matches, one per wrong
returned value, an additive mask read as a bool one, an answer that differs between two calls (random).
A mixin of :class:`attnlab.grader.judge.Grader`, which holds the task, the learner's function and ``index``
(case -> its number)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .compare import _holds_tensors, compare_outputs, returned, same_output
from .model import Case, Problem, Task
from .tensors import _nan_pattern


class MistakeNames:
    task: Task
    index: dict

    def output_of(self, name: str, fn: Callable, case: Case, index: int) -> Any:
        from .judge import output_of

        return output_of(self.task, name, fn, case, index)

    def mutant_outputs(self, case: Case) -> dict[str, Any]:
        outputs = {}
        for name, mutant in self.task.mutants.items():
            try:
                outputs[name] = self.output_of(name, mutant, case, self.index[id(case)])
            except Exception:  # noqa: BLE001 - a mutant that cannot run on this case says nothing
                continue
        return outputs

    def nan_fits(self, name: str, cases: list[Case], outputs: list[Any], called: list[bool]) -> bool:
        """Is the mutant ``name`` NaN exactly where the learner's output is, on every case both ran?"""
        mutant = self.task.mutants[name]
        for j, case in enumerate(cases):
            if case.judge is not None or not called[j]:
                continue
            try:
                wrong = self.output_of(name, mutant, case, j)
            except Exception:  # noqa: BLE001 - a mutant that cannot run on this case says nothing here
                continue
            mine, theirs = _nan_pattern(outputs[j]) or [], _nan_pattern(wrong) or []
            if len(mine) != len(theirs) or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(mine, theirs)):
                return False
        return True

    def mutant_matches(self, case: Case, reference: Any, got: Any) -> list[str]:
        return [name for name, wrong in self.mutant_outputs(case).items()
                if not same_output(wrong, reference) and same_output(got, wrong)]

    def additive_mask(self, case: Case, reference: Any, got: torch.Tensor, problem: Problem) -> Problem:
        """An additive mask where a bool one is asked: read it as a bool mask (0 = may read) and
        name what else is wrong with that pattern, if anything."""
        allowed = got == 0
        again = compare_outputs(reference, allowed, self.task.atol, self.task.rtol)
        if again is None:
            return problem
        names = self.mutant_matches(case, reference, allowed)
        other = Problem(f"grader.mutant.{self.task.id}.{names[0]}") if names else again
        return Problem(problem.key, problem.params, problem.detail, [other])

    def item_mutants(self, case: Case, reference: Any, got: Any) -> list[tuple[int, str]]:
        """Several returned values: the mistake each wrong one shows alone, ``[(item, name)]``."""
        if not (_holds_tensors(reference) and isinstance(got, (list, tuple)) and len(got) == len(reference)):
            return []
        outputs = self.mutant_outputs(case)
        found = []
        for n, (e, g) in enumerate(zip(reference, got)):
            if same_output(e, g):
                continue
            for name, wrong in outputs.items():
                if (isinstance(wrong, (list, tuple)) and len(wrong) == len(reference)
                        and not same_output(wrong[n], e) and same_output(wrong[n], g)):
                    found.append((n, name))
                    break
            else:
                found.append((n, None))  # wrong, but like no known mistake
        return found if any(name for _, name in found) else []

    def items_problem(self, task: Task, reference: Any, got: Any, named: list, problem: Problem) -> Problem:
        """One problem per wrong returned value: its mistake's name, or what is wrong with it."""
        problems = []
        for n, name in named:
            if name is not None:
                problems.append(Problem(f"grader.mutant.{task.id}.{name}"))
            else:
                inner = compare_outputs(reference[n], got[n], task.atol, task.rtol)
                item = returned(n, len(reference), task.output_names)
                problems.append(Problem(item.key, item.params, detail=inner))
        first = next(i for i, (_, name) in enumerate(named) if name is not None)
        main = problems.pop(first)
        return Problem(main.key, main.params, problem, problems)

    def random_answer(self, case: Case, problem: Problem, got: Any) -> bool:
        innermost = problem
        while innermost.key in ("grader.returned_item", "grader.returned_named") and innermost.detail is not None:
            innermost = innermost.detail
        if innermost.key not in ("grader.values", "grader.values_exact", "grader.nan"):
            return False
        try:
            again = self.call(case, case.seed + 1)
        except BaseException:  # noqa: BLE001
            return False
        return again is not None and not same_output(got, again, atol=0, rtol=0)
