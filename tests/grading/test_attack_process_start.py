"""Attack (fresh reviewer): a grading process's start is timed in the time it could run (its schedstat
run delay taken out of the wall time, app/grading/processes.py ``ready_in_time``, app/cpus.py
``run_delay``), bounded by a wall limit. Attacks: a schedstat that is missing, unreadable or
garbled; a pid that vanishes or is reused while the child's pipe stays open (a grandchild holds
it); run-delay readings that jump or go back; and, through the pool itself, children that never
get ready (asleep, spinning, spinning starved): the app's start must neither hang past its bounds
nor take a child that is not ready, and must leave no child behind. Real processes."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from app import cpus
from app.cpus import run_delay
from app.grading import processes
from app.grading.processes import ready_in_time
from tests.support.server import ROOT

pytestmark = pytest.mark.slow

FORK = multiprocessing.get_context("fork")


class _FakePath:
    """Stands in for pathlib.Path in app.cpus: every read gives ``text`` or raises ``error``."""

    text: str | bytes = ""
    error: BaseException | None = None

    def __init__(self, *_: object) -> None:
        pass

    def read_text(self) -> str:
        if self.error is not None:
            raise self.error
        if isinstance(self.text, bytes):
            return self.text.decode()  # UnicodeDecodeError for bytes that are not UTF-8
        return self.text


@pytest.mark.parametrize("text, error", [
    ("", None), ("12345", None), ("a b c", None), ("1 2.5e9 3", None), (b"1 \xff\xfe 3", None),
    ("", FileNotFoundError()), ("", PermissionError()), ("", ProcessLookupError()), ("", IsADirectoryError()),
])
def test_a_missing_unreadable_or_garbled_schedstat_reads_as_no_wait(
        monkeypatch: pytest.MonkeyPatch, text: str | bytes, error: BaseException | None) -> None:
    fake = type("P", (_FakePath,), {"text": text, "error": error})
    monkeypatch.setattr(cpus, "Path", fake)
    assert run_delay(os.getpid()) == 0.0


def _sleep_forever(conn: Connection) -> None:
    time.sleep(3600)


def _leave_a_grandchild_holding_the_pipe(conn: Connection) -> None:
    """Dies at once; a grandchild keeps the pipe's end open, so no EOF ever tells the parent."""
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    os._exit(0)


def _started(target) -> tuple[multiprocessing.Process, Connection]:
    ours, theirs = FORK.Pipe()
    process = FORK.Process(target=target, args=(theirs,), daemon=True)
    process.start()
    theirs.close()
    return process, ours


def _timed(conn: Connection, pid: int | None, timeout: float, wall_limit: float) -> tuple[bool, float]:
    began = time.monotonic()
    ready = ready_in_time(conn, pid, timeout, wall_limit)
    return ready, time.monotonic() - began


def test_without_a_readable_schedstat_the_start_is_timed_in_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpus, "Path", type("P", (_FakePath,), {"error": PermissionError()}))  # hidepid, gVisor
    child, conn = _started(_sleep_forever)
    try:
        ready, took = _timed(conn, child.pid, timeout=0.8, wall_limit=30.0)
        assert not ready and 0.7 <= took < 20.0, took  # (upper bounds: not hung, under any load)
    finally:
        child.kill()
        child.join()


def test_a_child_gone_with_its_pipe_held_open_elsewhere_is_given_up_on_at_the_timeout() -> None:
    """The child exits and is reaped (its pid free for reuse) while a grandchild holds the pipe:
    no EOF, no schedstat (or another process's): the timeout still ends the wait."""
    child, conn = _started(_leave_a_grandchild_holding_the_pipe)
    child.join()  # reaped: /proc/<pid> is gone or someone else's
    try:
        ready, took = _timed(conn, child.pid, timeout=0.8, wall_limit=30.0)
        assert not ready and took < 20.0, took
    finally:
        conn.close()


