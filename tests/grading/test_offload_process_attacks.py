"""Attacks on the grading processes (app/grading/processes.py), against a real server whose grading
children load a test extension (tests/support/grading_probe_extension.py) that can hang, sleep or
ask for too much memory on command:

- a child killed with SIGKILL mid-item: that request gets an unscored fault (no 500, no
  traceback), the next request is graded as usual, the dead child is reaped (no zombie in /proc)
  and replaced;
- a memory bomb: refused by the child's address-space limit, an unscored fault, the child stays;
- a client that disconnects while its item is in a child: the child finishes it and serves the
  next requests (none replaced, nothing logged);
- a stop with items in flight, gracefully or by SIGKILL of the server: no grading process, fork
  server included, outlives it;
- the pool closed with a call in flight: the call fails as a dead child, every child is reaped."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.grading.processes import ADDRESS_SPACE_BYTES, NICENESS, GradingProcessDied, GradingProcesses
from app.settings import Settings
from tests.support import grading_probe_extension as probe
from tests.support.oracle import right, synthetic_tasks
from tests.support.proc_tree import descendants as _descendants
from tests.support.proc_tree import stat as _stat
from tests.support.server import logged_server, stop_process

ENV = {"SCALING_GRADER_EXTENSIONS": probe.__name__}
pytestmark = pytest.mark.slow


def _zombies(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] == "Z"}


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still in /proc (a zombie included: it has not been reaped)."""
    return {pid for pid in pids if _stat(pid) is not None}


def _until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _grade(url: str, completion: str, timeout: float = 120) -> httpx.Response:
    return httpx.post(url + "/v1/grade", json={"task_id": probe.TASK_ID, "completion": completion}, timeout=timeout)


def _in_background(fn: Callable[[], httpx.Response]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _children_pids(url: str, n: int, tmp_path: Path) -> set[int]:
    """The grading processes' pids, from ``n`` items graded at once (each child takes one)."""
    files = [tmp_path / f"who-{i}-{time.monotonic_ns()}" for i in range(n)]
    calls = [_in_background(lambda f=f: _grade(url, f"sleep 1.5 {f}")) for f in files]
    for thread, out in calls:
        thread.join(120)
        assert isinstance(out[0], httpx.Response) and out[0].json()["reward"] == 1.0, out
    return {int(f.read_text()) for f in files}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    log = tmp_path / "server.log"
    with logged_server(ENV, log) as (url, process):
        yield url, process.pid, log


def test_a_child_killed_mid_item_costs_that_item_alone_and_is_replaced(server, tmp_path: Path) -> None:
    url, server_pid, log = server
    children = _children_pids(url, 2, tmp_path)
    assert len(children) == 2 and children <= _descendants(server_pid)

    busy = tmp_path / "busy"
    thread, out = _in_background(lambda: _grade(url, f"hang {busy}"))
    _until(busy.exists, 60, "the item to reach a child")
    victim = int(busy.read_text())
    assert victim in children
    os.kill(victim, signal.SIGKILL)
    thread.join(60)
    answer = out[0]
    assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
    body = answer.json()
    assert (body["outcome"], body["reward"]) == ("error", 0.0)  # unscored: never a reward
    assert "Traceback" not in answer.text

    # reaped (gone from /proc, not a zombie), and the next requests are graded as usual
    _until(lambda: not _alive({victim}), 30, "the killed child to be reaped")
    synthetic = synthetic_tasks(1)[0].id
    heavy = "Reasoning. " * 900 + right(synthetic)  # past the on-loop size: graded in a child
    graded = httpx.post(url + "/v1/grade", json={"task_id": synthetic, "completion": heavy}, timeout=120).json()
    assert (graded["outcome"], graded["reward"]) == ("correct", 1.0)
    now = _children_pids(url, 2, tmp_path)
    assert len(now) == 2 and victim not in now and now - children  # one replaced, the other kept
    assert not _zombies(_descendants(server_pid))
    assert "Traceback" not in log.read_text()


def test_a_memory_bomb_is_an_unscored_fault_and_the_child_stays(server, tmp_path: Path) -> None:
    url, server_pid, _ = server
    children = _children_pids(url, 2, tmp_path)
    for pid in children:  # the limits the children run under
        limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
        address_space = next(line for line in limits if line.startswith("Max address space"))
        assert address_space.split()[3:5] == [str(ADDRESS_SPACE_BYTES)] * 2
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000"
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, server_pid) + NICENESS)
    bombed = _grade(url, "bomb")
    assert bombed.status_code == 200 and (bombed.json()["outcome"], bombed.json()["reward"]) == ("error", 0.0)
    assert "Traceback" not in bombed.text
    assert _children_pids(url, 2, tmp_path) == children  # refused inside the child: none died
    assert _grade(url, "pid").json()["reward"] == 1.0


