"""The backstop deadline (QUEUE__JOB_TIMEOUT) of a job run in one of a worker's lanes.

RQ's default, SIGALRM, cannot serve lanes: a process has one alarm, and Python runs signal
handlers in the main thread only, while each lane thread runs a job with a deadline of its own.
A timer thread per job raises GradingDeadline in the lane's thread instead, through CPython's
PyThreadState_SetAsyncExc (as RQ's own TimerDeathPenalty does, which also patches the class it
raises; this one does not). The exception lands when that thread next runs Python code: a lane
waiting for its cases sees it once the case in flight returns, and each case is bounded by the
sandbox's own wall limit."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from rq.timeouts import BaseDeathPenalty


class GradingDeadline(BaseException):
    """A job ran past its backstop deadline. BaseException, so no broad handler inside the job
    can swallow it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the job ran past its backstop deadline (QUEUE__JOB_TIMEOUT)",)))


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> int:
    """Make exception pending in the thread (None: drop whatever is pending); how many threads
    were affected."""
    target = ctypes.py_object(exception) if exception is not None else ctypes.c_void_p(None)
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), target))


class LaneDeadline(BaseDeathPenalty):
    """RQ's death-penalty interface (a context manager around the job) for the thread that enters it."""

    def __init__(self, timeout: float, exception: Any = None, **kwargs: Any) -> None:
        super().__init__(timeout, GradingDeadline, **kwargs)
        self._thread_id = threading.get_ident()
        self._lock = threading.Lock()  # firing and cancelling exclude each other
        self._timer: threading.Timer | None = None
        self._fired = False
        self._cancelled = False

    def setup_death_penalty(self) -> None:
        if self._timeout <= 0:  # RQ's "no timeout"
            return
        self._timer = threading.Timer(self._timeout, self._fire)
        self._timer.name = "job-deadline"
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if not self._cancelled:
                self._fired = _raise_in(self._thread_id, GradingDeadline) == 1

    def cancel_death_penalty(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._timer is not None:
                self._timer.cancel()
            if self._fired:
                # Fired just as the job returned: drop the exception if it has not landed yet, so
                # that it cannot land later in RQ's own bookkeeping of the finished job.
                _raise_in(self._thread_id, None)
