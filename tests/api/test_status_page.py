"""The status page against a real deployment: a Redis server, the API with tenants on, and two
real worker processes. Figures are checked against RQ's own view of Redis, against the grades
this test made, and in a real headless chromium with the internet unreachable; a screenshot is
kept under artifacts/."""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from app import __version__
from app.api.status_page import render_status
from app.grade_ledger import GradeWindow
from app.main import create_app
from app.settings import Settings
from app.tasks.impl import reference
from app.tasks.synthetic.bank import SyntheticBank
from app.tenants import new_key
from tests.support.browser import CHROMIUM, DevToolsPage, ProxyTrap
from tests.support.redis_server import RedisServer
from tests.support.server import ROOT, free_port, stop_process, wait_until_up
from tests.support.workers import start_worker

ARTIFACTS = ROOT / "artifacts"
EXERCISE = "critical_batch_size"  # few, quick hidden cases
JUDGE_URL = "http://127.0.0.1:9/v1"  # nothing listens: every judged item is a judge fault
CANARY = "CANARY_7f3a_never_shown"
WORKERS = ("status-w1", "status-w2")


def _code(source: str) -> str:
    return f"```python\n{source}\n```\n"


RIGHT = _code(inspect.getsource(getattr(reference, EXERCISE)))
# Holds its worker: every hidden case sleeps until the sandbox's wall limit ends it.
SLOW = _code(f"def {EXERCISE}(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
             f"    import time  # {CANARY}\n    time.sleep(600)\n")


class Deployment:
    def __init__(self, tmp: Path) -> None:
        self.key, digest = new_key()
        tenants = tmp / "tenants.toml"
        tenants.write_text(f'[[tenant]]\nname = "ops"\nkey_sha256 = "{digest}"\nrate_per_second = 10000\n'
                           f'burst = 10000\noperator = true\njudge_base_urls = ["{JUDGE_URL}"]\n')
        self.redis = RedisServer().start()
        self.env = {**os.environ, "SCALING_GRADER_REDIS_URL": self.redis.url,
                    "SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([JUDGE_URL]),
                    "SCALING_GRADER_JUDGE__MAX_RETRIES": "0", "SCALING_GRADER_SANDBOX__WALL_SECONDS": "120",
                    "SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "1"}
        self.log = tmp / "api.log"
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with self.log.open("wb") as log:  # info level: the log is checked for the key
            self.api = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                 "--log-level", "info"],
                cwd=ROOT, env={**self.env, "SCALING_GRADER_TENANTS_FILE": str(tenants)},
                stdout=log, stderr=subprocess.STDOUT)
        self.workers = [start_worker(self.redis.url, name, {k: v for k, v in self.env.items()
                                                            if k.startswith("SCALING_GRADER_")})
                        for name in WORKERS]
        wait_until_up(self.url, self.api, timeout=60)
        self.client = httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.key}"})

    def close(self) -> None:
        self.client.close()
        for worker in self.workers:  # a cold stop: the slow jobs would hold a warm shutdown
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        stop_process(self.api)
        self.redis.close()

    def rq_workers(self) -> list[Worker]:
        return Worker.all(connection=self.redis.client(), serializer=JSONSerializer)


def _running_by_worker(connection) -> dict[str, str]:
    """Worker name -> the job it runs, read straight from Redis: the impl queue's StartedJobRegistry
    entries (job:execution) and each job's worker_name."""
    running = {}
    for member in connection.zrange("rq:wip:impl", 0, -1):
        job_id = member.decode().split(":", 1)[0]
        worker = connection.hget(f"rq:job:{job_id}", "worker_name")
        if worker:
            running[worker.decode()] = job_id
    return running


def _wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    deployment = Deployment(tmp_path_factory.mktemp("status"))
    try:
        yield deployment
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def graded(deployment):
    """Grades of known outcomes, then three slow impl jobs: two hold the workers, one waits."""
    client, bank = deployment.client, SyntheticBank()
    _wait_for(lambda: len([w for w in deployment.rq_workers()
                           if deployment.redis.client().hget(w.key, "sandbox_tier")]) == 2, 120, "two workers")
    made: dict[tuple[str, str], int] = {}

    def grade(body: dict) -> dict:
        r = client.post("/v1/grade", json=body)
        assert r.status_code == 200, r.text
        result = r.json()
        split = result["split"] or "inline"
        made[split, result["outcome"]] = made.get((split, result["outcome"]), 0) + 1
        return result

    for i in range(5):
        task = f"synthetic/11/{i}"
        grade({"task_id": task, "completion": "Final answer: " + ", ".join(bank.get(task).gold)})
    for i in range(3):
        grade({"task_id": f"synthetic/12/{i}", "completion": "Final answer: 12345 furlongs"})
    grade({"reference": {"values": ["3 s"]}, "completion": "Final answer: 3 s"})
    impl = grade({"task_id": f"impl/{EXERCISE}", "completion": RIGHT})
    assert impl["outcome"] == "correct"
    judge_task = next(t["id"] for t in client.get("/v1/tasks", params={"split": "exam", "n": 200}).json()["tasks"]
                      if t["grading"] == "judge")
    judged = grade({"task_id": judge_task, "completion": "Final answer: yes",
                    "judge": {"model": "m", "base_url": JUDGE_URL}})
    assert judged["outcome"] == "judge_error"
    slow_ids = []
    for i in range(3):
        r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": SLOW, "wait": 0,
                                           "request_id": f"slow-{i}"})
        assert r.status_code == 202, r.text
        slow_ids.append(r.json()["job_id"])
    _wait_for(lambda: set(_running_by_worker(deployment.redis.client())) == set(WORKERS), 60, "both workers busy")
    return {"made": made, "tier": impl["details"]["sandbox_tier"], "slow_ids": slow_ids, "judge_task": judge_task}


