"""Attacks aimed at what forking children from a fork server ("zygote") could share: each case is
a fork of one process that imported numpy/JAX once, so a case tries to leave something in that
process or in what every fork inherits (files, module state, numpy itself, threads, children),
to reach the zygote (signals, ptrace, its memory), or to exhaust memory and tasks; a later case
from the same zygote must find nothing, and the zygote must go on unharmed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from app.sandbox.pool import Sandbox
from app.sandbox.tiers.gvisor_lane import GvisorZygote
from app.sandbox.zygote import Zygote
from tests.sandbox.attacks import code, guarded
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LANDLOCK, box_for

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _zygote(box: Sandbox, profile: str = "numpy") -> Zygote | GvisorZygote:
    tier = box.tier()
    zygote = box._forkservers._zygotes.get((tier.isolation, tier.seccomp, profile))
    assert zygote is not None and zygote.alive(), "no fork server serves this tier"
    return zygote


def _threads(zygote: Zygote | GvisorZygote) -> object:
    """The zygote's threads: from /proc, or, for one inside a lane's gVisor sandbox (whose tasks
    the host cannot see), as the zygote reported them when it last forked."""
    if isinstance(zygote, GvisorZygote):
        return zygote.threads
    with open(f"/proc/{zygote.pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def _forked_run(box: Sandbox, source: str, args: list[object] | None = None) -> object:
    run, _ = hostile(box, source, args)
    assert run.extra.get("launcher") == "forkserver", run.extra
    return observed(run)


_HONEST = "def attack():\n    import numpy as np\n    return int(np.arange(10).sum())\n"


def _still_serves(box: Sandbox, zygote: Zygote | GvisorZygote) -> None:
    """The same zygote (same pid, single-threaded) forks a later case that runs correctly."""
    run = box.run(_HONEST, "attack", [], profile="numpy")
    assert run.status == "finished" and observed(run) == 45, (run.status, run.fault)
    assert run.extra.get("launcher") == "forkserver"
    assert _zygote(box) is zygote and zygote.alive()
    assert _threads(zygote) == 1


# ---------------------------------------------------------------- nothing passes between forks

@pytest.mark.filter_neutral
def test_module_state_and_numpy_patches_do_not_reach_a_later_case(fork_tier: str) -> None:
    box = box_for(fork_tier, guards=False)
    token = "planted-" + os.urandom(6).hex()
    plant = guarded("""
        import sys, builtins, numpy
        numpy.sum = lambda *a, **k: 'patched'
        numpy.PLANTED = token
        builtins.PLANTED = token
        sys.modules['planted_module'] = type(sys)('planted_module')
        sys.modules['json'].PLANTED = token
        sys.path.insert(0, '/tmp/planted')
        return 'planted'
        """, "token")
    look = guarded("""
        import sys, builtins, json, numpy
        found = [numpy.sum([1, 2]) == 'patched', getattr(numpy, 'PLANTED', None) == token,
                 getattr(builtins, 'PLANTED', None) == token, 'planted_module' in sys.modules,
                 getattr(json, 'PLANTED', None) == token, '/tmp/planted' in sys.path]
        return 'denied:clean' if not any(found) else found
        """, "token")
    zygote = _zygote(box) if box.launcher == "forkserver" else None
    assert _forked_run(box, plant, [token]) == "planted"
    assert _forked_run(box, look, [token]) == "denied:clean"
    assert zygote is None or _zygote(box) is zygote  # both were forks of the one zygote


@pytest.mark.filter_neutral
@pytest.mark.parametrize("place", ["/tmp", "/dev/shm", "$TMPDIR", "$HOME"])
def test_files_of_one_fork_are_gone_for_the_next(fork_tier: str, place: str) -> None:
    box = box_for(fork_tier, guards=False)
    token = "fork-" + os.urandom(6).hex()
    where = f"os.environ[{place[1:]!r}]" if place.startswith("$") else repr(place)
    make = guarded(f"""
        with open(os.path.join({where}, token), 'w') as f:
            f.write('left for the next fork')
        return os.path.join({where}, token)
        """, "token")
    look = guarded(f"""
        return open(os.path.join({where}, token)).read()
        """, "token")
    made = _forked_run(box, make, [token])
    if LANDLOCK and fork_tier.startswith("plain") and not place.startswith("$"):
        assert made == "denied:PermissionError"  # Landlock: the host's /tmp and /dev/shm are not the case's
    else:
        assert isinstance(made, str) and made.endswith(token)
    found = _forked_run(box, look, [token])
    assert isinstance(found, str) and found.startswith("denied"), found
    if not place.startswith("$"):
        assert not os.path.exists(os.path.join(place, token))  # nor is it on the host


@pytest.mark.filter_neutral
def test_a_fork_has_private_tmp_and_shm(fork_tier: str) -> None:
    """Two cases at once: each sees an empty /tmp and /dev/shm of its own (bubblewrap, gvisor), or
    its own private TMPDIR (plain)."""
    box = box_for(fork_tier, guards=False)
    source = code("""
        import os
        def attack():
            return [sorted(os.listdir('/tmp')) if os.environ['TMPDIR'] == '/tmp' else os.listdir(os.environ['TMPDIR']),
                    sorted(os.listdir('/dev/shm')) if os.environ['TMPDIR'] == '/tmp' else [], os.environ['TMPDIR']]
        """)
    first, second = (_forked_run(box, source) for _ in range(2))
    assert isinstance(first, list) and isinstance(second, list)
    if fork_tier.startswith(("bubblewrap", "gvisor")):
        assert first[:2] == [["home", "work"], []] and second[:2] == [["home", "work"], []]
    else:
        assert first[0] == [] and second[0] == [] and first[2] != second[2]


# ---------------------------------------------------------------- the zygote is out of reach

def test_zygote_cannot_be_signalled_traced_or_read(fork_tier: str) -> None:
    """The attacker is told the zygote's pid (as the host sees it) and throws everything at it."""
    box = box_for(fork_tier, guards=False)
    box.run(_HONEST, "attack", [], profile="numpy")  # the zygote exists
    zygote = _zygote(box)
    source = code("""
        import ctypes, os, signal
        def attack(pid):
            out = []
            for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGSEGV):
                try:
                    os.kill(pid, sig)
                    out.append('signalled')
                except OSError as exc:
                    out.append(type(exc).__name__)
            libc = ctypes.CDLL(None, use_errno=True)
            out.append('attached' if libc.ptrace(16, pid, None, None) == 0 else 'ptrace-denied')  # PTRACE_ATTACH
            out.append('seized' if libc.ptrace(0x4206, pid, None, None) == 0 else 'seize-denied')
            for what in ('mem', 'environ', 'fd'):
                try:
                    if what == 'fd':
                        os.listdir(f'/proc/{pid}/fd')
                    else:
                        open(f'/proc/{pid}/{what}', 'rb').read(1)
                    out.append(what + '-read')
                except OSError as exc:
                    out.append(type(exc).__name__)
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                out.append('group-signalled')
            except OSError as exc:
                out.append(type(exc).__name__)
            return out
        """)
    seen = _forked_run(box, source, [zygote.pid])
    assert isinstance(seen, list)
    assert not {"signalled", "attached", "seized", "mem-read", "environ-read", "fd-read",
                "group-signalled"} & set(seen), seen
    _still_serves(box, zygote)


