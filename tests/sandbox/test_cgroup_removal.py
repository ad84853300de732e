"""A case's control group after the case: emptied before the verdict (no task of it survives),
its directories removed afterwards by the remover thread, never left behind."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.sandbox.cgroups import CaseCgroup, CgroupHost, drain_removals, shared_cgroup_host
from app.sandbox.pool import get_sandbox
from app.settings import SandboxSettings

pytestmark = pytest.mark.slow


@pytest.fixture
def host() -> CgroupHost:
    found = CgroupHost.detect()
    if found is None:
        pytest.fail("no writable cgroup tree: run the tests as root on a host with cgroups")
    yield found
    found.close()


def _case_dirs(host: CgroupHost) -> list[Path]:
    return [d for parent in host.parents.values() for d in parent.iterdir() if d.is_dir()]


@contextlib.contextmanager
def _stray_in(group: CaseCgroup) -> Iterator[subprocess.Popen[bytes]]:
    """A process placed in every directory of the group, as one a case left behind."""
    stray = subprocess.Popen(["sleep", "60"])
    try:
        for procs in group.procs_files:
            Path(procs).write_text(str(stray.pid))
        yield stray
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()


def test_empty_kills_what_the_case_left_and_leaves_the_directories(host: CgroupHost) -> None:
    group = host.create()
    with _stray_in(group) as stray:
        assert group.pids() == [stray.pid]
        assert group.empty() is True
        assert stray.wait(timeout=5) == -9
        assert group.pids() == []
        assert all(d.is_dir() for d in group.dirs.values())  # removal is not its job
    group.remove_later()
    assert drain_removals(10)
    assert not any(d.exists() for d in group.dirs.values())


def test_remove_later_kills_a_task_that_entered_after_the_case(host: CgroupHost) -> None:
    """The remover never leaves a group because something is in it: it kills, then removes."""
    group = host.create()
    with _stray_in(group) as stray:
        group.remove_later()
        assert drain_removals(10)
        assert stray.wait(timeout=5) == -9
        assert not any(d.exists() for d in group.dirs.values())


def test_cases_leave_no_group_behind() -> None:
    shared = shared_cgroup_host()
    if shared is None:
        pytest.fail("no writable cgroup tree: run the tests as root on a host with cgroups")
    before = set(_case_dirs(shared))  # other sandboxes of this process may hold warm children
    box = get_sandbox(SandboxSettings(warm_pool_size=1, tier="bubblewrap", python_guards=False))
    # Each case leaves a forked process behind that would sleep on.
    source = "def f(n):\n    import os, time\n    if os.fork() == 0:\n        time.sleep(30)\n    return n\n"
    runs = [box.run(source, "f", [i], profile="numpy") for i in range(4)]
    for i, run in enumerate(runs):
        assert run.status == "finished" and run.final["result"]["value"] == i, (run.status, run.fault)
        assert run.extra.get("cgroup_emptied") is True, run.extra
    box.shutdown()  # destroys the warm child; its group goes the same way
    assert drain_removals(10)
    deadline = time.monotonic() + 5
    while set(_case_dirs(shared)) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_case_dirs(shared)) - before == set()
