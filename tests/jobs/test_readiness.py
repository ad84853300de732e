"""/readyz in Redis mode says not ready for impl unless a live impl worker can grade: none live,
only judge workers, or only workers whose sandbox starts fail or that are at their pid limit."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from app.jobs import presence, worker_health
from app.jobs.readiness import FAULT_STREAK, trouble
from tests.support.impl_jobs import FAST_QUEUE
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

HEALTHY = {"name": "w", "queues": ["impl", "judge"], "meets_min_tier": True, "sandbox_fault_streak": 0,
           "pids": [40, 4096]}


@pytest.mark.parametrize(("change", "reason"), [
    ({}, None),
    ({"pids": None}, None),  # no pid limit set
    ({"sandbox_fault_streak": FAULT_STREAK - 1}, None),
    ({"sandbox_fault_streak": FAULT_STREAK}, "sandbox starts failing"),
    ({"pids": [3700, 4096]}, "near its pid limit"),
    ({"pids": [4096, 4096]}, "near its pid limit"),
    ({"meets_min_tier": False}, "sandbox below the minimum tier"),
])
def test_which_workers_count_as_able_to_grade(change, reason) -> None:
    assert trouble({**HEALTHY, **change}) == reason


def test_the_fault_streak_counts_consecutive_sandbox_faults_only() -> None:
    for outcome in ["sandbox_error", "sandbox_error", "correct", "sandbox_error"]:
        worker_health.note_impl_outcome(outcome)
    assert worker_health.fields()["sandbox_fault_streak"] == 1
    worker_health.note_impl_outcome("timeout")  # the candidate's fault, not the sandbox's
    assert worker_health.fields()["sandbox_fault_streak"] == 0


def _ready(client: httpx.Client) -> tuple[int, dict]:
    r = client.get("/readyz")
    return r.status_code, r.json()["checks"]["impl_workers"]


@pytest.mark.slow
def test_readyz_is_not_ready_for_impl_without_a_worker_that_can_grade(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    connection = redis_server.client()
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        status, check = _ready(client)
        assert status == 503 and not check["ok"] and "no live impl worker" in check["info"]
        # a judge-only worker does not make impl ready
        presence.publish(connection, "judge-only", json.dumps({**HEALTHY, "name": "judge-only", "queues": ["judge"]}),
                         ttl=30)
        presence.list_name(connection, "judge-only")
        assert _ready(client)[0] == 503
        # nor does an impl worker whose every sandbox start fails
        presence.publish(connection, "failing", json.dumps({**HEALTHY, "name": "failing",
                                                            "sandbox_fault_streak": FAULT_STREAK}), ttl=30)
        presence.list_name(connection, "failing")
        status, check = _ready(client)
        assert status == 503 and check["info"].startswith("0 of 1")
        worker = start_worker(redis_server.url, "able", FAST_QUEUE)
        try:
            deadline = time.monotonic() + 120
            while _ready(client)[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            status, check = _ready(client)
            assert status == 200 and check["info"].startswith("1 of 2")
            able = json.loads(connection.get("sg:worker:able"))
            assert able["sandbox_fault_streak"] == 0 and "beat_lag_max" in able
        finally:
            stop_worker(worker)
        presence.withdraw(connection, "failing")
        assert _ready(client)[0] == 503  # the worker's stop withdrew its presence