@pytest.mark.filter_neutral
def test_a_case_that_kills_its_own_processes_leaves_the_zygote_unharmed(fork_tier: str) -> None:
    box = box_for(fork_tier, guards=False)
    box.run(_HONEST, "attack", [], profile="numpy")
    zygote = _zygote(box)
    source = code("""
        import os, signal
        def attack():
            for target in (-1, os.getppid(), 1, 0):
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
        """)
    hostile(box, source)
    _still_serves(box, zygote)


# ---------------------------------------------------------------- exhaustion and leftovers

@pytest.mark.filter_neutral
def test_memory_and_task_exhaustion_stay_in_the_case(fork_tier: str) -> None:
    box = box_for(fork_tier, guards=False)
    box.run(_HONEST, "attack", [], profile="numpy")
    zygote = _zygote(box)
    memory = code("""
        def attack():
            hoard = []
            while True:
                hoard.append(bytearray(64 << 20))
        """)
    run, verdict = hostile(box, memory)
    # Under gVisor each page fault is charged to the task: the tests' 1 s CPU allowance may end
    # the case before its address-space limit does (as in the adversarial suite).
    ended = ("memory", "crashed", "exception") + (("timeout",) if fork_tier.startswith("gvisor") else ())
    assert verdict["verdict"] in ended, verdict
    tasks = code("""
        import os, time
        def attack():
            n = 0
            try:
                while n < 10000:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    n += 1
            except OSError:
                pass
            return n
        """)
    run, _ = hostile(box, tasks)
    forked = observed(run)
    # (gVisor charges each fork's copy of the address space to the forking task: its 16 forks
    # take about the tests' 1 s CPU allowance, which may end the case first on a loaded machine)
    assert (isinstance(forked, int) and forked < 10000) or (fork_tier.startswith("gvisor") and run.status == "timeout")
    _still_serves(box, zygote)


