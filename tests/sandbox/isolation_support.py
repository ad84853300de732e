"""Shared pieces of the isolation suites: run a hostile case, score it against a value it cannot
know, and check that nothing of it survives on the host."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from app.graders.impl_verdict import decode, judge_case
from app.sandbox.executor import CaseRun
from app.sandbox.pool import Sandbox
from app.sandbox.uids import processes_of
from app.tasks.impl.spec import Case
from tests.sandbox.tiers import SHORT_LIMITS

UNGUESSABLE = Case(args=(), expected="expected-" + os.urandom(6).hex())


def observed(run: CaseRun) -> Any:
    result = (run.final or {}).get("result") or {}
    return decode(result.get("value")) if result.get("kind") == "value" else None


def hostile(box: Sandbox, source: str, args: list[Any] | None = None, *,
            during: Callable[[], None] | None = None) -> tuple[CaseRun, dict[str, Any]]:
    """Run source's attack() as a case; score it; check the case left no process and no control
    group. ``during`` runs on a side thread while the case does (host-side observation)."""
    stop = threading.Event()
    watcher = None
    if during is not None:
        def watch() -> None:
            while not stop.is_set():
                during()
                time.sleep(0.05)
        watcher = threading.Thread(target=watch)
        watcher.start()
    try:
        run = box.run(source, "attack", args or [], profile="numpy")
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    verdict = judge_case(UNGUESSABLE, run, 1e-6, SHORT_LIMITS["cpu_seconds"])
    assert verdict["verdict"] != "passed"
    uid = run.extra.get("uid")
    if uid is not None:
        assert processes_of(uid) == [], "a process of the case survived it"
    assert run.extra.get("host_processes_left", 0) == 0, "a host process of the gVisor sandbox survived it"
    if box.limits != "rlimits":  # the case's control group went with it
        assert run.extra.get("cgroup_emptied") is True, run.extra
    return run, verdict


def entries_of_uid(uid: int, dirs: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")) -> list[str]:
    found = []
    for d in dirs:
        try:
            for entry in os.scandir(d):
                try:
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        found.append(entry.path)
                except OSError:
                    continue
        except OSError:
            continue
    return found
