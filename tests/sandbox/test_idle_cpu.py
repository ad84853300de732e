"""Cases in an idle CPU group (``SANDBOX__IDLE_CPU``): they run only on CPU that nothing beside
them wants, so a busy worker's cases never delay the inline grading of the API next to them. The
checks: the group is really idle, cases join it (every tier's start goes through ``procs_files``),
a case in it yields a shared CPU to an ordinary process, and nothing of it is left after stop."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.sandbox.cgroups import CgroupHost
from app.sandbox.stop import remove_stale_leftovers
from tests.support.cpu_hog import hog
from tests.support.server import ROOT

pytestmark = pytest.mark.slow

def _host(idle_cpu: bool) -> Iterator[CgroupHost]:
    found = CgroupHost.detect(idle_cpu=idle_cpu)
    if found is None:
        pytest.fail("no writable cgroup tree: run the tests as root on a host with cgroups")
    yield found
    found.close()


@pytest.fixture
def idle_host() -> Iterator[CgroupHost]:
    yield from _host(True)


@pytest.fixture
def ordinary_host() -> Iterator[CgroupHost]:
    yield from _host(False)


def _cpu_group(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            return path
    raise AssertionError("no cpu group")


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _share_of_case(host: CgroupHost, seconds: float = 1.5) -> float:
    """The case's share of one CPU it contends for with an ordinary process of this service."""
    group = host.create()
    case = hog(procs_files=group.procs_files)
    other = hog()
    try:
        time.sleep(0.3)
        start = (_cpu_ticks(case.pid), _cpu_ticks(other.pid))
        time.sleep(seconds)
        used = (_cpu_ticks(case.pid) - start[0], _cpu_ticks(other.pid) - start[1])
    finally:
        for process in (case, other):
            process.kill()
            process.wait()
        group.remove()
    assert sum(used) > 0
    return used[0] / sum(used)


def test_the_idle_group_is_marked_idle_and_cases_join_it(idle_host: CgroupHost) -> None:
    assert idle_host.idle_group is not None, "this host's kernel and cgroups allow an idle group"
    assert (idle_host.idle_group / "cpu.idle").read_text().strip() == "1"
    assert "idle CPU" in idle_host.name
    group = idle_host.create()
    case = hog(procs_files=group.procs_files)
    try:
        assert idle_host.idle_group.name in _cpu_group(case.pid)
    finally:
        case.kill()
        case.wait()
        group.remove()


def test_an_idle_case_yields_a_shared_cpu(idle_host: CgroupHost) -> None:
    # (weights 3 against 1024: the ordinary process takes nearly all of it)
    assert _share_of_case(idle_host) < 0.1


def test_without_the_setting_a_case_shares_the_cpu_evenly(ordinary_host: CgroupHost) -> None:
    # The control for the test above: the same measurement, no idle group.
    assert ordinary_host.idle_group is None
    assert _share_of_case(ordinary_host) > 0.3


def test_stop_removes_the_idle_group(idle_host: CgroupHost) -> None:
    group_dir = idle_host.idle_group
    assert group_dir is not None
    case_group = idle_host.create()
    straggler = hog(procs_files=case_group.procs_files)
    idle_host.close()
    assert straggler.wait(timeout=10) == -9  # close kills what is left in the service's groups
    assert not group_dir.exists()


def test_a_killed_services_idle_group_is_removed_at_the_next_start(tmp_path: Path) -> None:
    # A service killed without its clean-up: the next one to start removes its idle group.
    script = ("import os, sys; from app.sandbox.cgroups import CgroupHost; "
              "h = CgroupHost.detect(idle_cpu=True); print(h.idle_group, flush=True); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    left = Path(done.stdout.strip())
    assert left.is_dir(), done.stderr
    later = CgroupHost.detect(idle_cpu=True)
    assert later is not None
    try:
        assert not left.exists()
    finally:
        later.close()


def test_the_sandbox_runs_its_cases_in_the_idle_group() -> None:
    # The whole path, in a process of its own (the cgroup host is one per process): a real case
    # run through the sandbox with the setting on reports where its launcher put it.
    script = """
import json, os
from app.sandbox.pool import get_sandbox
from app.settings import SandboxSettings
box = get_sandbox(SandboxSettings(warm_pool_size=0, tier="bubblewrap", python_guards=False, idle_cpu=True))
source = "def f():\\n    import time\\n    time.sleep(1.5)\\n    return 1\\n"
import threading, time
seen = []
ended = threading.Event()
def look():
    # until a process of the case shows in the group, or the case ends (a loaded machine may
    # take seconds to start it: a fixed moment to look would miss it)
    while not ended.is_set():
        cgroups = box._cgroups  # made as the first case starts
        group = cgroups.idle_group if cgroups is not None else None
        procs = open(group / "cgroup.procs").read().split() if group else []
        if procs:
            seen.append(procs)
            return
        time.sleep(0.05)
t = threading.Thread(target=look); t.start()
run = box.run(source, "f", [], profile="numpy")
ended.set()
t.join()
print(json.dumps({"status": run.status, "limits": box.limits, "in_idle_group": seen[0] if seen else None}))
box.shutdown()
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "finished", (report, done.stderr[-2000:])
    assert "idle CPU" in report["limits"]
    assert report["in_idle_group"], "no process of the running case was in the idle group"


def test_a_killed_services_idle_group_is_removed_by_a_start_without_the_setting() -> None:
    # The start-up clean-up (remove_stale_leftovers) and a service restarted with the setting off
    # detect without idle_cpu: the dead service's idle group in the cpu hierarchy must go too.
    script = ("import os; from app.sandbox.cgroups import CgroupHost; "
              "h = CgroupHost.detect(idle_cpu=True); print(h.idle_group, flush=True); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    left = Path(done.stdout.strip())
    assert left.is_dir(), done.stderr
    try:
        remove_stale_leftovers()
        assert not left.exists(), "a dead service's idle CPU group was left behind"
    finally:
        with contextlib.suppress(OSError):
            left.rmdir()
