"""What keeps the stack from piling up and the API fast, in the container files: an init in
every container, health checks that end themselves, CPU weights that put the workers' sandboxes
below the API, a graceful stop on scale-down, the book mirror mountable. (The stack soak,
bench/bench_stack_soak.py, measures the running stack.)"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.settings import Settings
from deploy.worker_run import duration_seconds, run_args
from tests.deploy.compose_files import COMPOSE_TEXT, interpolated
from tests.support.server import ROOT

COMPOSE = interpolated()
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
_spec = importlib.util.spec_from_file_location("healthcheck", HEALTHCHECK)
assert _spec is not None and _spec.loader is not None
healthcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(healthcheck)
DEADLINE_SECONDS = healthcheck.DEADLINE_SECONDS


def test_every_container_runs_an_init_that_reaps_orphans() -> None:
    for name, service in COMPOSE["services"].items():
        assert service.get("init") is True, name


# Docker's smallest CPU weight (cgroup v1 cpu.shares; cgroup v2 cpu.weight 1); a service that
# sets none weighs 1024.
LOWEST_SHARES, DEFAULT_SHARES = 2, 1024


def test_the_workers_weigh_least_on_the_cpu() -> None:
    """Inline grading first: at any weight above the lowest, saturated workers still delayed the
    numeric path (the API, Redis, the port's proxy on the host) past 100 ms at p99."""
    worker = int(COMPOSE["services"]["worker"]["cpu_shares"])
    assert worker == LOWEST_SHARES
    others = {name: int(service.get("cpu_shares", DEFAULT_SHARES))
              for name, service in COMPOSE["services"].items() if name != "worker"}
    assert all(shares > 4 * worker for shares in others.values()), others


def test_scale_down_stops_a_worker_gracefully_for_as_long_as_a_job_may_run() -> None:
    worker = COMPOSE["services"]["worker"]
    assert worker["stop_signal"] == "SIGTERM"
    assert duration_seconds(worker["stop_grace_period"]) > Settings().queue.job_timeout
    # deploy/stack.sh's compose v1 path: `docker stop`, never `docker rm -f`, on the way down
    stack = (ROOT / "deploy" / "stack.sh").read_text()
    scale = stack[stack.index("scale_workers() {"):stack.index("load_images() {")]
    assert "docker stop" in scale and "rm -f" not in scale


def test_compose_v1_translation_keeps_init_weight_and_graceful_stop() -> None:
    service = {k: v for k, v in COMPOSE["services"]["worker"].items() if k != "env_file"}
    config = {"services": {"worker": {**service, "environment": {"A": "1"}}}, "volumes": COMPOSE["volumes"]}
    args = run_args(config, "proj", 1)
    pairs = set(itertools.pairwise(args))
    assert "--init" in args
    assert ("--cpu-shares", str(service["cpu_shares"])) in pairs
    assert ("--stop-signal", "SIGTERM") in pairs
    assert ("--stop-timeout", str(duration_seconds(service["stop_grace_period"]))) in pairs


def test_durations_as_compose_writes_them() -> None:
    assert [duration_seconds(t) for t in ("960s", "16m", "1m30s", "90", "1h", "0.5s", "3m0s")] == [
        960, 960, 90, 90, 3600, 1, 180]
    for bad in ("", "soon", "10 s", "-5s"):
        try:
            duration_seconds(bad)
        except SystemExit:
            continue
        raise AssertionError(f"{bad!r} was read as a duration")


def test_the_book_mirror_is_mountable_and_named_only_when_given() -> None:
    for name in ("api", "worker"):
        service = COMPOSE["services"][name]
        assert any(v.endswith(":/srv/book-mirror:ro") for v in service["volumes"]), name
        # the setting itself comes from BOOK_ENV's file (deploy/stack.sh writes it with a mirror)
        assert "SCALING_GRADER_BOOK_MIRROR" not in service.get("environment", {}), name
        assert len(set(service["env_file"])) == 2  # Compose refuses a file named twice
    given = interpolated(COMPOSE_TEXT, {"BOOK_MIRROR": "/srv/m", "BOOK_ENV": ".build/stack/book.env"})
    assert "/srv/m:/srv/book-mirror:ro" in given["services"]["api"]["volumes"]
    assert ".build/stack/book.env" in given["services"]["worker"]["env_file"]


def _dockerfile_healthcheck(name: str) -> tuple[float, list[str]]:
    text = (ROOT / "docker" / f"{name}.Dockerfile").read_text()
    line = next(line for line in text.splitlines() if line.startswith("HEALTHCHECK"))
    timeout = float(re.search(r"--timeout=(\d+)s", line)[1])
    return timeout, json.loads(line.split(" CMD ", 1)[1])


def test_images_check_health_with_one_process_that_ends_before_dockers_timeout() -> None:
    for name, kind in (("api", "api"), ("worker", "worker")):
        timeout, command = _dockerfile_healthcheck(name)
        assert command == ["python", "/opt/healthcheck.py", kind]
        assert timeout >= DEADLINE_SECONDS[kind] + 2, name


def _check(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **(env or {})}, timeout=60)
    return done.returncode, done.stdout, time.monotonic() - start


