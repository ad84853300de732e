"""A grading process's start is timed in the time it could have run (app/grading/processes.py
``ready_in_time``): one starved of the CPU by a busy host gets ready late and is still taken (with
a wall-clock bound the app exited at startup, code 3, beside a busy test run), while one that
cannot run at all, or spins past the wall limit, is given up on. Real processes, a real hog."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from app.cpus import run_delay
from app.grading.processes import ready_in_time
from tests.support import cpu_hog

pytestmark = pytest.mark.slow

CPU = cpu_hog.first_cpu()
CPU_NEEDED = 0.2  # seconds of CPU the starved child burns before it says it is ready


def _burn_then_send(conn: Connection, seconds: float) -> None:
    os.sched_setaffinity(0, {CPU})
    os.nice(19)
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    conn.send("ready")


def _spin(conn: Connection) -> None:
    os.sched_setaffinity(0, {CPU})
    os.nice(19)
    while True:
        pass


@pytest.fixture
def hog() -> Iterator[subprocess.Popen]:
    """A busy loop at nice 0 on the child's only CPU (in this session, so the nice values weigh
    against each other where the kernel groups sessions)."""
    process = cpu_hog.hog()
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _started(target, *args) -> tuple[multiprocessing.Process, Connection]:
    ours, theirs = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    theirs.close()
    return process, ours


def test_a_starved_child_that_gets_ready_is_taken_after_the_timeout_in_wall_time(hog):
    child, conn = _started(_burn_then_send, CPU_NEEDED)
    timeout = 2.0
    try:
        started = time.monotonic()
        assert ready_in_time(conn, child.pid, timeout=timeout, wall_limit=300.0)
        waited = time.monotonic() - started
        assert conn.recv() == "ready"
        # the case this is about: a wall-clock timeout of the same length would have given up
        assert waited > timeout, f"the child was not starved (ready after {waited:.1f} s)"
        assert run_delay(child.pid) > 0
    finally:
        child.kill()
        child.join()


def test_a_child_that_cannot_run_is_given_up_on_after_the_timeout():
    child, conn = _started(_burn_then_send, 60.0)
    os.kill(child.pid, signal.SIGSTOP)  # not runnable: its wait counts
    try:
        assert not ready_in_time(conn, child.pid, timeout=0.5, wall_limit=300.0)
    finally:
        child.kill()
        child.join()


def test_a_starved_child_that_spins_is_given_up_on_at_the_wall_limit(hog):
    child, conn = _started(_spin)
    try:
        started = time.monotonic()
        assert not ready_in_time(conn, child.pid, timeout=300.0, wall_limit=1.0)
        assert time.monotonic() - started < 300.0
    finally:
        child.kill()
        child.join()


def test_a_child_that_dies_before_it_is_ready_is_seen_at_once():
    child, conn = _started(_burn_then_send, 60.0)
    child.kill()
    child.join()
    # the end of its pipe is something to read: the caller's recv raises EOFError
    assert ready_in_time(conn, child.pid, timeout=300.0, wall_limit=300.0)
    with pytest.raises(EOFError):
        conn.recv()
