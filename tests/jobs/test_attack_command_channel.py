"""Attacks on app.jobs.command_channel.PromptUnsubscribe (commit 3705856): a lane's stop must not
stall on RQ's command channel, and no command channel (thread, connection, subscription) may be
left behind, also across worker.lane's outage loop (teardown with Redis gone, work() again)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from rq import Queue
from rq.serializers import JSONSerializer

from app.redis_link import REDIS_ERRORS, sync_connection
from tests.support.bounded import call_bounded
from tests.support.server import ROOT
from worker.grading_worker import GradingWorker

pytestmark = pytest.mark.slow


def _worker(redis_server: Any, name: str) -> GradingWorker:
    # the lane's own connection settings (worker.grading_worker.build_worker)
    connection = sync_connection(redis_server.url)
    return GradingWorker([Queue("judge", connection=connection, serializer=JSONSerializer)],
                         connection=connection, serializer=JSONSerializer, name=name)


def _subscribed(redis_server: Any, name: str) -> tuple[GradingWorker, Any]:
    """A lane subscribed to its command channel (work()'s bootstrap), and its command thread."""
    worker = _worker(redis_server, name)
    worker.subscribe()
    return worker, worker.pubsub_thread


def _numsub(redis_server: Any, worker: GradingWorker) -> int:
    return dict(redis_server.client().pubsub_numsub(worker.pubsub_channel_name))[
        worker.pubsub_channel_name.encode()]


def _timed(call: Any, limit: float) -> tuple[float, BaseException | None]:
    """call's (seconds taken, exception raised); fails the test past ``limit``."""
    took, error = call_bounded(call, limit)
    assert took is not None, f"{call} still running after {limit} s"
    return took, error


def test_unsubscribe_without_a_subscription_returns_at_once(redis_server) -> None:
    worker = _worker(redis_server, "never-subscribed")
    took, error = _timed(worker.unsubscribe, 5)
    assert error is None and took < 1


def _unsubscribes_within(worker: GradingWorker, seconds: float) -> None:
    took, error = _timed(worker.unsubscribe, 10)
    assert error is None and took < seconds, (took, error)


def _nothing_left(redis_server: Any, thread: Any) -> None:
    thread.join(5)
    assert not thread.is_alive(), "the command thread outlived the stop"
    assert redis_server.client().client_list(_type="pubsub") == []


def test_unsubscribe_twice_is_prompt_and_leaves_nothing(redis_server) -> None:
    worker, thread = _subscribed(redis_server, "twice")
    for _ in range(2):
        _unsubscribes_within(worker, 2)
    _nothing_left(redis_server, thread)


def test_a_command_arriving_during_the_stop_does_not_stall_it(redis_server) -> None:
    worker, thread = _subscribed(redis_server, "commanded")
    handled = threading.Event()
    original = worker.handle_payload

    def slow_handler(message: Any) -> None:
        handled.set()
        time.sleep(0.5)  # the command is being handled as the stop comes
        original(message)

    worker.pubsub.channels[worker.pubsub_channel_name.encode()] = slow_handler
    # (not "shutdown": RQ's handler sends SIGINT to this very process)
    redis_server.client().publish(worker.pubsub_channel_name, '{"command": "kill-horse"}')
    assert handled.wait(5)
    _unsubscribes_within(worker, 3)
    _nothing_left(redis_server, thread)


def test_a_stop_while_redis_is_down_is_prompt_and_the_thread_ends(redis_server) -> None:
    # The command thread is in RQ's exception handler (time.sleep(2) and retry) when the stop
    # comes; unsubscribe's own UNSUBSCRIBE fails (Redis gone).
    worker, thread = _subscribed(redis_server, "down-at-stop")
    redis_server.stop()
    time.sleep(1.0)  # the thread's read fails; it sleeps in RQ's handler
    took, error = _timed(worker.unsubscribe, 40)
    assert error is None, error
    assert took < 5, f"unsubscribe with Redis down took {took:.1f} s"
    thread.join(5)
    assert not thread.is_alive(), "the command thread outlived the stop"
    redis_server.start()
    time.sleep(3)  # what an outlived thread would need to reconnect and subscribe again
    assert _numsub(redis_server, worker) == 0


def test_the_outage_loop_leaves_no_command_thread_behind(redis_server) -> None:
    # worker.lane.work: RQ's loop ends on a lost Redis; RQ's teardown (in work()'s finally)
    # registers the death first (GradingWorker.register_death: raises with Redis gone), then
    # unsubscribes; the lane waits for Redis and calls work() again, which subscribes anew.
    worker = _worker(redis_server, "outage")
    commands: list[Any] = []
    worker.handle_payload = commands.append  # type: ignore[method-assign]  # what reaches the worker
    worker.subscribe()  # work()'s bootstrap
    first = worker.pubsub_thread
    redis_server.stop()
    took, error = _timed(worker.teardown, 40)  # work()'s finally, Redis gone
    assert error is None or isinstance(error, REDIS_ERRORS)
    redis_server.start()
    worker.subscribe()  # the lane's work() again, after the outage
    second = worker.pubsub_thread
    time.sleep(4)  # RQ's handler retries every 2 s; redis-py resubscribes on reconnect
    try:
        subscribed = _numsub(redis_server, worker)
        redis_server.client().publish(worker.pubsub_channel_name, '{"command": "kill-horse"}')
        time.sleep(1)
        print(f"teardown with Redis gone: {took:.1f} s, raised {error!r}; first thread alive: "
              f"{first.is_alive()}; subscriptions: {subscribed}; one command handled {len(commands)} times")
        assert not first.is_alive(), "the first run's command thread is still running beside the second"
        assert subscribed == 1, "the worker's command channel is subscribed more than once"
        assert len(commands) == 1, "one command reached the worker more than once"
    finally:
        worker.unsubscribe()
        first.stop(timeout=0)
        second.join(5)


# The same through worker.lane.work itself, in a process of its own (RQ's work loop installs
# signal handlers: main thread only). Redis goes away as RQ's loop checks for a suspension (a
# Redis command outside its retried dequeue), so the loop ends, RQ's teardown runs with Redis
# gone, and the lane waits for Redis and works again under the same name.
LANE = """
import sys, time
from rq import Queue
from rq.serializers import JSONSerializer
from app.redis_link import sync_connection
from worker.grading_worker import GradingWorker
from worker import lane

connection = sync_connection(sys.argv[1])
worker = GradingWorker([Queue("judge", connection=connection, serializer=JSONSerializer)],
                       connection=connection, serializer=JSONSerializer, name="lane-outage")
real = worker.check_for_suspension
calls = []

def check_for_suspension(burst):
    calls.append(1)
    if len(calls) == 1:
        print("subscribed", flush=True)
        while lane._reachable(connection):  # the test stops Redis now
            time.sleep(0.05)
    return real(burst)

worker.check_for_suspension = check_for_suspension
sys.exit(lane.work(worker, burst=False))
"""


def _wait_for_line(log: Any, line: str, limit: float = 50) -> None:
    deadline = time.monotonic() + limit
    while line not in log.read_text().splitlines():
        assert time.monotonic() < deadline, f"the lane never printed {line!r}"
        time.sleep(0.1)


def _lane_started(script: str, redis_server: Any, tmp_path: Any) -> subprocess.Popen[str]:
    """The lane ``script`` in a process of its own, once it has subscribed."""
    log = tmp_path / "lane.log"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", script, redis_server.url], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, text=True)
    _wait_for_line(log, "subscribed")
    return process


def test_the_lane_outage_loop_end_to_end_leaves_one_subscription_and_stops_promptly(redis_server, tmp_path) -> None:
    process = _lane_started(LANE, redis_server, tmp_path)
    try:
        redis_server.stop()
        time.sleep(1.5)  # RQ's loop ends, its teardown fails, the lane waits for Redis
        redis_server.start()
        channel = "rq:pubsub:lane-outage"
        deadline = time.monotonic() + 15
        counts = []
        while time.monotonic() < deadline:  # the lane works again; an outlived thread resubscribes
            counts.append(dict(redis_server.client().pubsub_numsub(channel))[channel.encode()])
            time.sleep(0.5)
        print(f"subscriptions of the lane's command channel after the outage: {counts}")
        process.send_signal(signal.SIGTERM)
        began = time.monotonic()
        process.wait(timeout=30)
        print(f"lane stopped {time.monotonic() - began:.1f} s after SIGTERM, exit {process.returncode}")
        assert max(counts) == 1 and counts[-1] == 1, f"command channel subscribed {max(counts)} times after one outage"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_lane_asked_to_stop_while_redis_is_unreachable_stops_promptly(redis_server, tmp_path) -> None:
    # SIGTERM to an idle lane whose Redis has gone: RQ raises StopRequested, its teardown's
    # register_death then raises ConnectionError in work()'s finally (replacing the stop), and
    # worker.lane.work takes that for an outage: it waits for Redis (OUTAGE_SECONDS, 600 s) and,
    # should Redis come back, works on.
    script = LANE.replace("while lane._reachable(connection):", "while False:")
    process = _lane_started(script, redis_server, tmp_path)
    try:
        time.sleep(1)  # in RQ's dequeue
        redis_server.stop()
        time.sleep(2)  # the dequeue fails and is retried
        process.send_signal(signal.SIGTERM)
        began = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        took = time.monotonic() - began
        print(f"lane asked to stop with Redis gone: {'exited' if process.poll() is not None else 'still running'} "
              f"after {took:.1f} s")
        assert process.poll() is not None, "a lane asked to stop with Redis unreachable still ran 30 s later"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
