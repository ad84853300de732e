"""The per-lane backstop deadline (worker/deadline.py) on real threads: it ends the job of the
thread that armed it, from outside any signal handler, and only that job; a cancelled deadline
never lands afterwards. No durations are asserted: only whether the exception arrives."""

from __future__ import annotations

import threading
import time

import pytest

from worker.deadline import GradingDeadline, LaneDeadline


def _spin_until(stop: threading.Event) -> None:
    while not stop.is_set():  # Python code: where an asynchronous exception lands
        pass


def test_the_deadline_ends_the_job_of_the_lane_that_armed_it_and_no_other() -> None:
    outcome: dict[str, BaseException | None] = {}
    other_stop = threading.Event()

    def lane() -> None:
        try:
            with LaneDeadline(1):
                _spin_until(threading.Event())  # would run forever
            outcome["lane"] = None
        except BaseException as exc:  # the test records whatever arrives
            outcome["lane"] = exc

    def other() -> None:
        try:
            _spin_until(other_stop)
            outcome["other"] = None
        except BaseException as exc:
            outcome["other"] = exc

    threads = [threading.Thread(target=lane, daemon=True), threading.Thread(target=other, daemon=True)]
    for thread in threads:
        thread.start()
    threads[0].join(timeout=60)
    other_stop.set()
    threads[1].join(timeout=60)
    assert isinstance(outcome["lane"], GradingDeadline)
    assert "JOB_TIMEOUT" in str(outcome["lane"])
    assert outcome["other"] is None


def test_a_cancelled_deadline_never_lands() -> None:
    penalty = LaneDeadline(1)
    with penalty:
        pass  # the job ended well before its deadline
    stop = threading.Event()
    threading.Timer(2, stop.set).start()
    _spin_until(stop)  # past the deadline: nothing arrives
    assert penalty._timer is not None and not penalty._timer.is_alive()


@pytest.mark.parametrize("timeout", [0, -1])
def test_no_timeout_arms_nothing(timeout) -> None:
    penalty = LaneDeadline(timeout)  # RQ's "no deadline"
    with penalty:
        time.sleep(0)
    assert penalty._timer is None


def test_no_broad_handler_in_a_job_can_swallow_it() -> None:
    assert issubclass(GradingDeadline, BaseException) and not issubclass(GradingDeadline, Exception)


@pytest.mark.parametrize("given", [None, "custom"])
def test_the_message(given) -> None:
    exc = GradingDeadline() if given is None else GradingDeadline(given)
    assert str(exc) == (given or "the job ran past its backstop deadline (QUEUE__JOB_TIMEOUT)")
