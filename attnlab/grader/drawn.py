"""Inputs drawn from a task's contract, for an answer that passed the task's cases: called in a row, each
output compared with the reference's at once and again after all the later calls, the caller's tensors
checked again too, a failing input shrunk to a small one, and the gradients compared with the reference's
where the contract names inputs that must get them.

The inputs of one check: the first with every size at its smallest edge (``T=1``), the second at its largest
(a size above any mask a learner keeps, integers at a real model's scale), then random ones, then the first
random one again with one choice at a time drawn anew (its values alone, one size alone, ...): a result kept
under a key that leaves out one input shows there. They come from ``seed``: a new one on every check unless
``check(..., seed=...)`` or ``ATTNLAB_GRADER_SEED`` fixes it; a failure shows it.
"""

from __future__ import annotations

import os
import random
from typing import Any

import torch

from .compare import compare_outputs, compare_values, same_output
from .contract import Draw, tolerances
from .edits import edit, editable, put_all_back
from .learner_function import _keeps_tensors
from .model import Case, Problem, clone
from .tensors import _tensors
from .timelimit import call_with_time_limit
from .watch import Watch, _changed, input_names


NEIGHBOURS = 8  # inputs drawn again with one choice changed, per check


def run_seed(seed: int | None = None) -> int:
    """The seed of one check: ``seed``, else ``ATTNLAB_GRADER_SEED``, else a new one."""
    if seed is not None:
        return int(seed)
    fixed = os.environ.get("ATTNLAB_GRADER_SEED", "").strip()
    return int(fixed) if fixed.lstrip("-").isdigit() else random.SystemRandom().randrange(10**6)


