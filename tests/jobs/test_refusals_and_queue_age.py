"""429s and queue age where an operator looks: the status page and /metrics count every API
replica's refusals (kept in Redis) by reason, and show how long the next job out of each queue
has waited."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from app.tenants import new_key
from tests.support.impl_jobs import EXERCISE, RIGHT
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # real servers


def _metric(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.MULTILINE)
    assert match, f"{name}{{{labels}}} not in /metrics"
    return float(match.group(1))


def test_refusals_and_the_waiting_jobs_age_show_on_every_replica(tmp_path, redis_server) -> None:
    (capped_key, capped_digest), (operator_key, operator_digest) = new_key(), new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "capped"\nkey_sha256 = "{capped_digest}"\nmax_in_flight = 1\n'
                    f'rate_per_second = 0.01\nburst = 3\n'
                    f'[[tenant]]\nname = "operator"\nkey_sha256 = "{operator_digest}"\noperator = true\n')
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, "SCALING_GRADER_TENANTS_FILE": str(path)}
    body = {"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0}
    with running_server(env) as first, running_server(env) as second:  # two replicas, one Redis
        capped = {"Authorization": f"Bearer {capped_key}"}
        statuses = [httpx.post(first + "/v1/grade", headers=capped, json=body).status_code for _ in range(2)]
        statuses += [httpx.post(second + "/v1/grade", headers=capped, json=body).status_code for _ in range(2)]
        assert statuses == [202, 429, 429, 429]  # queued; in flight twice; then over the rate
        time.sleep(1.5)  # the queued job waits: no worker runs
        operator = {"Authorization": f"Bearer {operator_key}"}
        for replica in (first, second):
            status = httpx.get(replica + "/v1/status", headers=operator).json()
            assert status["refused"] == {"rate_limited": 1, "too_many_in_flight": 2}
            assert status["queues"]["impl"]["queued"] == 1 and status["queues"]["impl"]["oldest_seconds"] >= 1
            page = httpx.get(replica + "/", headers=operator).text
            assert "rate_limited 1" in page and "too_many_in_flight 2" in page
            metrics = httpx.get(replica + "/metrics", headers=operator).text
            assert _metric(metrics, "scaling_grader_deployment_refused_total", 'reason="too_many_in_flight"') == 2
            assert _metric(metrics, "scaling_grader_deployment_refused_total", 'reason="rate_limited"') == 1
            assert _metric(metrics, "scaling_grader_queue_oldest_seconds", 'queue="impl"') >= 1
        # each process counts its own too
        own = httpx.get(second + "/metrics", headers=operator).text
        assert _metric(own, "scaling_grader_refused_total", 'reason="rate_limited"') == 1