def test_a_client_gone_while_its_item_is_in_a_child_leaves_the_child_serving(server, tmp_path: Path) -> None:
    url, server_pid, log = server
    children = _children_pids(url, 2, tmp_path)
    started = tmp_path / "started"
    with pytest.raises(httpx.ReadTimeout):  # the client hangs up while the child grades
        _grade(url, f"sleep 3 {started}", timeout=1.0)
    assert int(started.read_text()) in children
    # the item runs to its end in its child (3 s from its start); then both children serve,
    # neither replaced
    time.sleep(max(0.0, started.stat().st_mtime + 3.5 - time.time()))
    assert _children_pids(url, 2, tmp_path) == children
    assert not _zombies(_descendants(server_pid))
    assert "Traceback" not in log.read_text()


def test_a_graceful_stop_with_items_in_flight_leaves_no_process_behind(tmp_path: Path) -> None:
    with logged_server(ENV, tmp_path / "server.log") as (url, process):
        files = [tmp_path / f"inflight-{i}" for i in range(2)]
        calls = [_in_background(lambda f=f: _grade(url, f"sleep 2 {f}")) for f in files]
        _until(lambda: all(f.exists() for f in files), 60, "both items to reach a child")
        everything = _descendants(process.pid)
        assert {int(f.read_text()) for f in files} <= everything
        process.terminate()  # uvicorn lets requests in progress finish, then the lifespan ends
        for thread, out in calls:
            thread.join(60)
            assert isinstance(out[0], httpx.Response) and out[0].json()["reward"] == 1.0, out
        process.wait(60)
        _until(lambda: not _alive(everything), 30, "every grading process and the fork server to end")


def test_a_killed_server_takes_its_grading_processes_with_it(tmp_path: Path) -> None:
    with logged_server(ENV, tmp_path / "server.log") as (url, process):
        files = [tmp_path / f"hung-{i}" for i in range(2)]
        calls = [_in_background(lambda f=f: _grade(url, f"hang {f}", timeout=30)) for f in files]
        _until(lambda: all(f.exists() for f in files), 60, "both items to reach a child")
        everything = _descendants(process.pid)
        busy = {int(f.read_text()) for f in files}
        assert busy <= everything
        process.kill()  # no lifespan, no atexit: the children must notice on their own
        process.wait(10)
        _until(lambda: not _alive(everything), 30, "the orphaned grading processes to end")
        stop_process(process)
        for thread, _ in calls:
            thread.join(60)


def test_closing_the_pool_with_a_call_in_flight_fails_the_call_and_reaps_every_child(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SCALING_GRADER_EXTENSIONS", probe.__name__)
    pool = GradingProcesses(Settings(), 2)
    pool.start()
    children = set(pool.pids())
    marker = tmp_path / "in-flight"

    async def scenario() -> BaseException | None:
        call = asyncio.ensure_future(asyncio.to_thread(pool.call, probe.hang_call, str(marker)))
        await asyncio.to_thread(_until, marker.exists, 60, "the call to reach a child")
        await asyncio.to_thread(pool.close)
        try:
            await asyncio.wait_for(call, 30)
        except BaseException as exc:
            return exc
        return None

    failed = asyncio.run(scenario())
    assert isinstance(failed, GradingProcessDied), failed
    assert int(marker.read_text()) in children
    assert not _alive(children)  # killed and reaped (by the fork server), none a zombie
    with pytest.raises(GradingProcessDied):
        pool.call(abs, -1)  # a closed pool takes no more work
