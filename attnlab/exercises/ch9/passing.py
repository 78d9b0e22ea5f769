"""Exercise 9, task 4: ``pass_on`` on a real ring, graded by starting 2 or 3 gloo processes that
run the course's ring attention with it (``run_ring(..., code=...)``), watched on the ranks and
tried once in the grader's process for buffers made on the CPU.
"""

from __future__ import annotations

import builtins

import torch
import torch.distributed as dist

from ...grader import Case, Problem, Task, compare_outputs, note
from ...grader.patches import patched_names, restore_torch, torch_attributes
from ...i18n import tr

EXERCISE = "09-ring-attention"


# --------------------------------------------------------------------------
# 4. pass_on(k, v, group=None) -> (k_next, v_next, requests): start sending k, v to rank + 1
#    and receiving rank - 1's, on a real gloo ring; graded through run_ring(..., code=...)


def pass_on(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)  # the buffers the receives fill
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


RING_CASES = [(3, "contiguous", True, 1), (2, "striped", True, 2), (3, "zigzag", True, 3), (3, "striped", False, 4)]  # P, layout, causal, seed
RING_TIMEOUT_S = 8.0  # a deadlocked ring is stopped after this; below the grader's 10 s per call
_warm = []


def _warm_up():
    """The first launch starts the forkserver (seconds); later ones take a fraction of one. Done
    while the cases are made, outside the time limit of the learner's calls."""
    from ...ring import RingJob, run_ring

    if not _warm:
        run_ring([RingJob(T=4, block=2, heads=1, d=2, check=False)], 2)
        _warm.append(True)


def ring_cases(generator):
    _warm_up()
    return [Case((P, layout, causal, seed), label=f"P={P}, layout={layout!r}, causal={causal}")
            for P, layout, causal, seed in RING_CASES]


EDITED_MARK = "attnlab.grader: pass_on edited k or v in place"


def _watched_pass_on(k, v, group=None):
    """The learner's pass_on (``_learner_pass_on`` on the ranks), watched: once its requests are
    done, the caller's k and v must be what they were (this step still computes with them). What the
    call changed besides is noted in the rank's ``rank_notes`` (run_ring's report brings them back) and
    put back: torch's functions replaced, the default dtype, torch's global RNG reseeded; and a second
    call with new k and v that hands back the first call's buffers or requests is kept (memoized)."""
    import torch as _torch

    from attnlab.grader.patches import patched_names, restore_torch, torch_attributes

    seen = globals().setdefault("_pass_on_seen", [])  # per earlier call: (k given, k_next, v_next, requests)
    reseeded = []
    seeders = [(space, name, getattr(space, name)) for space in (_torch, _torch.random)
               for name in ("manual_seed", "seed", "set_rng_state") if hasattr(space, name)]

    def seeder(space, name, original):
        def reseeds(*args, **kwargs):
            reseeded.append(f"{space.__name__}.{name}")
            return original(*args, **kwargs)

        return reseeds

    before, dtype = torch_attributes(), _torch.get_default_dtype()
    k_before, v_before = k.clone(), v.clone()
    for space, name, original in seeders:
        setattr(space, name, seeder(space, name, original))
    try:
        k_next, v_next, requests = _learner_pass_on(k, v, group)  # noqa: F821 - defined on the ranks
    finally:
        for space, name, original in seeders:
            setattr(space, name, original)
        patched = patched_names(before)
        if patched:
            rank_notes.append(("grader.patched_torch", {"name": patched[0]}))  # noqa: F821 - the rank's notes
            restore_torch(before)
        if _torch.get_default_dtype() != dtype:
            rank_notes.append(("grader.changed_default_dtype", {"dtype": str(_torch.get_default_dtype())}))  # noqa: F821
            _torch.set_default_dtype(dtype)
        if reseeded:
            rank_notes.append(("grader.reseeds_rng", {"name": reseeded[0]}))  # noqa: F821
    old = [r for *_, earlier in seen for r in earlier]
    kept = any(any(r is o for o in old) for r in requests)  # a gloo request waited on twice never returns
    for request in requests:
        if not any(request is o for o in old):
            request.wait()
    if not (torch.equal(k, k_before) and torch.equal(v, v_before)):
        raise RuntimeError("attnlab.grader: pass_on edited k or v in place")
    for k_given, k_out, v_out, _ in seen:  # new k given, an earlier answer handed back
        if (not torch.equal(k_before, k_given) and k_out.shape == k_next.shape and torch.equal(k_out, k_next)
                and v_out.shape == v_next.shape and torch.equal(v_out, v_next)):
            kept = True
    if kept:
        rank_notes.append(("memoized", {}))  # noqa: F821
    seen.append((k_before, k_next.clone(), v_next.clone(), list(requests)))
    return k_next, v_next, []  # waited for here (a gloo request waited on twice never returns)


