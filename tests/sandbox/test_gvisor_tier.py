"""The gvisor tier: a case's system calls are answered by gVisor's kernel, not the host's; the
tier is chosen only by name and fails closed; the warm pool serves its cases from sandboxes
started ahead; the result channel cannot be reached by the candidate. (The isolation and
adversarial suites run under it too, through tiers.py.)"""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from app.sandbox.launch import SandboxFault
from app.sandbox.pool import Sandbox, candidate_tiers
from app.sandbox.tiers.gvisor_lane import GvisorZygote
from app.sandbox.tiers.runsc import descendants
from app.settings import TIER_ORDER, SandboxSettings
from tests.sandbox.attacks import code, guarded
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LaunchedTier, box_for, offered_tiers, tier_settings

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

GVISOR = [t for t in offered_tiers() if t.startswith("gvisor")]
needs_gvisor = pytest.mark.skipif(not GVISOR, reason="runsc does not run here (needs root and gVisor)")


def test_one_tier_order_names_every_tier_the_settings_accept() -> None:
    for name in TIER_ORDER:
        assert SandboxSettings(tier=name, min_tier=name).tier == name
    assert SandboxSettings(tier="auto").tier == "auto"
    for wrong in ("bubblewarp", "Plain", "gvisor+seccomp", ""):
        with pytest.raises(ValidationError):
            SandboxSettings(tier=wrong)
        with pytest.raises(ValidationError):
            SandboxSettings(min_tier=wrong)
    with pytest.raises(ValidationError):
        SandboxSettings(min_tier="auto")  # a minimum is a tier


def test_auto_never_starts_gvisor() -> None:
    """gVisor costs every case more and needs root: a deployment asks for it by name."""
    assert {t.isolation for t in candidate_tiers(SandboxSettings())} == {"bubblewrap", "plain"}
    assert {t.isolation for t in candidate_tiers(SandboxSettings(tier="gvisor"))} == {"gvisor"}


def test_forced_gvisor_fails_closed_without_runsc() -> None:
    """Named but unable to run (runsc missing here): no case runs, in no weaker tier."""
    box = Sandbox(tier_settings("gvisor+seccomp", warm_pool_size=0))
    try:
        box._ensure_plan().tools.pop("runsc", None)
        with pytest.raises(SandboxFault, match="runsc"):
            box.tier()
        run = box.run("def f():\n    return 1\n", "f", [])
        assert run.status == "sandbox_fault" and run.final is None
        assert box.status()["ok"] is False and box.status()["tier"] is None
    finally:
        box.shutdown()


@needs_gvisor
def test_system_calls_are_answered_by_gvisor_not_the_host() -> None:
    """With the seccomp filter off (so that syslog() is not refused before any kernel sees it),
    the kernel the case talks to is not the host's: another release, and the kernel log
    gVisor's kernel writes, which the host's kernel never holds."""
    source = code("""
        import ctypes, os
        def attack():
            libc = ctypes.CDLL(None, use_errno=True)
            buf = ctypes.create_string_buffer(1 << 16)
            n = libc.klogctl(3, buf, len(buf))  # SYSLOG_ACTION_READ_ALL
            log = buf.raw[:n].decode(errors='replace') if n > 0 else 'errno %d' % ctypes.get_errno()
            return [os.uname().release, log]
        """)
    run, _ = hostile(box_for("gvisor", guards=False), source)
    release, log = observed(run)
    assert release != os.uname().release
    assert "gVisor" in log, log


@needs_gvisor
@pytest.mark.parametrize("gvisor_tier", GVISOR)
def test_the_result_socket_is_out_of_the_candidates_reach(gvisor_tier: str) -> None:
    """Forging a result through the parent's socket: it is gone once the harness connected, its
    directory is root's, and (with the filter) socket() is refused anyway."""
    source = guarded("""
        import socket
        found = os.listdir('/run/grader')
        s = socket.socket(socket.AF_UNIX)
        s.connect('/run/grader/result.sock')
        s.sendall(b'{"kind": "final", "result": {"kind": "value", "value": 1}}\\n')
        return ['connected', found]
        """)
    run, verdict = hostile(box_for(gvisor_tier, guards=False), source)
    got = observed(run)
    assert isinstance(got, str) and got.startswith("denied"), got
    assert verdict["verdict"] == "wrong"


@needs_gvisor
def test_warm_pool_serves_a_case_from_a_sandbox_started_before_it() -> None:
    box = box_for(LaunchedTier(GVISOR[0], "exec"))  # a sandbox per case
    box.prewarm("numpy")
    with box._cv:
        started = {pid for child in box._warm["numpy"] for pid in descendants(child.popen.pid)}
    assert started  # runsc's gofer and sandbox of each warm child
    run = box.run("def f():\n    return 6 * 7\n", "f", [])
    assert observed(run) == 42
    assert set(run.extra["host_pids"]) & started  # its kernel was running before the case came


@needs_gvisor
@pytest.mark.parametrize("gvisor_tier", GVISOR)
def test_gvisor_cases_are_never_forked_from_a_host_process(gvisor_tier: str) -> None:
    """The fork server (the default launcher) of the gvisor tier runs inside a gVisor sandbox
    (tiers/gvisor_lane.py): a gvisor case is a fork of a zygote behind gVisor's kernel, or a sandbox
    of its own, never a fork of a process on the host's kernel. (Without the filter: no fork
    server, a sandbox per case.)"""
    box = box_for(gvisor_tier)
    assert box.settings.launcher == "forkserver"
    source = code("""
        import os
        def attack():
            return os.uname().release
        """)
    run, _ = hostile(box, source)
    assert observed(run) != os.uname().release
    zygotes = list(box._forkservers._zygotes.values())
    if gvisor_tier.endswith("+seccomp"):
        assert run.extra["launcher"] == "forkserver" and box.launcher == "forkserver"
        assert zygotes and all(isinstance(z, GvisorZygote) for z in zygotes)
    else:
        assert run.extra["launcher"] == "exec" and box.launcher == "exec" and not zygotes
