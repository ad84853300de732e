"""/metrics of an API run as several processes (serve --workers 2) adds up every process's
figures: the same total on every scrape, whichever process answers it (the grade counter, read
from the grade ledger every process writes into, as well as the per-process request counters)."""

from __future__ import annotations

import concurrent.futures
import re
import time

import httpx
import pytest

from tests.support.server import running_server

pytestmark = pytest.mark.slow  # real servers

GRADES = 'scaling_grader_grades_total{grading="numeric",outcome="correct",split="inline"}'


def _count(text: str) -> float:
    match = re.search(rf"^{re.escape(GRADES)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_every_scrape_sums_all_processes(tmp_path, redis_server) -> None:
    shared = tmp_path / "metrics"
    shared.mkdir()  # an operator's own directory must exist before the processes start, as Prometheus asks
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    with running_server(env, args=("--workers", "2")) as url:
        sent = 120

        def grade(_: int) -> float:
            return float(httpx.post(url + "/v1/grade", json=body, timeout=60).json()["reward"])

        # many at once, each on a new connection: both processes accept some
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            assert list(pool.map(grade, range(sent))) == [1.0] * sent
        # each process writes its grades into the ledger within a second (app.jobs.redis_ledger)
        deadline = time.monotonic() + 30
        while _count(httpx.get(url + "/metrics").text) != sent and time.monotonic() < deadline:
            time.sleep(0.2)
        scrapes = [_count(httpx.get(url + "/metrics").text) for _ in range(8)]
        served_by = {p.name for p in shared.glob("counter_*.db")}
    assert len(served_by) >= 2, served_by  # both processes counted some (else the sum proves nothing)
    assert scrapes == [sent] * len(scrapes)
