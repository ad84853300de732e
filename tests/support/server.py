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

import httpx

from app.cpus import run_delay

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


def wait_until_up(url: str, process: subprocess.Popen, timeout: float = 120.0,
                  wall_limit: float = WALL_LIMIT) -> None:
    """Waits until the server answers /healthz; fails when it exits, when ``timeout`` seconds
    pass in which it could have run, or after ``wall_limit`` seconds of wall time in any case.
    Time it spent waiting for a CPU is not counted in ``timeout``: at the lowest priority beside
    the parallel tests, a start of about a second and a half of CPU took over two minutes of wall
    time, and a start that is only starved has not failed."""
    started = time.monotonic()
    while (time.monotonic() - started - run_delay(process.pid) < timeout
           and time.monotonic() - started < wall_limit):
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)  # not up yet, or answering something else: ask again, without spinning
    raise RuntimeError("server did not come up")


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
