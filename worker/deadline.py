"""The backstop deadline (QUEUE__JOB_TIMEOUT) of a job.

Each lane is a process of its own whose main thread runs the job (worker.lane), so RQ's own
death penalty, SIGALRM, serves: this is RQ's documented extension point for it (a worker's
``death_penalty_class``, constructed as ``(timeout, JobTimeoutException, job_id=...)``), and all
it changes is what is raised. RQ raises JobTimeoutException, an Exception, which a broad handler
inside a grader could swallow and turn into a wrong verdict; GradingDeadline is a BaseException.
A lane waiting for its cases (a lock, a pipe) is interrupted there: Python runs the handler in
the main thread as soon as the wait is."""

from __future__ import annotations

from typing import Any

from rq.timeouts import UnixSignalDeathPenalty


class GradingDeadline(BaseException):
    """A job ran past its backstop deadline. BaseException, so no broad handler inside the job
    can swallow it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the job ran past its backstop deadline (QUEUE__JOB_TIMEOUT)",)))


class JobDeadline(UnixSignalDeathPenalty):
    """RQ's SIGALRM death penalty, raising GradingDeadline. A job without a deadline (RQ's
    timeout of -1) arms nothing: SIGALRM cannot take a negative time."""

    def __init__(self, timeout: int, exception: Any = None, **kwargs: Any) -> None:
        super().__init__(timeout, GradingDeadline, **kwargs)

    def setup_death_penalty(self) -> None:
        if self._timeout > 0:
            super().setup_death_penalty()