class DrawnInputs:
    """The contract's inputs of one check of ``grader``'s answer."""

    def __init__(self, grader, seed: int, history: list | None = None):
        self.grader, self.task, self.seed = grader, grader.task, seed
        self.contract = grader.task.contract
        # every output so far: (message key, number, output, expected); the task's cases first
        self.history: list[tuple[str, int, Any, Any]] = list(history or [])

    def _seed(self, n: int) -> str:
        return f"{self.task.id}/{self.seed}/{n}"

    def _case(self, draw: Draw) -> Case:
        with torch.random.fork_rng(devices=[]):
            case = self.contract.draw(draw)
        if not case.label:
            case.label = draw.describe()
        return case

    def inputs(self) -> list[tuple[Draw, Case]]:
        drawn = []
        for n in range(self.contract.examples):
            schedule = "low" if n == 0 else "high" if n == 1 else "random"
            draw = Draw(self._seed(n), schedule)
            drawn.append((draw, self._case(draw)))
        if self.contract.neighbours and len(drawn) > 2:
            # the random inputs with the most sizes above their smallest value (a neighbour of T = 1 shows little):
            # two of them where an input has few choices (a task of a few numbers), one otherwise
            bases = sorted((draw for draw, _ in drawn[2:]), key=lambda draw: -sum(
                c.kind == "size" and c.value > c.options[0] for c in draw.choices))
            for b, base in enumerate(bases[:2 if len(bases[0].choices) <= 4 else 1]):
                # one choice at a time: the sizes and options first, then each tensor's values (a layout
                # changes across the random inputs already); at most NEIGHBOURS of them
                order = sorted((k for k, c in enumerate(base.choices) if c.kind != "layout"),
                               key=lambda k: base.choices[k].kind == "values")
                for k in order[:NEIGHBOURS]:
                    draw = Draw(self._seed(100 * (b + 1) + k), "random", replay=base.choices, fresh={k})
                    case = self._case(draw)
                    if draw.describe() != base.describe() or base.choices[k].kind == "values":
                        drawn.append((draw, case))
        return drawn

    # --- one call
    def difference(self, expected: Any, got: Any, case: Case | None = None) -> Problem | None:
        task = self.task
        if task.compare is not None:
            return task.compare(expected, got)
        atol, rtol = tolerances(expected, task.atol, task.rtol, case.args if case is not None else ())
        return compare_outputs(expected, got, atol, rtol, names=task.output_names)

    def one(self, case: Case) -> tuple[Problem | None, Any, Any, tuple | None]:
        """``(problem, output, expected, the arguments as the call left them)`` of one call on ``case``."""
        grader, task = self.grader, self.task
        watch = Watch()
        if case.judge is not None:
            try:
                problem = case.judge(lambda seed: grader.call(case, seed, watch))
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # noqa: BLE001 - the learner's code, whatever it raises
                problem = grader.failed_call(error)
            extras = watch.problems(task)
            return (problem or (extras[0] if extras else None)), None, None, None
        try:
            got = grader.call(case, watch=watch)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001
            return grader.failed_call(error), None, None, None
        args = grader.last_args
        expected = task.run(task.reference, case)  # after the learner's call: not on the stack during it
        self.history.append(("", 0, got, expected))
        try:
            problem = self.difference(expected, got, case)
        except Exception:  # noqa: BLE001 - an output the comparison cannot read
            problem = Problem("grader.unreadable", {"got": type(got).__name__})
        extras = watch.problems(task)
        if problem is None and extras:
            problem = Problem(extras[0].key, extras[0].params, extras[0].detail, extras[1:])
        return problem, got, expected, args

    # --- the point for the drawn inputs
    def run(self) -> tuple[Problem | None, str, Problem | None, str]:
        """``(problem, label)`` of the drawn inputs and of the gradients (``None``: right)."""
        inputs = self.inputs()
        kept = []
        for k, (draw, case) in enumerate(inputs):
            problem, got, expected, args = self.one(case)
            if self.history and self.history[-1][0] == "":
                self.history[-1] = ("grader.memoized_input", k + 1, got, expected)
            if problem is not None:
                return (*self.explain(k, inputs, kept, problem, got, expected), *self.gradients_skipped())
            kept.append((k, case, got, expected, args))
        for k, case, got, expected, args in kept:  # again, after every later call
            if got is not None and self.difference(expected, got, case) is not None:
                detail = self.difference(expected, got, case)
                return (self.wrapped(k, inputs, Problem("grader.output_changed", detail=detail)), inputs[k][1].label,
                        *self.gradients_skipped())
            for name, before, after in zip(input_names(self.task, case), case.args, args or ()):
                if _changed(before, after):
                    problem = Problem("grader.input_changed_later", {"name": name})
                    return (self.wrapped(k, inputs, problem), inputs[k][1].label, *self.gradients_skipped())
        for k, case, got, expected, args in kept:  # a caller edits what came back: the first input that returns objects
            if case.judge is None and editable(got):
                problem = self.edited(case, got, args)
                if problem is not None:
                    return (self.wrapped(k, inputs, problem), inputs[k][1].label, *self.gradients_skipped())
                break
        if not self.contract.grads:
            return None, "", None, ""
        problem, label = self.gradients(inputs)
        return None, "", problem, label

    def edited(self, case: Case, got: Any, args: tuple | None) -> Problem | None:
        """What a caller's edit of the returned objects does: a returned tensor that shares memory with another
        one (not with an input: views of the caller's own tensors are its business) changes with it; and the next
        call on the same input must not hand back the edited object (a memo, ``functools.lru_cache``). The edits
        are undone afterwards: a learner's memo stays as it was."""
        names = self.task.output_names or tuple(f"#{n + 1}" for n in range(len(got) if isinstance(got, tuple) else 0))
        returned = [(name, t) for name, t in zip(names, got) if isinstance(t, torch.Tensor)] if isinstance(got, tuple) else []
        theirs = {t.untyped_storage().data_ptr() for t in _tensors(args or ()) if not t.is_meta}
        undo: list = []
        try:
            for n, (name, tensor) in enumerate(returned):
                others = [(o, t, t.detach().clone()) for o, t in returned[:n] + returned[n + 1:]
                          if t.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
                          and t.untyped_storage().data_ptr() not in theirs]
                if others and edit(tensor, undo):
                    changed = [o for o, t, before in others if not same_output(t.detach(), before)]
                    put_all_back(undo)
                    if changed:
                        return Problem("grader.outputs_share_memory", {"a": name, "b": changed[0]})
            edit(got, undo)
            problem = self.one(case)[0]
        finally:
            put_all_back(undo)
        return None if problem is None else Problem("grader.returns_kept_object", detail=problem)

    def gradients_skipped(self) -> tuple[Problem | None, str]:
        if not self.contract.grads:
            return None, ""
        return Problem("grader.drawn_first"), ""

    def wrapped(self, k: int, inputs: list, problem: Problem) -> Problem:
        return Problem("grader.drawn_input", {"k": k + 1, "n": len(inputs), "seed": self.seed}, detail=problem)

    def explain(self, k: int, inputs: list, kept: list, problem: Problem, got: Any, expected: Any):
        """The problem of input ``k``: kept from an earlier input, wrong only after the earlier calls, or
        (shrunk to a small input) wrong on its own, named after the known mistake it matches."""
        draw, case = inputs[k]
        memo = self.kept_answer(got, expected, problem)
        if memo is not None:
            return self.wrapped(k, inputs, memo), case.label
        if kept:
            alone = self.one(case)[0]
            if alone is None:  # right when called alone: the earlier calls left something behind
                return self.wrapped(k, inputs, Problem("grader.depends_on_calls", detail=problem)), case.label
        if _keeps_tensors(self.grader.fn):  # a cache of tensors (a mask, a result) kept from an earlier call
            return self.wrapped(k, inputs, Problem("grader.keeps_state", detail=problem)), case.label
        if draw is not None:
            draw, case, problem, got, expected = self.shrink(draw, case, problem, got, expected)
        memo = self.kept_answer(got, expected, problem)
        if memo is not None:
            return self.wrapped(k, inputs, memo), case.label
        name = self.mutant_name(case, expected, got)
        if name is not None:
            problem = Problem(f"grader.mutant.{self.task.id}.{name}", detail=problem)
        return self.wrapped(k, inputs, problem), case.label

    def kept_answer(self, got: Any, expected: Any, problem: Problem) -> Problem | None:
        """``got`` is the answer of an earlier call whose expected answer differs: a result kept between calls."""
        if got is None:
            return None
        for key, number, earlier_got, earlier_expected in reversed(self.history[:-1]):
            if (key and same_output(got, earlier_got)
                    and not same_output(expected, earlier_expected)):
                return Problem(key, {"j": number}, detail=problem)
        return None

    def shrink(self, draw: Draw, case: Case, problem: Problem, got: Any, expected: Any):
        """A smaller input that still fails: each choice in turn made smaller (a size, the plain dtype, a
        contiguous layout), kept while the call still fails; at most ``contract.shrink_calls`` calls."""
        calls = 0
        improved = True
        while improved and calls < self.contract.shrink_calls:
            improved = False
            for override in draw.shrinking(draw.choices):
                if calls >= self.contract.shrink_calls:
                    break
                smaller = Draw(draw.seed, "random", replay=draw.choices, override=override)
                try:
                    smaller_case = self._case(smaller)
                except Exception:  # noqa: BLE001 - a combination the task's domain does not allow
                    continue
                calls += 1
                result = self.one(smaller_case)
                if result[0] is not None:
                    draw, case, (problem, got, expected, _) = smaller, smaller_case, result
                    improved = True
                    break
        return draw, case, problem, got, expected

    def mutant_name(self, case: Case, expected: Any, got: Any) -> str | None:
        if got is None or expected is None:
            return None
        for name, mutant in self.task.mutants.items():
            try:
                wrong = self.task.run(mutant, case)
            except Exception:  # noqa: BLE001 - a mutant that cannot run on this input says nothing
                continue
            if not same_output(wrong, expected) and same_output(got, wrong):
                return name
        return None

    # --- the point for the gradients
    def gradients(self, inputs: list) -> tuple[Problem | None, str]:
        """On a drawn input in float64 (else float32), the gradients of the outputs (a random cotangent) with
        respect to the inputs the contract names, compared with the reference's."""
        chosen = None
        candidates = [case for _, case in inputs if case.judge is None and self._all_of(case, torch.float64, torch.float32)]
        if candidates:  # float64 first; of those the largest values (where a gradient breaks), then the smallest
            chosen = min(candidates, key=lambda case: (not self._all_of(case, torch.float64), self._size(case) < 8,
                                                      -self._largest(case), self._size(case)))
        if chosen is None:
            return None, ""
        names = input_names(self.task, chosen)
        slots = [names.index(name) for name in self.contract.grads if name in names]
        problem = self._compare_gradients(chosen, slots, names)
        return problem, chosen.label

    def _largest(self, case: Case) -> float:
        names = input_names(self.task, case)
        values = [case.args[names.index(name)] for name in self.contract.grads if name in names]
        return max((float(v[v.isfinite()].abs().max()) for v in values if v.isfinite().any()), default=0.0)

    def _size(self, case: Case) -> int:
        names = input_names(self.task, case)
        return sum(case.args[names.index(name)].numel() for name in self.contract.grads if name in names)

    def _all_of(self, case: Case, *dtypes) -> bool:
        names = input_names(self.task, case)
        for name in self.contract.grads:
            value = case.args[names.index(name)] if name in names else None
            if not (isinstance(value, torch.Tensor) and value.dtype in dtypes):
                return False
        return True

    def _grads_of(self, fn, case: Case, slots: list[int], learner: bool):
        args = list(clone(case.args))
        leaves = []
        for slot in slots:
            args[slot] = args[slot].detach().contiguous().clone().requires_grad_(True)
            leaves.append(args[slot])
        if learner:
            out = self.grader.call(case, args=tuple(args))
        else:
            out = self.task.run_with_inputs(fn, case, args=tuple(args), grad=True)[0]
        return out, leaves

    def _compare_gradients(self, case: Case, slots: list[int], names: list[str]) -> Problem | None:
        task = self.task
        try:
            expected, ref_leaves = self._grads_of(task.reference, case, slots, learner=False)
        except Exception:  # noqa: BLE001 - a reference that cannot be differentiated here: nothing to compare
            return None
        wanted = [n for n, t in enumerate(_tensors(expected)) if t.requires_grad]
        if not wanted:
            return None
        generator = torch.Generator().manual_seed(self.seed)
        cotangents = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype).to(t.device)
                      for n, t in enumerate(_tensors(expected)) if n in wanted]
        reference = torch.autograd.grad([_tensors(expected)[n] for n in wanted], ref_leaves, cotangents,
                                        allow_unused=True)
        try:
            got, leaves = self._grads_of(None, case, slots, learner=True)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001
            return self.grader.failed_call(error)
        outputs = _tensors(got)
        if len(outputs) != len(_tensors(expected)):
            return None  # another structure: the drawn inputs' point says what is wrong with it
        picked = [outputs[n] for n in wanted]
        pairs = [(o, c) for o, c in zip(picked, cotangents) if o.requires_grad]
        if not pairs:
            return Problem("grader.no_grad", {"name": names[slots[0]]})
        try:
            grads = call_with_time_limit(lambda: torch.autograd.grad(
                [o for o, _ in pairs], leaves, [c.to(o.dtype) for o, c in pairs], allow_unused=True),
                self.grader.time_limit)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - a backward of the learner's that fails
            if isinstance(error, RuntimeError) and "does not require grad" in str(error):
                return Problem("grader.no_grad", {"name": names[slots[0]]})  # a view made under no_grad
            return self.grader.failed_call(error)
        for slot, mine, theirs in zip(slots, grads, reference):
            name = names[slot]
            if theirs is None:
                continue
            if mine is None:
                return Problem("grader.no_grad", {"name": name})
            atol, rtol = tolerances(theirs, task.atol, task.rtol)
            if theirs.dtype == torch.float32:
                atol, rtol = 10 * atol, 10 * rtol
            values = compare_values(theirs.detach().double(), mine.detach().double(), atol, rtol)
            if values is not None:
                key = "grader.nan_grad" if values.key == "grader.nan" else "grader.wrong_grad"
                return Problem(key, {"name": name}, detail=values)
        return None

