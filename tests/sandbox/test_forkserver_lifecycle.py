"""The fork server's life: started on first use from whichever thread needs it, it outlives that
thread; it is single-threaded; it goes with the sandbox at stop; and the sandbox reports it."""

from __future__ import annotations

import threading
import time

import pytest

from app.sandbox.launch import SandboxFault
from app.sandbox.plan import build_plan
from app.sandbox.pool import get_sandbox
from app.sandbox.tiers import get_tier
from app.sandbox.tiers.gvisor_lane import GvisorZygote
from app.sandbox.zygote import Zygote
from tests.sandbox.tiers import tier_settings

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

_HONEST = "def f():\n    import numpy as np\n    return int(np.arange(10).sum())\n"


def _zygote_of(box: object) -> Zygote | GvisorZygote:
    zygotes = list(box._forkservers._zygotes.values())  # type: ignore[attr-defined]
    assert len(zygotes) == 1
    return zygotes[0]


def test_a_zygote_started_by_a_short_lived_thread_outlives_it(fork_tier: str) -> None:
    # A sandbox of its own (distinct settings), so that its first case starts its zygote; no
    # warm pool, so that the grading thread starts the zygote itself.
    box = get_sandbox(tier_settings(fork_tier, warm_pool_size=0, wall_seconds=4.0))
    runs = []
    grader = threading.Thread(target=lambda: runs.append(box.run(_HONEST, "f", [], profile="numpy")))
    grader.start()
    grader.join()
    zygote = _zygote_of(box)
    time.sleep(0.5)  # bubblewrap would follow a dead starting thread out within this
    assert zygote.alive()
    later = box.run(_HONEST, "f", [], profile="numpy")
    assert [r.status for r in (*runs, later)] == ["finished", "finished"]
    assert later.extra["launcher"] == "forkserver" and _zygote_of(box) is zygote
    if isinstance(zygote, GvisorZygote):  # its tasks are gVisor's: as it reported at its last fork
        assert zygote.threads == 1
    else:
        with open(f"/proc/{zygote.pid}/status") as f:
            assert "Threads:\t1\n" in f.read()
    status = box.status()
    assert status["launcher"] == "forkserver"
    box.shutdown()
    assert not zygote.alive()


def test_a_zygote_that_does_not_answer_in_time_is_a_sandbox_fault(fork_tier: str) -> None:
    """A start that times out (a loaded host) is a SandboxFault, which the pool's refill thread and
    the fork servers catch and retry later; any other error would end that thread for good."""
    sb = tier_settings(fork_tier, start_timeout_seconds=0.001)
    plan = build_plan(sb.python, sb.packages)
    isolation, _, extra = str(fork_tier).partition("+")
    try:
        with pytest.raises(SandboxFault, match="fork server failed to start"):
            get_tier(isolation).fork_server(plan, sb, extra == "seccomp", "bare", None)
    finally:
        plan.cleanup()
