"""The backstop deadline (worker/deadline.py): RQ's SIGALRM death penalty, raising a
BaseException, in the main thread where a lane runs its job. It ends a job that runs past it,
also one blocked waiting on a lock (how a lane waits for its cases); a cancelled deadline never
lands. Each check runs in a fork (SIGALRM is the test runner's own timeout too). No durations are
asserted: only whether the exception arrives."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.forked import report_from_fork
from worker.deadline import GradingDeadline, JobDeadline


def _spin_until(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


def _outcome(job: Callable[[], Any], timeout: int) -> dict[str, Any]:
    """What ended the job under a deadline: the exception's type and text, or none."""
    def run() -> dict[str, Any]:
        try:
            with JobDeadline(timeout, job_id="checked"):
                job()
        except BaseException as exc:  # the check reports whatever arrives
            return {"raised": type(exc).__name__, "text": str(exc)}
        return {"raised": None, "alarm_left": signal.alarm(0), "handler": str(signal.getsignal(signal.SIGALRM))}
    return report_from_fork(run)


def test_the_deadline_ends_a_job_that_runs_past_it() -> None:
    outcome = _outcome(lambda: _spin_until(threading.Event()), 1)  # would run forever
    assert outcome["raised"] == "GradingDeadline" and "1 seconds" in outcome["text"]


def test_the_deadline_ends_a_job_blocked_waiting_for_its_cases() -> None:
    def waits() -> None:
        never = threading.Lock()
        never.acquire()
        never.acquire()  # as a lane waits on its cases' threads
    assert _outcome(waits, 1)["raised"] == "GradingDeadline"


def test_a_cancelled_deadline_never_lands() -> None:
    def after_a_quick_job() -> dict[str, Any]:
        with JobDeadline(1, job_id="quick"):
            pass  # the job ended well before its deadline
        stop = threading.Event()
        threading.Timer(2, stop.set).start()
        _spin_until(stop)  # past the deadline: nothing arrives
        return {"handler": str(signal.getsignal(signal.SIGALRM))}
    assert report_from_fork(after_a_quick_job) == {"handler": str(signal.SIG_DFL)}


@pytest.mark.parametrize("timeout", [0, -1])
def test_no_timeout_arms_nothing(timeout) -> None:
    outcome = _outcome(lambda: None, timeout)  # RQ's "no deadline"
    assert outcome["raised"] is None and outcome["alarm_left"] == 0


def test_no_broad_handler_in_a_job_can_swallow_it() -> None:
    assert issubclass(GradingDeadline, BaseException) and not issubclass(GradingDeadline, Exception)

    def careless() -> None:
        try:
            _spin_until(threading.Event())
        except Exception:  # what a careless grader might write
            return
    assert _outcome(careless, 1)["raised"] == "GradingDeadline"


@pytest.mark.parametrize("given", [None, "custom"])
def test_the_message(given) -> None:
    exc = GradingDeadline() if given is None else GradingDeadline(given)
    assert str(exc) == (given or "the job ran past its backstop deadline (QUEUE__JOB_TIMEOUT)")
