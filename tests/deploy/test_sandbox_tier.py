"""The minimum sandbox tier (SCALING_GRADER_SANDBOX__MIN_TIER) and the workers' tier reports,
with a real Redis, real worker processes and a real API server: a worker whose sandbox is weaker
than required refuses impl jobs (it never downgrades silently), embedded mode does the same, and
/readyz lists each live worker with its tier."""

from __future__ import annotations

import inspect
import os
import signal
import time

import httpx
import pytest

from app.sandbox.tier_order import meets_minimum, refusal
from app.settings import TIER_ORDER
from app.tasks.impl import reference
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

FAST = {"SCALING_GRADER_QUEUE__HEARTBEAT_INTERVAL": "1", "SCALING_GRADER_QUEUE__HEARTBEAT_GRACE": "2",
        "SCALING_GRADER_QUEUE__MAINTENANCE_INTERVAL": "1", "SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "0"}
# Forced to the plain tier, with bubblewrap required: this worker must refuse impl work.
WEAK = {"SCALING_GRADER_SANDBOX__TIER": "plain", "SCALING_GRADER_SANDBOX__MIN_TIER": "bubblewrap"}
RIGHT = "```python\n" + inspect.getsource(reference.critical_batch_size) + "```\n"
IMPL = {"task_id": "impl/critical_batch_size", "completion": RIGHT, "all_or_nothing": True}


def _workers(client: httpx.Client, want: int, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    workers: list[dict] = []
    while time.monotonic() < deadline:
        workers = client.get("/readyz").json().get("workers", [])
        if len(workers) == want:
            return workers
        time.sleep(0.3)
    raise AssertionError(f"{len(workers)} workers listed, expected {want}: {workers}")


def test_tier_order_and_refusal_text() -> None:
    for i, tier in enumerate(TIER_ORDER):
        for j, minimum in enumerate(TIER_ORDER):
            assert meets_minimum(f"{tier}+seccomp", minimum) == (i >= j)
            assert meets_minimum(tier, minimum) == (i >= j)
            assert (refusal(tier, minimum) is None) == (i >= j)
    assert not meets_minimum(None, "plain") and "no sandbox tier works" in (refusal(None, "plain") or "")
    assert not meets_minimum("gvisor-lookalike", "plain")  # an unknown tier never passes


@pytest.mark.slow
def test_readyz_lists_live_workers_with_their_tier_and_drops_dead_ones(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/readyz").json()["workers"] == []
        strong = start_worker(redis_server.url, "strong", FAST)
        judge_only = start_worker(redis_server.url, "judge-only", FAST, queues="judge")
        try:
            workers = {w["name"]: w for w in _workers(client, 2)}
            assert workers["judge-only"]["sandbox_tier"] is None and workers["judge-only"]["queues"] == ["judge"]
            strong_record = workers["strong"]  # the tier this host really gives, probed by the worker
            assert strong_record["queues"] == ["impl", "judge"] and strong_record["sandbox_tier"]
            assert strong_record["meets_min_tier"] is True and strong_record["min_tier"] == "plain"
            os.killpg(strong.pid, signal.SIGKILL)  # no clean-up runs: the record must expire by itself
            strong.wait()
            assert [w["name"] for w in _workers(client, 1, timeout=30)] == ["judge-only"]
            stop_worker(judge_only)  # a clean stop removes the record at once
            assert _workers(client, 0, timeout=10) == []
        finally:
            stop_worker(strong)
            stop_worker(judge_only)


@pytest.mark.slow
def test_a_worker_below_the_minimum_tier_refuses_impl_jobs(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        weak = start_worker(redis_server.url, "weak", {**FAST, **WEAK})
        try:
            (record,) = _workers(client, 1)
            assert record["sandbox_tier"].startswith("plain") and record["min_tier"] == "bubblewrap"
            assert record["meets_min_tier"] is False
            graded = client.post("/v1/grade", json={**IMPL, "wait": 60})
        finally:
            stop_worker(weak)
    assert graded.status_code == 200, graded.text
    body = graded.json()
    # correct code, but never run: no reward, and the reason says why
    assert body["outcome"] == "sandbox_error" and body["reward"] == 0.0
    assert "below the minimum tier 'bubblewrap'" in body["explanation"]
    assert body["details"]["sandbox_tier"].startswith("plain") and "cases" not in body["details"]


@pytest.mark.slow
def test_embedded_mode_honours_the_minimum_tier() -> None:
    with running_server({**FAST, **WEAK}) as url, httpx.Client(base_url=url, timeout=60) as client:
        ready = client.get("/readyz")
        graded = client.post("/v1/grade", json=IMPL).json()
    assert ready.status_code == 503
    sandbox = ready.json()["checks"]["sandbox"]
    assert not sandbox["ok"] and sandbox["info"]["meets_min_tier"] is False
    assert graded["outcome"] == "sandbox_error" and graded["reward"] == 0.0
    assert "below the minimum tier" in graded["explanation"]


@pytest.mark.slow
def test_the_minimum_is_met_where_bubblewrap_works() -> None:
    env = {**FAST, "SCALING_GRADER_SANDBOX__MIN_TIER": "bubblewrap"}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        sandbox = client.get("/readyz").json()["checks"]["sandbox"]["info"]
        if not meets_minimum(sandbox["tier"], "bubblewrap"):
            pytest.skip(f"bubblewrap does not run on this host ({sandbox['probes']})")
        graded = client.post("/v1/grade", json=IMPL).json()
    assert graded["outcome"] == "correct" and graded["reward"] == 1.0
    assert graded["details"]["sandbox_tier"].startswith("bubblewrap")