def test_a_hanging_api_fails_the_check_within_its_own_deadline() -> None:
    """A server that accepts and never answers (an API stalled under load): the check ends
    itself, so Docker never has to kill it and nothing is left behind."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        stop = threading.Event()
        held: list[socket.socket] = []

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(server.accept()[0])
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            code, _out, took = _check("api", env={"SCALING_GRADER_PORT": str(server.getsockname()[1])})
        finally:
            stop.set()
            thread.join()
            for conn in held:
                conn.close()
    assert code != 0
    assert took < DEADLINE_SECONDS["api"] + 2, took


def test_the_worker_check_fails_on_a_failing_sandbox(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"pid": 1, "failed": 4, "failing_in_a_row": 4,
                                "last_failure": "fork/exec: resource temporarily unavailable",
                                "last_failure_at": time.time()}))
    code, out, _ = _check("worker", env={"SCALING_GRADER_SANDBOX__HEALTH_FILE": str(path),
                                         "SCALING_GRADER_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert code == 1 and "resource temporarily unavailable" in out


def test_the_worker_check_fails_without_redis(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"pid": 1, "started": 3}))
    code, out, _ = _check("worker", env={"SCALING_GRADER_SANDBOX__HEALTH_FILE": str(path),
                                         "SCALING_GRADER_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert code == 1 and "ConnectionError" in out


def test_the_worker_check_costs_redis_one_command(tmp_path: Path, redis_server) -> None:
    # every 30 s per worker, for as long as the stack runs: the PING, no HELLO before it
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"pid": 1, "started": 3}))
    connection = redis_server.client()
    connection.config_resetstat()
    code, out, _ = _check("worker", env={"SCALING_GRADER_SANDBOX__HEALTH_FILE": str(path),
                                         "SCALING_GRADER_REDIS_URL": redis_server.url})
    assert code == 0, out
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in connection.info("commandstats").items()}
    calls.pop("config|resetstat", None)
    assert calls == {"ping": 1}, calls


FAILING_PS_DOCKER = """#!/bin/sh
# A stand-in for docker whose daemon answers everything but the listing of containers.
echo "docker $*" >> "$CALLS"
case "$1" in
  ps) exit 1 ;;
esac
exit 0
"""


def test_the_stacks_down_takes_the_stack_down_when_listing_workers_fails(tmp_path: Path) -> None:
    # `down` runs as the EXIT trap of a test run: a failure listing the workers (a daemon that
    # is slow to answer) must not end it before `compose down`, leaving the whole stack running.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "dockerd"):
        (bin_dir / name).write_text(FAILING_PS_DOCKER)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    done = subprocess.run(["bash", str(ROOT / "deploy" / "stack.sh"), "down"], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls),
                               "STACK_NAME": "sg-down-probe"}, timeout=60)
    made = calls.read_text() if calls.exists() else ""
    assert re.search(r"^docker compose .* down\b", made, re.M), (made, done.stderr[-2000:])
    assert done.returncode != 0, "the failure is still reported"
