"""Real redis-server processes for tests: a free port, a private directory, AOF on (so a restart
keeps queued jobs), stopped and restarted on demand."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.server import free_port


class RedisServer:
    def __init__(self, appendonly: bool = True) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make test installs it as root)")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sg-redis-"))
        self.appendonly = appendonly
        self.process: subprocess.Popen | None = None
        self._ever_started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        # The port was free when chosen, not necessarily when the server binds it: another test's
        # server may have taken it in between. Ours then exits, and the other one would answer our
        # ping (tests would share a Redis: one's FLUSHALL took another's job). So the answer must
        # come from our process; if it exited, a new port (a restart keeps its port: the tests
        # that restart Redis reconnect to it, so there it is tried again, and fails loudly).
        restart = self._ever_started
        for _ in range(5):
            if self._started():
                self._ever_started = True
                return self
            if restart:
                time.sleep(0.2)
            else:
                self.port = free_port()
        raise RuntimeError("redis-server did not start")

    def _started(self) -> bool:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
                "--protected-mode", "no", "--loglevel", "warning"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if int(client.info("server")["process_id"]) == self.process.pid:
                    return True
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.05)
        self.stop()
        return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
