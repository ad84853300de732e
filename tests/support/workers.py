"""Real `scaling-grader worker` processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from tests.support.server import ROOT, stop_process


def start_worker(redis_url: str, name: str, extra_env: dict[str, str] | None = None,
                 queues: str = "impl,judge", args: tuple[str, ...] = (), jobs: int | None = 1,
                 preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    """jobs: lanes (jobs at once); one unless a test asks for more, since the tests written for
    one-job workers count workers and the jobs each holds. None: the setting's (auto) default."""
    env = {**os.environ, "SCALING_GRADER_REDIS_URL": redis_url, **(extra_env or {})}
    lanes = ("--jobs", str(jobs)) if jobs is not None else ()
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--queues", queues, "--name", name, *lanes, *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=preexec_fn,
    )


def stop_worker(process: subprocess.Popen) -> None:
    stop_process(process)
