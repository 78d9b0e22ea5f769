"""The time limit on a learner's function, one that the learner's own code cannot defeat.

``call_with_time_limit(fn, seconds)`` runs ``fn()`` and raises :class:`TimeLimitExceeded`
once ``seconds`` have passed. Three mechanisms work together, because each alone can be
defeated by code a learner writes in good faith:

* a watchdog thread (``threading.Timer``-like) that, once the time is up, raises
  ``TimeLimitExceeded`` inside the learner's thread with CPython's
  ``PyThreadState_SetAsyncExc``, again every few milliseconds until the call has ended. It
  needs no signal, so ``signal.signal(SIGALRM, SIG_IGN)``, ``signal.alarm(0)`` or a blocked
  signal mask in the learner's code change nothing;
* a trace function, armed each time the exception is created after the deadline, that raises
  it again on the next line the learner's code runs. A bare ``except:``, ``except
  BaseException:``, a retry loop or a ``finally`` that loops catch one exception, but the next
  line inside their handler raises the next one, which leaves the handler;
* on the main thread, ``SIGALRM`` sent by the watchdog (``signal.pthread_kill``, the process's
  interval timer is left alone, so pytest-timeout and the like keep theirs), which interrupts
  a blocking call such as ``time.sleep``.

Off the main thread (Windows has no SIGALRM either way; a check called from a thread) the
function runs in a daemon thread that gets the same exceptions; a call stuck in C code is
abandoned after the limit (Python cannot stop a thread inside C code). A single long C call
(one huge matmul) is interrupted only when it returns, in every case.
"""

from __future__ import annotations

import ctypes
import linecache
import signal
import sys
import threading
import tokenize
import traceback
from typing import Any, Callable

import torch

_RETRY = 0.005  # seconds between two exceptions after the deadline
_GRACE = 0.2  # off the main thread: how long after the deadline a worker stuck in C is waited for
_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int
_HERE = __file__
# Python's own error reporting (an exception it cannot raise goes to sys.unraisablehook, which
# formats a traceback): the re-raising tracer leaves it alone, or that report fails in its turn.
_SPARED = frozenset({traceback.__file__, linecache.__file__, tokenize.__file__})


class TimeLimitExceeded(BaseException):
    """Raised into the learner's code when its time is up (a BaseException, so a learner's
    ``except Exception`` does not catch it; the trace function below handles the rest)."""

    def __init__(self, *args):
        super().__init__(*args)
        deadline = _deadlines.get(threading.get_ident())
        if deadline is not None:
            deadline.arm_tracer()


class _TimeLimitAgain(TimeLimitExceeded):
    """The same, raised by the trace function and the signal handler (not counted)."""


class _Deadline:
    """The time limit of one call on one thread."""

    def __init__(self, seconds: float, thread_id: int, boundary, on_main_thread: bool):
        self.seconds = seconds
        self.thread_id = thread_id
        self.boundary = boundary  # the frame that called the learner: tracing stops there
        self.on_main_thread = on_main_thread
        self.state = [False, False]  # [expired, finished]: list items, set without a call
        self.c_thread_id = ctypes.c_ulong(thread_id)
        self.wake = threading.Event()
        self.watchdog = threading.Thread(target=self._watch, daemon=True, name="attnlab-grader-watchdog")
        self.handler = None

    # --- the watchdog thread
    def _watch(self) -> None:
        if self.wake.wait(self.seconds):
            return
        self.state[0] = True
        set_async, thread_id, exc, state = _set_async_exc, self.c_thread_id, \
            ctypes.py_object(TimeLimitExceeded), self.state
        while not state[1]:
            # A new one replaces one not raised yet. No bytecode between the test and the call lets
            # the GIL go, so the learner's thread cannot finish in between (PyDLL calls keep the GIL).
            if not state[1]:
                set_async(thread_id, exc)
            if self.on_main_thread and not state[1] and signal.getsignal(signal.SIGALRM) is self.handler:
                try:
                    signal.pthread_kill(self.thread_id, signal.SIGALRM)  # wakes time.sleep & co.
                except (OSError, ValueError):
                    pass
            if self.wake.wait(_RETRY):
                return

    # --- in the learner's thread
    def on_alarm(self, signum, frame):
        if self.state[0] and not self.state[1]:
            raise _TimeLimitAgain

    def arm_tracer(self) -> None:
        """After the deadline: raise again on the next line the learner's code runs."""
        if not self.state[0] or self.state[1]:
            return
        state, boundary = self.state, self.boundary
        reporter = _hook_code(sys.unraisablehook)

        def tracer(frame, event, arg):
            if state[1] or frame is boundary or frame.f_code.co_filename == _HERE \
                    or frame.f_code.co_filename in _SPARED or _inside(frame, reporter, boundary):
                return None
            raise _TimeLimitAgain

        sys.settrace(tracer)
        frame = sys._getframe(1)
        while frame is not None and frame is not boundary:  # the frames between the learner and us
            if frame.f_code.co_filename != _HERE:
                frame.f_trace = tracer
                frame.f_trace_lines = True
            frame = frame.f_back



