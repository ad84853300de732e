"""Attacks on the memory of a gVisor lane (tiers/gvisor_lane.py, child/zygote.py): the cases of a
lane share one gVisor kernel, so a case that exhausts memory must end alone, by its leader's count
of what it holds (verdict ``memory``, or the verdict its own limits give it first), while an
honest case of another tenant runs beside it in the same lane and passes, and the lane (the same
runsc process, the same zygote) goes on. Each attack tries a way to hold memory: many allocating
processes, one, mappings touched page by page, the size-capped file systems, forks faster than
the leader looks, pages of a shared mapping that no process has resident, and what no process
holds: SysV shared memory and semaphore sets (counted), an unlinked memory file (refused)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.graders.impl_verdict import judge_case
from app.sandbox.executor import CaseRun
from app.sandbox.pool import Sandbox, get_sandbox
from app.sandbox.tiers.gvisor_lane import GvisorZygote
from app.tasks.impl.spec import Case
from tests.sandbox.attacks import code
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LaunchedTier, offered_tiers, tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

LANES = [LaunchedTier(t, "forkserver") for t in offered_tiers() if t == "gvisor+seccomp"]
needs_lanes = pytest.mark.skipif(not LANES, reason="runsc does not run here (needs root and gVisor)")

CASE_MEMORY = 512 * 1024**2
# Room for the attacks to reach their limits: each process may use 10 s of CPU (gVisor charges
# page faults to the faulting task) and 512 MiB of address space; the case 512 MiB of memory.
LIMITS = {"cpu_seconds": 10.0, "wall_seconds": 20.0, "case_memory_bytes": CASE_MEMORY,
          "address_space_bytes": 512 * 1024**2, "max_processes": 16}

# The neighbour: another tenant's honest case, running while the attack does.
HONEST = code("""
    def attack():
        import time
        import numpy as np
        time.sleep(3.0)
        return int(np.arange(10).sum())
    """)
NEIGHBOUR_CASE = Case(args=(), expected=45)

# Every process (the runner and 14 forks) allocates 32 MiB at a time until it is stopped.
FORK_AND_ALLOCATE = code("""
    import os
    def attack():
        for _ in range(14):
            if os.fork() == 0:
                break
        hoard = []
        while True:
            hoard.append(bytearray(32 << 20))
    """)
SINGLE_PROCESS = code("""
    def attack():
        hoard = []
        while True:
            hoard.append(bytearray(16 << 20))
    """)
# Anonymous mappings touched a page at a time, in every process.
MMAP_AND_TOUCH = code("""
    import mmap, os
    def attack():
        for _ in range(14):
            if os.fork() == 0:
                break
        maps = []
        while True:
            m = mmap.mmap(-1, 64 << 20)
            for off in range(0, 64 << 20, 4096):
                m[off] = 1
            maps.append(m)
    """)
# /tmp and /dev/shm filled from every process: the size caps stop them (ENOSPC), whoever writes.
FILL_TMPFS = code("""
    import os
    def attack():
        me = 0
        for i in range(1, 8):
            if os.fork() == 0:
                me = i
                break
        full = 0
        for where in ('/tmp', '/dev/shm'):
            try:
                for n in range(1000):
                    with open(f'{where}/fill-{me}-{n}', 'wb') as f:
                        f.write(b'x' * (4 << 20))
            except OSError:
                full += 1
        if me:
            import time
            time.sleep(2)
            os._exit(0)
        return ['full'] * full
    """)
# A fork chain: each process forks the next at once and then takes 64 MiB in one allocation, so
# that all of them hold their memory within a few milliseconds, faster than the leader looks.
FAST_FORKS = code("""
    import os
    def attack():
        for _ in range(14):
            if os.fork():
                break
        hoard = []
        while True:
            hoard.append(b'y' * (64 << 20))
    """)
# Pages of a shared mapping filled by one process and then unmapped by it: the forks that hold
# the mapping have none of its pages resident, and the pages stay.
SHARED_MAPPING = code("""
    import mmap, os, time
    def attack():
        holders = 0
        while True:
            m = mmap.mmap(-1, 256 << 20, mmap.MAP_SHARED)
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            holders += 1
            for off in range(0, 256 << 20, 4096):
                m[off] = 1
            m.close()
    """)
SYSV_SHM = code("""
    import ctypes
    def attack():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmdt.argtypes = [ctypes.c_void_p]
        made = 0
        while True:
            shmid = libc.shmget(0, 128 << 20, 0o1600)
            if shmid < 0:
                return ['shmget refused', made]
            at = libc.shmat(shmid, None, 0)
            ctypes.memset(at, 1, 128 << 20)
            libc.shmdt(at)
            made += 1
    """)
# Semaphore sets of 32000 each: gVisor's kernel memory that no process of the case holds (1000
# sets took 169 MiB of a lane's group).
SYSV_SEMAPHORES = code("""
    import ctypes
    def attack():
        libc = ctypes.CDLL(None, use_errno=True)
        made = 0
        while made < 32000:
            if libc.semget(0, 32000, 0o1600) < 0:
                return ['semget refused', made, ctypes.get_errno()]
            made += 1
        return made
    """)
MEMFD = code("""
    import os
    def attack():
        try:
            fd = os.memfd_create('hoard')
        except OSError as exc:
            return 'refused:' + type(exc).__name__
        for _ in range(16):
            os.write(fd, b'z' * (1 << 20))
        return 'memfd'
    """)

ATTACKS: dict[str, tuple[str, set[str]]] = {
    "fork_and_allocate": (FORK_AND_ALLOCATE, {"memory"}),
    # one process meets its address-space limit (MemoryError) before the case's allowance; under
    # gVisor its page faults may spend its CPU time first
    "single_process": (SINGLE_PROCESS, {"memory", "timeout"}),
    "mmap_and_touch": (MMAP_AND_TOUCH, {"memory"}),
    "fill_tmpfs": (FILL_TMPFS, {"wrong"}),
    "fast_forks": (FAST_FORKS, {"memory"}),
    "shared_mapping": (SHARED_MAPPING, {"memory"}),
    "sysv_shm": (SYSV_SHM, {"memory"}),
    "sysv_semaphores": (SYSV_SEMAPHORES, {"memory"}),
    "memfd": (MEMFD, {"wrong"}),
}


def _lane_box(tier: LaunchedTier) -> Sandbox:
    return get_sandbox(tier_settings(tier, guards=False, **LIMITS))


def _lane(box: Sandbox) -> GvisorZygote:
    tier = box.tier()
    zygote = box._forkservers._zygotes.get((tier.isolation, tier.seccomp, "numpy"))
    assert isinstance(zygote, GvisorZygote) and zygote.alive(), "no lane serves this tier"
    return zygote


def against_a_neighbour(box: Sandbox, source: str) -> tuple[CaseRun, dict[str, Any], CaseRun]:
    """Run the attack while an honest case runs in the same lane; (attack's run, its verdict,
    the neighbour's run). Checks that the two overlapped."""
    got: dict[str, Any] = {}

    def neighbour() -> None:
        began = time.monotonic()
        got["run"] = box.run(HONEST, "attack", [], profile="numpy")
        got["span"] = (began, time.monotonic())

    thread = threading.Thread(target=neighbour)
    thread.start()
    time.sleep(1.0)  # the neighbour is running
    began = time.monotonic()
    try:
        run, verdict = hostile(box, source)
    finally:
        thread.join()
    ended = time.monotonic()
    n_began, n_ended = got["span"]
    assert n_began < ended and n_ended > began, "the neighbour did not run beside the attack"
    return run, verdict, got["run"]


@needs_lanes
@pytest.mark.parametrize("tier", LANES, ids=lambda t: t.id)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_case_that_exhausts_memory_ends_alone_and_its_lane_and_neighbour_go_on(tier: LaunchedTier,
                                                                                attack: str) -> None:
    box = _lane_box(tier)
    box.run(HONEST.replace("3.0", "0.0"), "attack", [], profile="numpy")  # the lane runs
    assert box.launcher == "forkserver"
    lane = _lane(box)
    runsc, hits = lane.pid, lane.cgroup.failcnt() if lane.cgroup is not None else 0
    source, verdicts = ATTACKS[attack]
    run, verdict, honest = against_a_neighbour(box, source)
    assert verdict["verdict"] in verdicts, (verdict, run.status, run.extra, run.stderr[-500:])
    if verdicts == {"memory"}:  # no process alone meets a limit of its own: its leader ended it
        assert run.extra.get("memory_peak_bytes", 0) > CASE_MEMORY, run.extra
    if attack == "fill_tmpfs":
        assert observed(run) == ["full", "full"]  # both caps held
    if attack == "memfd":
        assert observed(run) == "refused:PermissionError"
    # the neighbour, another tenant's honest case in the same lane, passed
    assert honest.status == "finished" and honest.extra.get("launcher") == "forkserver", (honest.status, honest.fault)
    assert judge_case(NEIGHBOUR_CASE, honest, 1e-6, LIMITS["cpu_seconds"])["verdict"] == "passed"
    # the lane survived: the same sandbox (runsc process) and zygote, never at its group's limit
    assert _lane(box) is lane and lane.pid == runsc and lane.alive()
    if lane.cgroup is not None:
        assert lane.cgroup.failcnt() == hits and lane.cgroup.oom_kills() == 0


@needs_lanes
@pytest.mark.parametrize("tier", LANES, ids=lambda t: t.id)
def test_an_honest_case_that_forks_a_few_processes_is_not_ended_for_memory(tier: LaunchedTier) -> None:
    """The count charges each process its resident pages (a page two processes share is counted
    twice): a case that forks a few workers, each holding a modest array, stays well inside."""
    box = _lane_box(tier)
    source = code("""
        import os
        import numpy as np
        def attack():
            kids = []
            for _ in range(4):
                pid = os.fork()
                if pid == 0:
                    a = np.ones(8 << 20 >> 3)
                    os._exit(0 if a.sum() == (8 << 20 >> 3) else 1)
                kids.append(pid)
            big = np.ones(64 << 20 >> 3)
            return [os.waitpid(k, 0)[1] for k in kids] + [int(big.sum())]
        """)
    run = box.run(source, "attack", [], profile="numpy")
    assert run.status == "finished" and "memory_peak_bytes" not in run.extra, (run.status, run.extra)
    assert observed(run) == [0, 0, 0, 0, 64 << 20 >> 3]