@pytest.mark.slow
def test_status_figures_match_redis_and_the_grades_made(deployment, graded) -> None:
    status = deployment.client.get("/v1/status").json()
    connection = deployment.redis.client()
    assert status["version"] == __version__ and status["mode"] == "redis" and status["ready"] is True

    splits = {s["name"]: s for s in deployment.client.get("/v1/splits").json()["splits"]}
    assert {s["name"]: s["size"] for s in status["splits"]} == {n: s.get("size") for n, s in splits.items()}

    workers = {w["name"]: w for w in status["workers"]}
    assert set(workers) == set(WORKERS) == {w.name for w in deployment.rq_workers()}
    for w in workers.values():
        assert w["sandbox_tier"] == graded["tier"]  # the tier that really graded the impl submission
        assert w["state"] == "busy" and w["current_job"]["kind"] == "impl"
    running = {w["current_job"]["id"] for w in workers.values()}
    assert {name: w["current_job"]["id"] for name, w in workers.items()} == _running_by_worker(connection)
    assert running < set(graded["slow_ids"]) and len(running) == 2

    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    impl = {k: v for k, v in status["queues"]["impl"].items() if k != "oldest_seconds"}  # its own test: queue age
    assert impl == {"queued": queue.count, "started": queue.started_job_registry.count,
                    "failed": queue.failed_job_registry.count}
    assert status["queues"]["impl"]["queued"] == 1 and status["queues"]["impl"]["started"] == 2

    counted = {(split, outcome): n for split, row in status["grades"]["by_split"].items() for outcome, n in row.items()}
    assert counted == graded["made"]
    assert sum(sum(b["by_outcome"].values()) for b in status["grades"]["buckets"]) == sum(graded["made"].values())
    judge_split = graded["judge_task"].split("/")[0]
    assert {"kind": "judge_error", "where": f"{judge_split}/judge"}.items() <= status["faults"][0].items()


@pytest.mark.slow
def test_metrics_report_queues_workers_and_every_grade(deployment, graded) -> None:
    text = deployment.client.get("/metrics").text
    queue = Queue("impl", connection=deployment.redis.client(), serializer=JSONSerializer)
    assert f'scaling_grader_queue_jobs{{queue="impl",state="queued"}} {float(queue.count)}' in text
    busy = len(_running_by_worker(deployment.redis.client()))
    assert f'scaling_grader_workers{{state="busy"}} {float(busy)}' in text and busy == 2
    judge_split = graded["judge_task"].split("/")[0]
    # the grade counter holds the queued grades the workers made and the inline ones the API made
    assert 'scaling_grader_grades_total{grading="impl",outcome="correct",split="impl"} 1.0' in text
    judged = f'scaling_grader_grades_total{{grading="judge",outcome="judge_error",split="{judge_split}"}}'
    assert f"{judged} 1.0" in text
    counted: dict[tuple[str, str], float] = {}
    for outcome, split, n in re.findall(r'^scaling_grader_grades_total\{grading="[^"]+",outcome="([^"]+)",'
                                        r'split="([^"]+)"\} (\S+)$', text, re.MULTILINE):
        counted[split, outcome] = counted.get((split, outcome), 0) + float(n)
    assert counted == graded["made"]  # the same figures as the status page's (the test above)
    assert "scaling_grader_redis_up 1.0" in text


@pytest.mark.slow
def test_status_never_shows_submitted_code_or_hidden_cases(deployment, graded) -> None:
    text = deployment.client.get("/v1/status").text + deployment.client.get("/").text
    assert CANARY not in text and "time.sleep" not in text
    assert "Final answer" not in text and "furlongs" not in text


