"""One source of grade counts, end to end: real API processes, a real Redis and a real worker.

The oracle is the responses the clients got: every grade they were answered is counted exactly
once, whichever API process graded it inline or whichever worker graded it off the queue, and the
status page and /metrics read the same ledger, so they agree with each other and with the oracle.
A tenant's view holds its own grades and faults only, even for a tenant whose name is another's
plus a suffix (the ledger's keys are built from names)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from app.jobs import grade_log
from app.tasks.synthetic.bank import SyntheticBank
from app.tenants import new_key
from tests.support.impl_jobs import until
from tests.support.redis_server import RedisServer
from tests.support.server import ROOT, running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real servers

JUDGE_URL = "http://127.0.0.1:9/v1"  # nothing listens: every judged item is a judge fault
GRADES = re.compile(
    r'^scaling_grader_grades_total\{grading="([^"]+)",outcome="([^"]+)",split="([^"]+)"\} (\S+)$', re.MULTILINE
)
BANK = SyntheticBank()


def _tenants(tmp: Path, names: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    keys, lines = {}, []
    for name in names:
        keys[name], digest = new_key()
        lines.append(
            f'[[tenant]]\nname = {json.dumps(name)}\nkey_sha256 = "{digest}"\nrate_per_second = 10000\n'
            f"burst = 10000\noperator = {'true' if name == 'ops' else 'false'}\n"
            f'judge_base_urls = ["{JUDGE_URL}"]\n'
        )
    path = tmp / "tenants.toml"
    path.write_text("\n".join(lines))
    return path, keys


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}  # "": a deployment without tenants


def _metrics_totals(url: str, key: str) -> Counter:
    text = httpx.get(url + "/metrics", headers=_auth(key), timeout=30).text
    return Counter({(split, grading, outcome): int(float(n)) for grading, outcome, split, n in GRADES.findall(text)})


def _status(url: str, key: str) -> dict:
    r = httpx.get(url + "/v1/status", headers=_auth(key), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _by_split_outcome(counts: Counter) -> dict[tuple[str, str], int]:
    found: Counter = Counter()
    for (split, _, outcome), n in counts.items():
        found[split, outcome] += n
    return dict(found)


def _status_counts(status: dict) -> dict[tuple[str, str], int]:
    grades = status["grades"]
    by_split = {(split, outcome): n for split, row in grades["by_split"].items() for outcome, n in row.items()}
    assert sum(sum(b["by_outcome"].values()) for b in grades["buckets"]) == sum(by_split.values())
    return by_split


class Grader:
    """Sends grades as a tenant, each on a new connection (so that every API process takes some),
    and keeps the oracle: what each tenant was answered."""

    def __init__(self, url: str, keys: dict[str, str]) -> None:
        self.url, self.keys = url, keys
        self.made: dict[str, Counter] = {name: Counter() for name in keys}

    def grade(self, tenant: str, body: dict) -> dict:
        r = httpx.post(self.url + "/v1/grade", json=body, headers=_auth(self.keys[tenant]), timeout=120)
        assert r.status_code == 200, r.text
        result = r.json()
        self.made[tenant][result["split"] or "inline", result["grading"], result["outcome"]] += 1
        return result

    def all(self) -> Counter:
        return sum(self.made.values(), Counter())


def _inline_mix(tenant: str, seed: int, right: int, wrong: int, reference: int) -> list[tuple[str, dict]]:
    bodies = []
    for i in range(right):
        task = f"synthetic/{seed}/{i}"
        bodies.append((tenant, {"task_id": task, "completion": "Final answer: " + ", ".join(BANK.get(task).gold)}))
    bodies += [
        (tenant, {"task_id": f"synthetic/{seed + 1}/{i}", "completion": "Final answer: 12345 furlongs"})
        for i in range(wrong)
    ]
    bodies += [
        (tenant, {"reference": {"values": ["3 s"]}, "completion": f"Final answer: {2 + i % 2} s"})
        for i in range(reference)
    ]
    return bodies


def test_status_and_metrics_count_every_grade_once_across_processes_and_a_worker(tmp_path: Path) -> None:
    # "alpha:1" is the attacker: its name is the victim's plus what a bucket key adds after a name
    tenants, keys = _tenants(tmp_path, ("ops", "alpha", "alpha:1"))
    redis_server = RedisServer().start()
    shared = tmp_path / "metrics"
    shared.mkdir()
    env = {
        "SCALING_GRADER_REDIS_URL": redis_server.url,
        "SCALING_GRADER_TENANTS_FILE": str(tenants),
        "PROMETHEUS_MULTIPROC_DIR": str(shared),
        "SCALING_GRADER_JUDGE__MAX_RETRIES": "0",
        "SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([JUDGE_URL]),
    }
    worker = start_worker(redis_server.url, "ledger-worker", env, queues="judge")
    try:
        with running_server(env, args=("--workers", "2")) as url:
            grader = Grader(url, keys)
            ops = {"Authorization": f"Bearer {keys['ops']}"}
            judge_tasks = [
                t["id"]
                for t in httpx.get(url + "/v1/tasks", params={"split": "exam", "n": 200}, headers=ops).json()["tasks"]
                if t["grading"] == "judge"
            ][:3]
            assert len(judge_tasks) == 3
            bodies = [
                *_inline_mix("alpha", 21, 12, 6, 4),
                *_inline_mix("alpha:1", 23, 5, 2, 3),
                *_inline_mix("ops", 25, 3, 1, 1),
            ]
            bodies += [
                (
                    "alpha",
                    {
                        "task_id": task,
                        "completion": "Final answer: yes",
                        "judge": {"model": "m", "base_url": JUDGE_URL},
                    },
                )
                for task in judge_tasks
            ]
            with concurrent.futures.ThreadPoolExecutor(12) as pool:
                results = list(pool.map(lambda tb: grader.grade(*tb), bodies))
            judged = [r for r in results if r["grading"] == "judge"]
            assert [r["outcome"] for r in judged] == ["judge_error"] * 3  # graded by the worker, off the queue
            made = grader.all()
            assert sum(made.values()) == len(bodies)

            # Each API process writes its counts within a second; then every scrape, whichever
            # process answers, and the status page read the same ledger.
            until(lambda: _metrics_totals(url, keys["ops"]) == made, 30, "every grade on /metrics")
            assert all(_metrics_totals(url, keys["ops"]) == made for _ in range(6))
            operator = _status(url, keys["ops"])
            assert _status_counts(operator) == _by_split_outcome(made)
            assert [f["kind"] for f in operator["faults"]] == ["judge_error"] * 3

            for name in ("alpha", "alpha:1"):
                own = _status(url, keys[name])
                assert own["view"] == "tenant"
                assert _status_counts(own) == _by_split_outcome(grader.made[name]), name
            victim, attacker = _status(url, keys["alpha"]), _status(url, keys["alpha:1"])
            assert [(f["kind"], f["where"].split("/")[1]) for f in victim["faults"]] == [("judge_error", "judge")] * 3
            assert attacker["faults"] == []
            page = httpx.get(url + "/", headers=_auth(keys["alpha:1"])).text
            assert "judge_error" not in page and f"({sum(grader.made['alpha:1'].values())} graded)" in page
            assert httpx.get(url + "/metrics", headers=_auth(keys["alpha:1"])).status_code == 403
            served_by = {p.name for p in shared.glob("counter_*.db")}
        assert len(served_by) >= 2, served_by  # both API processes answered some requests
        # The API processes stopped: what the ledger holds is still every grade, once.
        assert Counter(grade_log.totals(redis_server.client())) == made
    finally:
        stop_worker(worker)
        redis_server.close()


def test_inline_grades_made_while_redis_is_away_are_counted_when_it_returns() -> None:
    redis_server = RedisServer().start()
    try:
        with running_server({"SCALING_GRADER_REDIS_URL": redis_server.url}) as url:
            grader = Grader(url, {"local": ""})
            for tenant, body in _inline_mix("local", 31, 4, 2, 2):
                grader.grade(tenant, body)
            until(lambda: _metrics_totals(url, "") == grader.all(), 30, "the first grades")
            redis_server.stop()
            for tenant, body in _inline_mix("local", 33, 5, 3, 1):  # grading goes on
                grader.grade(tenant, body)
            assert _metrics_totals(url, "") == Counter()  # no figures while Redis is away, not wrong ones
            time.sleep(2)  # the API's writes fail meanwhile
            redis_server.start()
            until(lambda: _metrics_totals(url, "") == grader.all(), 30, "the grades made during the outage")
            assert _status_counts(_status(url, "")) == _by_split_outcome(grader.all())
            time.sleep(1.5)
            assert _metrics_totals(url, "") == grader.all()  # written once
    finally:
        redis_server.close()


def test_embedded_mode_counts_in_its_process_and_keeps_tenants_apart(tmp_path: Path) -> None:
    tenants, keys = _tenants(tmp_path, ("ops", "alpha", "beta"))
    with running_server({"SCALING_GRADER_TENANTS_FILE": str(tenants)}) as url:
        grader = Grader(url, keys)
        bodies = [*_inline_mix("alpha", 41, 4, 3, 2), *_inline_mix("beta", 43, 2, 1, 1)]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda tb: grader.grade(*tb), bodies))
        assert _metrics_totals(url, keys["ops"]) == grader.all()
        operator = _status(url, keys["ops"])
        assert operator["mode"] == "embedded" and _status_counts(operator) == _by_split_outcome(grader.all())
        for name in ("alpha", "beta"):
            assert _status_counts(_status(url, keys[name])) == _by_split_outcome(grader.made[name])


def test_embedded_mode_refuses_several_processes() -> None:
    """Its counts (and jobs) live in one process's memory: two could not add up."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--workers", "2"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "SCALING_GRADER_REDIS_URL"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "several --workers need SCALING_GRADER_REDIS_URL" in done.stderr