@pytest.mark.parametrize("reading", ["back", "jump", "starved"])
def test_run_delay_readings_that_go_back_or_jump_stay_within_the_bounds(
        monkeypatch: pytest.MonkeyPatch, reading: str) -> None:
    """A pid reused by another process reads that process's counter: smaller (back: counted as
    time it ran), or one that grows as fast as the wall clock (a starved stranger: the wall limit
    ends it), or one that jumped by hours at the first read after the start."""
    began = time.monotonic()
    calls = {"n": 0}

    def fake(pid: int) -> float:
        calls["n"] += 1
        if reading == "back":
            return 1000.0 if calls["n"] == 1 else 0.0
        if reading == "starved":
            return time.monotonic() - began
        return 0.0 if calls["n"] == 1 else 7200.0

    monkeypatch.setattr(processes, "run_delay", fake)
    child, conn = _started(_sleep_forever)
    try:
        ready, took = _timed(conn, child.pid, timeout=0.6, wall_limit=1.5)
        assert not ready, reading
        limit = 0.6 if reading == "back" else 1.5
        assert limit - 0.1 <= took < limit + 20.0, (reading, took)
    finally:
        child.kill()
        child.join()


def test_a_ready_child_is_taken_at_once_whatever_its_schedstat_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "run_delay", lambda pid: float("nan"))  # nonsense: never an error
    ours, theirs = FORK.Pipe()
    theirs.send(("ready", 1))
    ready, took = _timed(ours, 12345678, timeout=30.0, wall_limit=30.0)
    assert ready and took < 20.0  # not its 30 s timeout


# ------------------------------------------------------------------ the pool, end to end

_POOL_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    from app.grading import processes
    from app.grading.processes import GradingProcesses, GradingProcessDied
    from app.settings import Settings

    processes.START_TIMEOUT_SECONDS = float(sys.argv[1])
    processes.START_WALL_LIMIT = float(sys.argv[2])
    hog = None
    if sys.argv[3] == "hog":  # a busy loop at normal priority on the CPU the extension pins itself to
        cpu = min(os.sched_getaffinity(0))
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                               preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    pool = GradingProcesses(Settings(), 2)
    began = time.monotonic()
    try:
        pool.start()
        outcome = "started"
    except GradingProcessDied:
        outcome = "died"
    took = time.monotonic() - began
    if hog is not None:
        hog.kill()
    from multiprocessing import forkserver
    server = forkserver._forkserver._forkserver_pid
    children = []
    for task in os.listdir(f"/proc/{server}/task"):
        children += open(f"/proc/{server}/task/{task}/children").read().split()
    print(outcome, round(took, 2), len(children), flush=True)
""")

_EXTENSIONS = {
    "s36_sleeps": "import time\ntime.sleep(3600)\n",
    "s36_spins": "while True:\n    pass\n",
    "s36_spins_starved": "import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\nwhile True:\n    pass\n",
}


@pytest.mark.parametrize("extension, timeout, wall_limit, hog, most", [
    # (the bounds leave a loaded machine tens of seconds: what they tell apart is a start that
    # ends at its timeout or wall limit from one that waits out the other, 600 s)
    ("s36_sleeps", 1.0, 600.0, "", 30.0),  # asleep: its time counts, the timeout ends it
    # spinning, no hog of its own: the timeout ends it, or the wall limit if the host is busy
    ("s36_spins", 1.0, 4.0, "", 30.0),
    ("s36_spins_starved", 600.0, 2.0, "hog", 30.0),  # spinning starved: the wall limit ends it
])
def test_a_pool_whose_children_never_get_ready_fails_to_start_in_its_bounds_and_leaves_none(
        tmp_path: Path, extension: str, timeout: float, wall_limit: float, hog: str, most: float) -> None:
    (tmp_path / f"{extension}.py").write_text(_EXTENSIONS[extension])
    env = {**os.environ, "SCALING_GRADER_EXTENSIONS": extension,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    run = subprocess.run([sys.executable, "-c", _POOL_SCRIPT, str(timeout), str(wall_limit), hog or "-"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    outcome, took, left = run.stdout.split()
    assert outcome == "died", run.stdout  # a child that is not ready is never taken
    # the first child's wait (the fork server's start before it is not the child's), then no more
    assert float(took) < most, run.stdout
    assert left == "0", run.stdout  # the child given up on was killed and reaped
