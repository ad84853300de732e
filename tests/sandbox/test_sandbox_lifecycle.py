"""The sandbox's footprint on the host over a service's life: nothing left after a stop signal,
leftovers of killed services removed at the next start (and only theirs), the plain tier
refused for a multi-tenant service without the operator's consent, and a result channel whose
cost to the service is bounded whatever the child writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.sandbox.cgroups import CgroupHost
from app.sandbox.executor import run_in_child
from app.sandbox.launch import Child, destroy, max_message_bytes, read_messages
from app.sandbox.owners import OWNER_FILE, current_owner
from app.settings import SandboxSettings
from app.tenants import new_key
from tests.support.server import ROOT, free_port, wait_until_up

# The operator's key: /readyz names the tier in force to the operator only (anyone else gets ready
# or not ready).
_OPERATOR_KEY, _OPERATOR_DIGEST = new_key()
_TENANTS = ('[[tenant]]\nname = "a"\nkey_sha256 = "' + "ab" * 32 + '"\n'
            '[[tenant]]\nname = "ops"\noperator = true\nkey_sha256 = "' + _OPERATOR_DIGEST + '"\n')


def _start(env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp), **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    return process, f"http://127.0.0.1:{port}"


def _cgroup_parents_named(pid: int) -> list[Path]:
    """The service's groups in every hierarchy it uses, the idle CPU group's included."""
    host = CgroupHost.detect(idle_cpu=True)
    if host is None:
        return []
    bases = [p.parent for p in host.parents.values()]
    if host.idle_group is not None:
        bases.append(host.idle_group.parent)
    host.close()
    return [d for base in bases for d in base.glob(f"scaling-grader-cases-{pid}-*")]


@pytest.mark.slow
@pytest.mark.serial  # counts control groups on the host
@pytest.mark.parametrize("idle", [False, True], ids=["", "idle-cpu"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_signal_leaves_no_staging_directory_or_control_group(tmp_path: Path, sig: int, idle: bool) -> None:
    process, url = _start({"SCALING_GRADER_SANDBOX__IDLE_CPU": "true"} if idle else {}, tmp_path)
    try:
        wait_until_up(url, process, timeout=60)
        ready = httpx.get(url + "/readyz", timeout=120).json()  # probes the tiers: children start
        assert "sandbox" in str(ready)
        if CgroupHost.detect() is not None:  # (a throwaway host of this test process)
            made = _cgroup_parents_named(process.pid)
            assert made  # something to clean up at the stop
            if idle:  # its idle CPU group too, in the cpu hierarchy (v1) or as the parent itself (v2)
                assert any((d / "cpu.idle").exists() for d in made)
        process.send_signal(sig)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -sig  # the signal still ends the process, as uvicorn intends
    assert list(tmp_path.glob("scaling-grader-*")) == []
    assert _cgroup_parents_named(process.pid) == []


@pytest.mark.slow
@pytest.mark.serial  # counts control groups on the host
def test_start_removes_leftovers_of_dead_services_only(tmp_path: Path) -> None:
    dead = tmp_path / "scaling-grader-stage-dead"
    dead.mkdir()
    (dead / OWNER_FILE).write_text("1 0")  # pid 1 runs, but did not start at tick 0
    (dead / "s0").mkdir()
    alive = tmp_path / "scaling-grader-case-alive"
    alive.mkdir()
    (alive / OWNER_FILE).write_text(current_owner())
    unmarked = tmp_path / "scaling-grader-stage-unmarked"  # an older version's: owner unknown
    unmarked.mkdir()
    stale_groups: list[Path] = []
    host = CgroupHost.detect()
    if host is not None:
        for parent in host.parents.values():
            stale = parent.parent / "scaling-grader-cases-1-0-0"
            (stale / "case-0").mkdir(parents=True, exist_ok=True)
            stale_groups.append(stale)
        host.close()
    process, url = _start({}, tmp_path)
    try:
        wait_until_up(url, process, timeout=60)
        assert not dead.exists()
        assert alive.exists() and unmarked.exists()
        assert [g for g in stale_groups if g.exists()] == []
    finally:
        process.terminate()
        process.wait(timeout=60)


def _tenants_env(tmp_path: Path, tier: str = "plain", **extra: str) -> dict[str, str]:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(_TENANTS)
    return {"SCALING_GRADER_TENANTS_FILE": str(tenants), "SCALING_GRADER_SANDBOX__TIER": tier, **extra}


@pytest.mark.slow
@pytest.mark.serial  # counts control groups on the host
def test_plain_tier_is_refused_for_a_multi_tenant_service(tmp_path: Path) -> None:
    process, _ = _start(_tenants_env(tmp_path), tmp_path)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 2
    text = out.decode()
    assert "plain" in text and "SCALING_GRADER_SANDBOX__ALLOW_PLAIN" in text
    assert "Traceback" not in text


@pytest.mark.slow
@pytest.mark.serial  # counts control groups on the host
def test_plain_tier_runs_for_a_multi_tenant_service_only_when_allowed(tmp_path: Path) -> None:
    env = _tenants_env(tmp_path, SCALING_GRADER_SANDBOX__ALLOW_PLAIN="true")
    process, url = _start(env, tmp_path)
    try:
        wait_until_up(url, process, timeout=120)
        assert httpx.get(url + "/readyz", timeout=120).text == '{"ready":true}'  # nothing more to anyone
        body = httpx.get(url + "/readyz", timeout=120, headers={"Authorization": f"Bearer {_OPERATOR_KEY}"}).text
        assert '"plain' in body  # readyz names the tier in force
        assert "limits" in body
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.serial  # counts control groups on the host
def test_worker_refuses_the_plain_tier_with_a_tenants_file(tmp_path: Path) -> None:
    env = {**os.environ, **_tenants_env(tmp_path), "TMPDIR": str(tmp_path),
           "SCALING_GRADER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "worker", "--queues", "impl"], cwd=ROOT,
                          env=env, capture_output=True, timeout=120)
    assert done.returncode == 2
    assert b"SCALING_GRADER_SANDBOX__ALLOW_PLAIN" in done.stderr + done.stdout


# ---------------------------------------------------------------- the result channel

def _fake_child(script: str, sb: SandboxSettings) -> Child:
    """A process speaking on a result fd as a (broken) reporter would."""
    r, w = os.pipe()
    popen = subprocess.Popen([sys.executable, "-c", script, str(w)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w,))
    os.close(w)
    for f in (popen.stdout, popen.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
    return Child(popen, r, "plain", False, "bare", None, None, time.monotonic(),
                 max_message=max_message_bytes(sb))


_ENDLESS_LINE = (
    "import os, sys\nfd = int(sys.argv[1])\nsys.stdin.buffer.read()\n"
    "os.write(fd, b'{\"kind\": \"armed\", \"seccomp\": false}\\n')\n"
    "chunk = b'\\\\u00e9' * 100000\nos.write(fd, b'{\"kind\": \"final\", \"result\": \"')\n"
    "while True:\n    os.write(fd, chunk)\n"
)


def test_a_result_line_past_the_cap_stops_the_case() -> None:
    sb = SandboxSettings(max_result_bytes=1 << 20, wall_seconds=60)
    child = _fake_child(_ENDLESS_LINE, sb)
    try:
        run = run_in_child(child, b"{}", sb)
        assert run.status == "output_limit"
        assert child.oversize and child.pending == [] and child.pending_bytes == 0
        assert child.popen.wait(timeout=10) is not None  # killed, not left writing
    finally:
        destroy(child, None)


def test_a_long_line_arriving_in_pieces_is_read_whole() -> None:
    sb = SandboxSettings(max_result_bytes=1 << 20)
    text = "x" * (3 << 20)  # within the cap (5 x 1 MiB), over many reads
    script = ("import os, sys, json\nfd = int(sys.argv[1])\n"
              f"line = (json.dumps({{'kind': 'final', 'result': 'x' * {len(text)}}}) + '\\n').encode()\n"
              "for i in range(0, len(line), 4096):\n    os.write(fd, line[i:i + 4096])\n")
    child = _fake_child(script, sb)
    try:
        while read_messages(child, 10):
            if child.lines:
                break
        assert child.lines == [{"kind": "final", "result": text}]
        assert not child.oversize
    finally:
        destroy(child, None)