class _Done:
    """A request that has finished (what the stand-in for torch.distributed hands back)."""

    def wait(self, *args, **kwargs):
        return True

    def is_completed(self):
        return True


class _OneRank:
    """A stand-in for ``torch.distributed`` on rank 0 of 2, moving nothing: it records the
    devices of the tensors the learner's pass_on sends and receives."""

    def __init__(self):
        self.devices = []

    def __getattr__(self, name):
        return getattr(dist, name)

    def get_rank(self, group=None):
        return 0

    def get_world_size(self, group=None):
        return 2

    def P2POp(self, op, tensor, peer=None, group=None, tag=0, **kwargs):  # noqa: N802 - dist's name
        return (op, tensor)

    def _use(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)
        return _Done()

    isend = irecv = _use

    def send(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)

    def recv(self, tensor, *args, **kwargs):
        self.devices.append(tensor.device.type)
        return 1

    def batch_isend_irecv(self, ops):
        return [op(tensor) for op, tensor in ops]


def _cpu_buffers(fn) -> bool:
    """Does ``fn`` make its buffers on the CPU? Its source runs once here, with k and v on the meta
    device and a stand-in for torch.distributed: on GPUs (NCCL) a CPU tensor cannot be sent or
    received. What cannot run this way (a typo, values read) says nothing: the ring shows it. A torch
    function it replaces, or the default dtype it sets, is put back at once (the ring is still to run
    here) and noted."""
    from ...ring.callers_code import code_of, ring_globals

    before, dtype = torch_attributes(), torch.get_default_dtype()
    try:
        namespace = dict(ring_globals(), dist=_OneRank())
        exec(compile(code_of({"pass_on": fn}), "<pass_on>", "exec"), namespace)  # noqa: S102 - the learner's code
        k, v = torch.empty(1, 1, 6, 4, device="meta"), torch.empty(1, 1, 6, 4, device="meta")
        k_next, v_next, requests = namespace["pass_on"](k, v, None)
        used = namespace["dist"].devices + [t.device.type for t in (k_next, v_next) if isinstance(t, torch.Tensor)]
    except Exception:  # noqa: BLE001
        return False
    finally:
        patched = patched_names(before)
        if patched:
            note(Problem("grader.patched_torch", {"name": patched[0]}))
            restore_torch(before)
        if torch.get_default_dtype() != dtype:
            note(Problem("grader.changed_default_dtype", {"dtype": str(torch.get_default_dtype())}))
            torch.set_default_dtype(dtype)
    return any(device != "meta" for device in used)


