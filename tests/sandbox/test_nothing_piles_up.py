"""Many cases, honest and hostile, leave the service as they found it: no open fd, no case or
staging directory, no held uid, no case control group, no zombie child more than before. Counted
on the service process itself, in each isolation tier the host offers, after a warm-up (the warm
pool, the fork server and the tier probe hold their own, for as long as the sandbox lives)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import pytest

from app.sandbox.cgroups import drain_removals, shared_cgroup_host
from app.sandbox.owners import CASE_PREFIX, OWNER_FILE, STAGE_PREFIX, current_owner
from app.sandbox.pool import Sandbox
from tests.sandbox.tiers import offered_tiers, tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

CASES = {
    "honest": ("def f(n):\n    return n * 2\n", True),
    "forks_and_sleeps": ("def f(n):\n    import os, time\n    if os.fork() == 0:\n        time.sleep(60)\n"
                         "    return n\n", True),
    "writes_tmp": ("def f(n):\n    with open('/tmp/junk', 'wb') as f:\n        f.write(b'x' * (1 << 20))\n"
                   "    return n\n", True),
    "spins": ("def f(n):\n    while True:\n        pass\n", False),
    "floods_output": ("def f(n):\n    while True:\n        print('x' * 65536)\n", False),
    "opens_fds": ("def f(n):\n    fds = []\n    while True:\n        fds.append(open('/dev/null'))\n", False),
}
ROUNDS = 3


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _dirs() -> int:
    """This process's case and staging directories (other tests may run sandboxes beside)."""
    count = 0
    for entry in os.scandir(tempfile.gettempdir()):
        if entry.name.startswith((CASE_PREFIX, STAGE_PREFIX)):
            with contextlib.suppress(OSError):
                count += Path(entry.path, OWNER_FILE).read_text() == current_owner()
    return count


def _zombie_children() -> int:
    me, count = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += fields[0] == "Z" and int(fields[1]) == me
    return count


def _case_groups() -> int:
    host = shared_cgroup_host()
    return 0 if host is None else sum(1 for p in host.parents.values() for d in p.iterdir() if d.is_dir())


def _counts(box: Sandbox) -> dict[str, int]:
    assert drain_removals(30)
    time.sleep(0.3)  # a killed task of the last case may still be exiting
    return {"fds": _fds(), "dirs": _dirs(), "uids_held": len(box._uids._held) if box._uids else 0,
            "zombie_children": _zombie_children(), "case_groups": _case_groups()}


@pytest.mark.parametrize("tier", [t for t in offered_tiers() if t in ("gvisor+seccomp", "bubblewrap+seccomp")])
def test_many_cases_leave_nothing_behind(tier: str) -> None:
    box = Sandbox(tier_settings(tier, warm_pool_size=1, wall_seconds=3.0, cpu_seconds=2.0))
    try:
        box.run(CASES["honest"][0], "f", [1])  # warm-up: probe, pool, fork server
        before = _counts(box)
        for _ in range(ROUNDS):
            for name, (source, finishes) in CASES.items():
                run = box.run(source, "f", [3])
                assert run.status != "sandbox_fault", (name, run.fault)
                if finishes:  # (a fork may be refused by the filter); the hostile ones end at their limits
                    assert run.status == "finished", (name, run.status, run.final)
        after = _counts(box)
    finally:
        box.shutdown()
    # The warm pool refills in the background: one warm child may be starting at either count
    # (an fd or two of it, a directory); nothing may grow with the number of cases run.
    slack = {"fds": 4, "dirs": 1, "uids_held": 1, "zombie_children": 0, "case_groups": 1}
    grown = {k: after[k] - before[k] for k in before if after[k] - before[k] > slack[k]}
    assert not grown, (before, after)
