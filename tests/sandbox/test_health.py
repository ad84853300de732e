"""The sandbox's health (app/sandbox/health.py): unhealthy while starts keep failing or the tasks
in use near the pid limit; the same verdict in-process and from the health file a container's
check reads; a check that never starts a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import app.sandbox.health as health
from app.sandbox.pool import Sandbox
from app.settings import SandboxSettings
from tests.support.server import ROOT


@pytest.fixture(autouse=True)
def fresh_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "_record", health.StartRecord(pid=0))
    monkeypatch.setattr(health, "_health_file", None)


def test_a_streak_of_failed_starts_is_unhealthy_and_a_start_ends_it(tmp_path: Path) -> None:
    health.use_health_file(tmp_path / "h.json")
    health.record_start(True)
    for _ in range(health.FAILED_STARTS_UNHEALTHY - 1):
        health.record_start(False, "fork/exec: resource temporarily unavailable")
    assert health.sandbox_health()["ok"] is True  # one unlucky start is retried, not an outage
    health.record_start(False, "fork/exec: resource temporarily unavailable")
    verdict = health.sandbox_health()
    assert verdict["ok"] is False and "resource temporarily unavailable" in verdict["reason"]
    assert health.health_from_file(tmp_path / "h.json")["ok"] is False  # the same, from outside
    health.record_start(True)
    assert health.sandbox_health()["ok"] is True
    assert health.health_from_file(tmp_path / "h.json")["ok"] is True


def test_an_old_streak_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(health.FAILED_STARTS_UNHEALTHY):
        health.record_start(False, "x")
    assert health.sandbox_health()["ok"] is False
    later = health.time.time() + health.FAILURE_MEMORY_SECONDS + 1
    monkeypatch.setattr(health.time, "time", lambda: later)
    assert health.sandbox_health()["ok"] is True


def test_near_the_pid_limit_is_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "pid_usage", lambda: (3700, 4096))
    verdict = health.sandbox_health()
    assert verdict["ok"] is False and "3700 of 4096" in verdict["reason"]
    monkeypatch.setattr(health, "pid_usage", lambda: (100, 4096))
    assert health.sandbox_health()["ok"] is True


def test_pid_usage_reads_the_tightest_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A v1 pids mount showing the container's own group (its path is not below the mount)."""
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "pids.max").write_text("4096\n")
    (tmp_path / "pids" / "pids.current").write_text("17\n")
    monkeypatch.setattr(health, "own_cgroups", lambda: {"pids": "/docker/abc"})
    assert health.pid_usage(tmp_path) == (17, 4096)
    (tmp_path / "pids" / "pids.max").write_text("max\n")
    assert health.pid_usage(tmp_path) is None


def test_a_garbled_or_missing_health_file_is_no_failure(tmp_path: Path) -> None:
    """Before the first start there is no file; a torn one never reads as a streak."""
    assert health.health_from_file(tmp_path / "absent.json")["failing_in_a_row"] == 0
    (tmp_path / "bad.json").write_text('{"pid": 1, "failing_in_a_row": 9, "bogus": 1}')
    assert health.health_from_file(tmp_path / "bad.json")["failing_in_a_row"] == 0


def test_the_command_line_check_exits_1_when_unhealthy(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"pid": 1, "started": 0, "failed": 5, "failing_in_a_row": 5,
                                "last_failure": "runsc exited during start-up", "last_failure_at": health.time.time()}))
    done = subprocess.run([sys.executable, "-m", "app.sandbox.health", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 1 and "runsc exited" in done.stdout
    path.write_text(json.dumps({"pid": 1, "started": 3}))
    done = subprocess.run([sys.executable, "-m", "app.sandbox.health", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_a_sandbox_that_cannot_start_turns_unhealthy(tmp_path: Path) -> None:
    """The real pool: its tier's interpreter is gone, so every start fails; the health file says so."""
    settings = SandboxSettings(tier="bubblewrap", warm_pool_size=0, health_file=tmp_path / "h.json",
                               python=tmp_path / "no-python")
    box = Sandbox(settings)
    try:
        for _ in range(health.FAILED_STARTS_UNHEALTHY):
            run = box.run("def f():\n    return 1\n", "f", [])
            assert run.status == "sandbox_fault"
    finally:
        box.shutdown()
    assert health.sandbox_health()["ok"] is False
    assert health.health_from_file(tmp_path / "h.json")["ok"] is False
