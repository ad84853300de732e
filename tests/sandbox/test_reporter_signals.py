"""The case cannot signal its reporter (docs/sandbox.md, "How a case runs"): a submission that does
the work right and, before returning, sends every signal there is to its reporter (and to its
pid 1) still passes. Before the reporter ignored its signals, SIGINT alone (the interpreter's
KeyboardInterrupt handler, which the kernel delivers even to a namespace's init) ended it and
turned the case into a crash."""

from __future__ import annotations

import os

import pytest

from app.graders.impl_verdict import judge_case
from app.sandbox.uids import processes_of
from app.tasks.impl.spec import Case
from tests.sandbox.attacks import code
from tests.sandbox.isolation_support import observed
from tests.sandbox.tiers import PRIVATE_TIERS, SHORT_LIMITS, box_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SIGNAL_THE_REPORTER = code("""
    import os, signal, time
    def attack(n, uncatchable_too):
        reporter = os.getppid()
        delivered = 0
        for sig in sorted(signal.valid_signals()):
            if sig in (signal.SIGKILL, signal.SIGSTOP) and not uncatchable_too:
                continue
            for target in {reporter, 1}:
                try:
                    os.kill(target, sig)
                    # (SIGCONT may be sent to any process of one's session, whatever its uid)
                    delivered += target == reporter and sig != signal.SIGCONT
                except OSError:
                    pass
        time.sleep(0.3)  # every signal has arrived by now
        return [n * 2, delivered > 0]
    """)


def test_every_signal_to_the_reporter_leaves_the_verdict_as_earned(tier: str) -> None:
    """In the bubblewrap and gvisor tiers SIGKILL and SIGSTOP are sent too (the reporter is the
    namespace's init there, or runs under another uid); in the plain tier only the catchable
    ones (a process of the same uid can always stop or kill it: documented)."""
    private = tier.startswith(PRIVATE_TIERS)
    n = int.from_bytes(os.urandom(2), "big")
    box = box_for(tier, guards=False)
    run = box.run(SIGNAL_THE_REPORTER, "attack", [n, private], profile="numpy")
    # The kill calls reach the reporter (same uid) except under gVisor, where it runs under
    # another uid and they fail with EPERM (all but SIGCONT, which the session allows).
    expected = [n * 2, not tier.startswith("gvisor")]
    verdict = judge_case(Case(args=(n, private), expected=expected), run, 1e-9, SHORT_LIMITS["cpu_seconds"])
    assert verdict["verdict"] == "passed", (verdict, run.status, observed(run), run.final)
    uid = run.extra.get("uid")
    if uid is not None:
        assert processes_of(uid) == []
