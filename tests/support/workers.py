"""Real `scaling-grader worker` processes."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.server import ROOT, stop_process


def start_worker(redis_url: str, name: str, extra_env: dict[str, str] | None = None,
                 queues: str = "impl,judge", args: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "SCALING_GRADER_REDIS_URL": redis_url, **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--queues", queues, "--name", name, *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def stop_worker(process: subprocess.Popen) -> None:
    stop_process(process)
