"""A job that waits in the queue longer than the result TTL is still its client's when it runs:
no 404 for a job that was accepted. The TTL starts when the result is written."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real server and worker


def test_a_job_waiting_past_the_result_ttl_is_not_forgotten(redis_server) -> None:
    queue = {**FAST_QUEUE, "SCALING_GRADER_QUEUE__RESULT_TTL": "2"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **queue}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0,
                                           "request_id": "waits-long"})
        assert r.status_code == 202
        job_id = r.json()["job_id"]
        time.sleep(4)  # twice the result TTL, no worker
        waiting = client.get(f"/v1/jobs/{job_id}", params={"wait": 0})
        assert waiting.status_code == 200 and waiting.json()["status"] == "queued"
        worker = start_worker(redis_server.url, "late", queue)
        try:
            done = client.get(f"/v1/jobs/{job_id}", params={"wait": 60}).json()
        finally:
            stop_worker(worker)
        assert done["status"] == "finished" and done["result"]["reward"] == 1.0
        # from the write on, the records have the result's TTL
        ttl = redis_server.client().ttl(f"sg:owner:{job_id}")
        assert 0 <= ttl <= 2 or ttl == -2  # (0: under a second left; -2: expired already on a slow machine)
