"""A gVisor lane asked whether it is alive while it forks cases (tiers/gvisor_lane.py): any thread
may ask (the pool, of a warm child's fork server; the fork servers, before each fork), and a fork
request's answer may then be waiting unread. Found: a thread that asked in that moment took the
healthy lane for dead, the lane was stopped with every case running in it, and those cases ended
as sandbox faults (in the stack tests, now and then an honest job's result)."""

from __future__ import annotations

import threading
import time

import pytest

from app.sandbox.pool import get_sandbox
from app.sandbox.tiers.gvisor_lane import GvisorZygote
from tests.sandbox.isolation_support import observed
from tests.sandbox.tiers import LaunchedTier, offered_tiers, tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

LANES = [LaunchedTier(t, "forkserver") for t in offered_tiers() if t == "gvisor+seccomp"]
HONEST = "def attack():\n    import numpy as np\n    return int(np.arange(10).sum())\n"


@pytest.mark.skipif(not LANES, reason="runsc does not run here (needs root and gVisor)")
@pytest.mark.parametrize("tier", LANES, ids=lambda t: t.id)
def test_a_lane_that_forks_is_never_taken_for_dead(tier: LaunchedTier) -> None:
    box = get_sandbox(tier_settings(tier, warm_pool_size=0))  # no warm pool: every case is a fork request
    box.run(HONEST, "attack", [], profile="numpy")
    t = box.tier()
    lane = box._forkservers._zygotes[(t.isolation, t.seccomp, "numpy")]
    assert isinstance(lane, GvisorZygote)
    runsc = lane.pid
    stop = threading.Event()
    asked, dead = [0], []

    def ask() -> None:
        while not stop.is_set():
            asked[0] += 1
            if not lane.alive():
                dead.append(time.monotonic())
            time.sleep(0.0002)

    askers = [threading.Thread(target=ask) for _ in range(2)]
    for thread in askers:
        thread.start()
    try:
        runs = [box.run(HONEST, "attack", [], profile="numpy") for _ in range(20)]
    finally:
        stop.set()
        for thread in askers:
            thread.join()
    assert asked[0] > 100
    assert not dead, f"the lane was taken for dead {len(dead)} times of {asked[0]}"
    assert [r.status for r in runs] == ["finished"] * 20 and all(observed(r) == 45 for r in runs)
    assert box._forkservers._zygotes[(t.isolation, t.seccomp, "numpy")] is lane and lane.pid == runsc and lane.alive()