@pytest.mark.filter_neutral
def test_threads_and_children_left_running_do_not_survive(fork_tier: str) -> None:
    """A case starts a thread and a detached child that would write into /tmp later; both die
    with the case, the zygote stays single-threaded, and the next case finds nothing."""
    box = box_for(fork_tier, guards=False)
    box.run(_HONEST, "attack", [], profile="numpy")
    zygote = _zygote(box)
    token = "late-" + os.urandom(6).hex()
    leave = guarded("""
        import threading, time
        def later():
            time.sleep(1.0)
            open(os.path.join(os.environ['TMPDIR'], token), 'w').write('late')
        threading.Thread(target=later, daemon=False).start()
        if os.fork() == 0:
            os.setsid()
            later()
            os._exit(0)
        return 'left'
        """, "token")
    assert _forked_run(box, leave, [token]) == "left"
    time.sleep(1.5)  # past the moment the leftovers would have written
    assert _threads(zygote) == 1
    look = guarded("""
        return open(os.path.join(os.environ['TMPDIR'], token)).read()
        """, "token")
    found = _forked_run(box, look, [token])
    assert isinstance(found, str) and found.startswith("denied"), found
    _still_serves(box, zygote)


# ---------------------------------------------------------------- a zygote that dies

@pytest.mark.filter_neutral
def test_a_dead_zygote_is_replaced_and_no_case_gets_a_wrong_verdict(fork_tier: str) -> None:
    box = box_for(fork_tier)
    box.run(_HONEST, "attack", [], profile="numpy")
    zygote = _zygote(box)
    os.kill(zygote.pid, signal.SIGKILL)
    runs = [box.run(_HONEST, "attack", [], profile="numpy") for _ in range(4)]
    # Warm children forked before the kill may die with it: then the case is retried on a fresh
    # child (a sandbox fault at worst), never scored as the candidate's failure.
    assert all(r.status in ("finished", "sandbox_fault") for r in runs), [(r.status, r.fault) for r in runs]
    assert observed(runs[-1]) == 45 and runs[-1].extra.get("launcher") == "forkserver"
    replacement = _zygote(box)
    assert replacement is not zygote and replacement.pid != zygote.pid


@pytest.mark.filter_neutral
def test_a_case_that_kills_itself_is_not_taken_for_a_dead_fork_server(fork_tier: str) -> None:
    """A dead fork server's forks die by SIGKILL and their case is retried as the sandbox's
    fault; a candidate that SIGKILLs itself (or its whole process group) under a live fork server
    has ended its own case: it is scored, never retried."""
    source = code("""
        import os, signal
        def attack():
            os.killpg(0, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
            return 'alive'
        """)
    box = box_for(fork_tier, guards=False)
    box.run(_HONEST, "attack", [], profile="numpy")
    zygote = _zygote(box)
    run = box.run(source, "attack", [], profile="numpy")
    assert run.status != "sandbox_fault", run.fault
    assert _zygote(box) is zygote
