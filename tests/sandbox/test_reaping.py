"""Nothing the sandbox kills stays a zombie. gVisor's gofer and sandbox processes are runsc's
children; killed together with runsc they pass to the nearest subreaper, which is the worker
itself when it is its container's pid 1 (or made itself a subreaper). The service reaps those it
killed (by pidfd, so never a pid reused by someone else) and the zombies of runsc's helpers that
passed to it, never a process it started itself (its Popen reaps that).

Each check runs in a child Python that makes itself a subreaper, as a container's pid 1 is: the
test process itself must not become one (orphans of every other test would come to it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.sandbox.tiers import offered_tiers
from tests.support.server import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.serial]

needs_gvisor = pytest.mark.skipif(not any(t.startswith("gvisor") for t in offered_tiers()),
                                  reason="runsc does not run here (needs root and gVisor)")

_SCRIPT = textwrap.dedent("""
    import ctypes, json, os, sys, time
    PR_SET_CHILD_SUBREAPER = 36
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    import app.sandbox.tiers.runsc as runsc
    if sys.argv[1] == "no-reaping":  # what the tier did before it reaped: the check must see it
        runsc._reap = lambda pidfds: 0
        runsc.reap_orphans = lambda: 0
    from app.sandbox.pool import Sandbox
    from tests.sandbox.tiers import tier_settings

    def zombie_children():
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(int(entry))
        return found

    box = Sandbox(tier_settings("gvisor+seccomp", warm_pool_size=0))
    runs = [box.run("def f(n):\\n    return n * 2\\n", "f", [i]) for i in range(3)]
    box.shutdown()
    time.sleep(0.5)  # anything still exiting has exited
    print(json.dumps({"statuses": [r.status for r in runs], "zombies": len(zombie_children())}))
""")


def _run(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_gvisor
def test_gvisor_cases_leave_no_zombie_with_the_worker_as_subreaper() -> None:
    seen = _run("reaping")
    assert seen["statuses"] == ["finished"] * 3, seen
    assert seen["zombies"] == 0, seen


@needs_gvisor
def test_without_reaping_the_same_cases_leave_zombies() -> None:
    """The check above can fail: with the reaping taken out, gVisor's processes stay zombies of
    the subreaper (several per case)."""
    seen = _run("no-reaping")
    assert seen["statuses"] == ["finished"] * 3, seen
    assert seen["zombies"] >= 3, seen
