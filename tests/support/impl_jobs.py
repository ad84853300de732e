"""Queued impl grades as the worker tests post and collect them: the cheapest exercise, queue
settings that find an abandoned job within seconds, and completions of it."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import httpx

from app.tasks.impl import reference

EXERCISE = "critical_batch_size"  # the cheapest exercise: few, quick hidden cases
FAST_QUEUE = {"SCALING_GRADER_QUEUE__HEARTBEAT_INTERVAL": "1", "SCALING_GRADER_QUEUE__HEARTBEAT_GRACE": "2",
              "SCALING_GRADER_QUEUE__MAINTENANCE_INTERVAL": "1", "SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "1"}


def completion(source: str) -> str:
    return f"Here is my implementation.\n\n```python\n{source}\n```\n"


RIGHT = completion(inspect.getsource(getattr(reference, EXERCISE)))
# Right, and every case takes a second: a job is still held (by its lane) when a test strikes.
SLOW_RIGHT = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(1.0)\n"
    "    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
)
# Wrong (forgets the bytes per weight), and as slow: a re-run must not turn it right, or right wrong.
SLOW_WRONG = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(1.0)\n"
    "    return math.ceil(peak_flops / hbm_bandwidth)\n"
)


def collect(client: httpx.Client, job_ids: list[str], timeout: float) -> dict[str, dict]:
    """Job id -> the job endpoint's body, for each job that ended within timeout."""
    results: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    while len(results) < len(job_ids) and time.monotonic() < deadline:
        for job_id in job_ids:
            if job_id not in results:
                response = client.get(f"/v1/jobs/{job_id}", params={"wait": 0})
                if response.status_code == 503:  # the job store is away (Redis loading, say): ask again
                    continue
                body = response.json()
                assert response.status_code == 200, (job_id, response.status_code, body)
                if body["status"] in ("finished", "failed"):
                    results[job_id] = body
        time.sleep(0.2)
    return results


def until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Wait until ``condition()`` holds, or fail naming ``what`` was waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