@pytest.mark.slow
def test_status_page_needs_the_key_and_never_shows_it(deployment, graded) -> None:
    for path in ("/", "/v1/status", "/docs", "/openapi.json"):
        r = httpx.get(deployment.url + path)
        assert r.status_code == 401, path
    r = httpx.get(deployment.url + "/")
    assert r.headers["www-authenticate"].startswith("Basic ")  # the browser asks for the key
    wrong = base64.b64encode(b"ops:sg_wrong").decode()
    assert httpx.get(deployment.url + "/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401
    assert httpx.get(deployment.url + "/", headers={"Authorization": "Basic %%%"}).status_code == 401
    right = base64.b64encode(f"anyone:{deployment.key}".encode()).decode()
    page = httpx.get(deployment.url + "/", headers={"Authorization": f"Basic {right}"})
    assert page.status_code == 200 and deployment.key not in page.text
    # the same credentials serve the API (a script may use either scheme)
    assert httpx.get(deployment.url + "/v1/splits", headers={"Authorization": f"Basic {right}"}).status_code == 200
    # an API route keeps its bearer challenge: only pages a browser opens ask for Basic
    assert httpx.get(deployment.url + "/v1/splits").headers["www-authenticate"] == "Bearer"
    assert deployment.key not in deployment.log.read_text()


def test_status_page_without_tenants_is_open_and_embedded() -> None:
    client = TestClient(create_app(Settings()))
    page = client.get("/")
    assert page.status_code == 200 and 'id="mode">embedded mode' in page.text
    assert "<script" not in page.text and "http://" not in page.text and "https://" not in page.text
    # the browser is told to run no script and load nothing from elsewhere
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy and "frame-ancestors 'none'" in policy


def test_status_page_with_redis_down_says_so() -> None:
    client = TestClient(create_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")))
    page = client.get("/")
    assert page.status_code == 200
    assert "Redis is unreachable" in page.text and "not ready" in page.text
    assert "scaling_grader_redis_up 0.0" in client.get("/metrics").text


def test_grade_window_keeps_the_last_minutes_only() -> None:
    window = GradeWindow(bucket_seconds=10, buckets=3)
    window.add("synthetic", "correct", now=0)
    window.add("synthetic", "incorrect", now=5)
    assert window.counts(now=5) == {0: {("synthetic", "correct"): 1, ("synthetic", "incorrect"): 1}}
    for t in (12, 25, 31):
        window.add("synthetic", "correct", now=t)
    window.add("synthetic", "correct", now=21)  # the clock stepped back: counted in the newest bucket
    assert window.counts(now=35) == {10: {("synthetic", "correct"): 1}, 20: {("synthetic", "correct"): 1},
                                     30: {("synthetic", "correct"): 2}}
    assert window.counts(now=45) == {20: {("synthetic", "correct"): 1}, 30: {("synthetic", "correct"): 2}}
    assert window.counts(now=1000) == {}
    for i in range(50):
        window.add_fault("judge_error", f"exam/judge{i}")
    assert len(window.faults()) == 20 and window.faults()[0]["where"] == "exam/judge49"  # newest first


def test_values_from_redis_are_escaped() -> None:
    """Worker names and hostnames come from whoever registered them."""
    hostile = "<img src=x onerror=alert(1)>"
    status = {"version": "1", "mode": "redis", "generated_at": time.time(), "ready": True, "checks": {},
              "splits": [], "redis_error": None, "faults": [{"at": time.time(), "kind": hostile, "where": hostile}],
              "queues": {"impl": {"queued": 0, "started": 1, "failed": 0}},
              "workers": [{"name": hostile, "hostname": hostile, "pid": 1, "state": hostile, "queues": [hostile],
                           "sandbox_tier": hostile, "current_job": {"id": hostile, "kind": hostile,
                                                                    "running_seconds": 1.0},
                           "last_heartbeat": time.time(), "successful_jobs": 0, "failed_jobs": 0}],
              "grades": {"bucket_seconds": 10, "window_seconds": 300, "by_split": {hostile: {hostile: 1}},
                         "buckets": [{"start": 0, "by_outcome": {hostile: 1}}]}}
    page = render_status(status)
    assert "<img" not in page and "&lt;img" in page


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it)")
def test_status_page_in_a_real_browser_offline(deployment, graded) -> None:
    """The browser meets the 401 Basic challenge and answers it with the key, as a person would."""
    trap = ProxyTrap()
    page = DevToolsPage(trap, window=(1280, 1500), credentials=("ops", deployment.key))
    shot = ARTIFACTS / "status-page.png"
    try:
        page.open(deployment.url + "/")
        dom = page.dom()
        ARTIFACTS.mkdir(exist_ok=True)
        shot.unlink(missing_ok=True)
        page.screenshot(shot)
        # the docs, through the same credentials, list the operations
        page.open(deployment.url + "/docs")
        page.wait_for("document.querySelectorAll('.opblock').length > 0")
        operations = page.evaluate("document.querySelectorAll('.opblock').length")
        assert trap.page_requests() == []
    finally:
        page.close()
        trap.close()
    assert operations == len(deployment.client.get("/openapi.json").json()["paths"])
    assert shot.stat().st_size > 10_000
    assert deployment.key not in dom
    assert f'<b id="version">{__version__}</b>' in dom and "redis mode" in dom
    for name in WORKERS:
        assert name in dom
    assert dom.count(graded["tier"]) >= 2
    status = deployment.client.get("/v1/status").json()
    for worker in status["workers"]:
        assert worker["current_job"]["id"][:12] in dom
    assert dom.count("<rect ") >= 2  # the chart has bars
    for split in status["splits"]:
        assert f"<b>{split['name']}</b>" in dom
        if split["size"]:
            assert f"<td class=\"n\">{split['size']}</td>" in dom
    assert "judge_error × 1" in dom