def _on_the_ring(fn, P, layout, causal, seed):
    """Run the course's ring_attention with ``fn`` as its pass_on on P gloo processes; return
    the attention output of the whole sequence [1, 1, T, d], assembled from every rank, and
    what the ring saw besides: ``tensor([k or v edited in place, buffers made on the CPU, an earlier answer
    handed back])``; what the ranks noted besides (torch patched, the default dtype changed, the RNG reseeded)
    is noted for the grader (``note``)."""
    from ...ring import RingJob, RingTimeout, run_ring
    from ...ring import shard_positions as positions_of

    _warm_up()
    T = 24
    flags = torch.tensor([0, int(_cpu_buffers(fn)), 0])
    out = torch.full((1, 1, T, 4), float("nan"), dtype=torch.float32)
    job = RingJob(T=T, layout=layout, causal=causal, block=2, heads=1, d=4, check=False, keep_output=True, seed=seed)
    try:
        result = run_ring([job], P, code={"_learner_pass_on": fn, "pass_on": _watched_pass_on},
                          timeout_s=RING_TIMEOUT_S)[0]
    except RingTimeout:
        raise RuntimeError(tr("ch9.ex_deadlock", seconds=RING_TIMEOUT_S)) from None
    except RuntimeError as error:  # a rank failed: its traceback ends with the learner's own error
        if EDITED_MARK in str(error):
            flags[0] = 1
            return out, flags
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        last = lines[-1] if lines else str(error)
        name, _, message = last.partition(": ")
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):  # the same type here (NotImplementedError: a stub)
            raise kind(message) from None
        raise RuntimeError(last) from None
    for rank, report in enumerate(result.ranks):
        out[..., positions_of(T, P, layout)[rank], :] = torch.tensor(report.output)
        for key, params in report.notes:
            if key == "memoized":
                flags[2] = 1
            else:
                note(Problem(key, params))
    return out, flags


def _compare_ring(expected, got):
    """The output, and what the ring saw besides (k or v edited in place, buffers on the CPU)."""
    (expected_out, expected_flags), (got_out, got_flags) = expected, got
    problems = [Problem(key) for key, flag in zip(("grader.ch9.pass_on.edits_input", "grader.ch9.pass_on.cpu_buffer"),
                                                  got_flags.tolist()) if flag]
    if not got_flags[0]:  # edited: the ring stopped, there is no output to compare
        values = compare_outputs(expected_out, got_out)
        if got_flags[2]:  # the second call handed back the first one's answer: that is why the values differ
            problems.insert(0, Problem("grader.memoized", detail=values))
        elif values is not None:
            problems.append(values)
    if not problems:
        return None
    return Problem(problems[0].key, problems[0].params, problems[0].detail, problems[1:])


def wrong_direction(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank - 1) % P, group), dist.P2POp(dist.isend, v, (rank - 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank + 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank + 1) % P, group)])
    return k_next, v_next, requests


def k_and_v_swapped(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group)])
    return k_next, v_next, requests


def keeps_its_own(k, v, group=None):
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group)])
    return k, v, requests  # the received buffers are never used


def receives_first(k, v, group=None):
    """Correct: the same four operations, the receives listed first."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.irecv, k_next, (rank - 1) % P, group), dist.P2POp(dist.irecv, v_next, (rank - 1) % P, group),
        dist.P2POp(dist.isend, k, (rank + 1) % P, group), dist.P2POp(dist.isend, v, (rank + 1) % P, group)])
    return k_next, v_next, requests


def taking_turns(k, v, group=None):
    """Correct: blocking calls, even ranks send first and odd ranks receive first (nothing to wait for)."""
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    for sending in (rank % 2 == 0, rank % 2 == 1):
        if sending:
            dist.send(k, (rank + 1) % P, group)
            dist.send(v, (rank + 1) % P, group)
        else:
            dist.recv(k_next, (rank - 1) % P, group)
            dist.recv(v_next, (rank - 1) % P, group)
    return k_next, v_next, []


PASS_ON = Task(
    id="ch9.pass_on", exercise=EXERCISE, reference=pass_on, cases=ring_cases,
    mutants={"wrong_direction": wrong_direction, "k_and_v_swapped": k_and_v_swapped, "keeps_its_own": keeps_its_own},
    alternatives=[receives_first, taking_turns],
    call=_on_the_ring, compare=_compare_ring,
)