def _hook_code(hook):
    """The code of an unraisable hook written in Python (pytest's is a functools.partial), else None."""
    return getattr(getattr(hook, "func", hook), "__code__", None)


def _inside(frame, code, boundary) -> bool:
    """Whether ``frame`` runs inside a call of ``code`` (below the learner's call): an exception
    the learner's code could not raise (in a finalizer, say) is being reported, and the report
    must not be stopped in its turn (pytest's hook imports tracemalloc the first time: a raise
    inside that import failed the report, and the test, once in a dozen runs of make test)."""
    while code is not None and frame is not None and frame is not boundary:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


_deadlines: dict[int, _Deadline] = {}


def call_with_time_limit(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``, stopped with :class:`TimeLimitExceeded` after ``seconds``."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_kill"):
        return _call_here(fn, seconds, on_main_thread=True)
    return _call_in_worker(fn, seconds)


def _call_here(fn: Callable[[], Any], seconds: float, on_main_thread: bool) -> Any:
    thread_id = threading.get_ident()
    deadline = _Deadline(seconds, thread_id, sys._getframe(), on_main_thread)
    saved_trace = sys.gettrace()
    previous_handler = saved_mask = None
    if on_main_thread:
        deadline.handler = deadline.on_alarm
        previous_handler = signal.signal(signal.SIGALRM, deadline.handler)
        saved_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    _deadlines[thread_id] = deadline
    deadline.watchdog.start()
    try:
        return fn()
    finally:
        # This line runs no Python function, so no exception can come in before it; after it the
        # watchdog sends nothing more. One it sent that was not raised yet is raised here.
        deadline.state[1] = True
        try:  # (clearing it instead would leave CPython 3.11 spinning on its pending flag)
            _pending_point()
        except TimeLimitExceeded:
            pass
        deadline.wake.set()
        deadline.watchdog.join()
        if sys.gettrace() is not saved_trace:
            sys.settrace(saved_trace)
        _deadlines.pop(thread_id, None)
        if on_main_thread:
            # The learner's signal mask undone while our handler is still there: a SIGALRM still
            # on its way arrives now and does nothing, instead of at the previous handler.
            signal.pthread_sigmask(signal.SIG_SETMASK, saved_mask)
            signal.signal(signal.SIGALRM, previous_handler)


def _pending_point() -> None:
    """A function call: where CPython raises an exception sent to this thread."""


def _call_in_worker(fn: Callable[[], Any], seconds: float) -> Any:
    outcome: dict[str, Any] = {}
    grad_enabled = torch.is_grad_enabled()  # grad mode is per thread

    def target():
        try:
            with torch.set_grad_enabled(grad_enabled):
                outcome["value"] = _call_here(fn, seconds, on_main_thread=False)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error

    worker = threading.Thread(target=target, daemon=True, name="attnlab-grader-call")
    worker.start()
    worker.join(seconds + _GRACE)
    if worker.is_alive():  # stuck in C code: abandoned (the watchdog stops it when it returns)
        raise TimeLimitExceeded
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
