"""Run the real service in a child process on a free loopback port, for HTTP contract tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.run_delay import TreeRunDelay

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# However starved: a server stuck runnable in a loop waits for a CPU nearly all the time, so
# without a bound on the wall clock too its wait would last timeout / its CPU share (a spinning
# server at nice 19 beside one hog: over 60 s of wall time for a 5 s timeout, still waiting).
# Benchmarks call this without pytest's time limit.
WALL_LIMIT = 600.0


def _healthy(url: str, budget: float = 1.0) -> bool:
    """Whether /healthz answers 200 within ``budget`` seconds in all: the status line alone is
    read, under one deadline (httpx's timeout bounds each read, so a server that trickled bytes
    held one request, and the wait, past any wall limit)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    deadline = time.monotonic() + budget
    status = b""
    try:
        with socket.create_connection((host, port), timeout=budget) as connection:
            connection.sendall(b"GET /healthz HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
            while b"\r\n" not in status and len(status) < 1024:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                connection.settimeout(left)
                chunk = connection.recv(1024)
                if not chunk:
                    break
                status += chunk
    except OSError:
        return False
    line = status.split(b"\r\n", 1)[0].split()
    return len(line) >= 2 and line[0].startswith(b"HTTP/1.") and line[1] == b"200"


def wait_until_up(url: str, process: subprocess.Popen, timeout: float = 120.0,
                  wall_limit: float = WALL_LIMIT) -> None:
    """Waits until the server answers /healthz; fails when it exits, when ``timeout`` seconds
    pass in which it could have run, or after ``wall_limit`` seconds of wall time in any case.
    Time that the server or any process it started spent waiting for a CPU is not counted in
    ``timeout``: at nice 19 beside a saturated machine, a start of about 3.5 s of CPU took over
    eight minutes of wall time, most of it with the server itself asleep, waiting for
    its grading processes, which were the ones starved (counting only the server's own wait, the
    start "failed" after two minutes of others' starvation)."""
    started = time.monotonic()
    starved = TreeRunDelay(process.pid)
    while True:
        wall = time.monotonic() - started
        ran = wall - min(wall, starved.seconds())
        if ran >= timeout or wall >= wall_limit:
            break
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        if _healthy(url):
            return
        time.sleep(0.1)  # not up yet, or answering something else: ask again, without spinning
    raise RuntimeError(f"server did not come up: {ran:.0f} s in which it could run (of {timeout:.0f} s), "
                       f"{wall:.0f} s of wall time (of {wall_limit:.0f} s)")


@contextmanager
def running_server(env: Mapping[str, str] | None = None, args: tuple[str, ...] = ()) -> Iterator[str]:
    port = free_port()
    child_env = {**os.environ, **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", *args],
        cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        yield url
    finally:
        stop_process(process)


@contextmanager
def logged_server(env: Mapping[str, str], log: Path, log_level: str = "warning"
                  ) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real server whose output goes to ``log`` (for tests that read it afterwards, for a
    traceback or a secret): yields its URL and process."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", log_level],
            cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        yield url, process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ten seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
