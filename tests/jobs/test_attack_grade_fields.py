"""Attack (fresh reviewer): the grade ledger's 10-second buckets are one hash for the whole deployment,
a grade adding to one field ``tenant|split|outcome`` (``split|outcome`` without a tenant). A hostile
tenant name (the separator in it, a name that is another's field, newlines, unicode, NUL, a huge
name) must not move grades between tenants, hide or inflate the deployment's figures, or break the
readers (the status page, /metrics) -- through each of the three writers: an API process's pipeline
(count_grade), its batched ledger (RedisLedger: JSON decoded by Lua's cjson) and a worker's result
script (leases.publish). Real Redis; one test with real API processes and a tenants file."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from app.grade_ledger import bucket_start
from app.jobs import grade_log
from app.jobs.leases import Lease, new_token
from app.jobs.redis_ledger import RedisLedger
from app.tenants import TenantsFileError, load_tenants, new_key
from tests.support.grade_counts import window_totals
from tests.support.impl_jobs import until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # a Redis server per test

SPLITS = ("synthetic", "exam", "inline", "book")
OUTCOMES = ("correct", "incorrect", "judge_error", "no_answer")
# Every name is allowed by the tenants file (any non-empty string): each one aimed at a parse.
HOSTILE = [
    "a", "a|", "|", "||", "|a", "a||b", "a|synthetic", "synthetic|correct", "a|synthetic|correct",
    "synthetic", "correct", "inline", "judge_error", "a\nb", "a\r\nb|x", "\x00", "a\x00|b", " ", "😀",
    "é|ü", "a" * 5000, "ops|exam|judge_error",
]


def _labels(i: int) -> tuple[str, str, str]:
    return SPLITS[i % len(SPLITS)], "numeric", OUTCOMES[(i // len(SPLITS)) % len(OUTCOMES)]


def test_hostile_tenant_names_keep_their_own_counts_through_every_writer(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    now = time.time()
    oracle: dict[str | None, Counter] = {name: Counter() for name in [None, *HOSTILE]}
    ledger = RedisLedger(connection, interval=3600)  # written by flush() below only
    try:
        for i, name in enumerate([None, *HOSTILE]):
            split, grading, outcome = _labels(i)
            # an API process's pipeline: i + 1 grades
            with connection.pipeline() as pipe:
                for _ in range(i + 1):
                    grade_log.count_grade(pipe, split, grading, outcome, now=now, tenant=name)
                pipe.execute()
            # its batched ledger (the JSON batch, cjson in the script): 2 grades
            for _ in range(2):
                ledger.add((split, grading, outcome), name, now)
            # a worker's result script: 1 grade (its field from grade_count, as worker/jobs.py makes it)
            lease = Lease(connection, f"s36-job-{i}", new_token("s36"), 10_000)
            assert lease.take(60) == 1
            count = grade_log.grade_count(split, grading, outcome, now=now, tenant=name)
            assert lease.publish('{"reward": 1.0}', name or "", 60, count) == 1
            oracle[name][split, outcome] += i + 1 + 2 + 1
        ledger.flush()
    finally:
        ledger.close()

    deployment = sum(oracle.values(), Counter())
    assert window_totals(grade_log.window(connection, now)) == dict(deployment)  # neither hidden nor inflated
    for name in HOSTILE:
        assert window_totals(grade_log.window(connection, now, tenant=name)) == dict(oracle[name]), repr(name[:20])
    # a name no tenant has, and names one step from a real one, see nothing
    for stranger in ("nobody", "a|a", "synthetic|", "|synthetic", "😀|", "a\n"):
        assert grade_log.window(connection, now, tenant=stranger) == {}, stranger
    # the bucket holds one field per (tenant, split, outcome), with its TTL
    key = grade_log.bucket_key(bucket_start(now))
    assert connection.hlen(key) == len(oracle)
    assert 0 < connection.ttl(key) <= grade_log.GradeCount("", ()).bucket_ttl


def test_a_tenant_name_that_is_not_a_string_is_refused_or_sees_its_own_grades(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """TOML lets an operator write ``name = 7`` (or true, 1.5, a date). Every writer formats the
    name into the field ("7|exam|correct"; a worker reads it back from the job's JSON payload and
    str()s it), but the reader compares the parsed name with the tenant's own object: 7 != "7",
    so such a tenant's status page showed none of its grades (before the shared bucket, its own
    bucket's key was formatted the same way by reader and writers, and it saw them). A name that
    is a list made load_tenants raise TypeError, which the live reload does not catch."""
    connection = redis_server.client()
    _, digest = new_key()
    for raw in ("7", "true", "1.5", "2024-01-01", '["x"]'):
        path = tmp_path / "tenants.toml"
        path.write_text(f'[[tenant]]\nname = {raw}\nkey_sha256 = "{digest}"\n')
        try:
            tenant = next(iter(load_tenants(path).values()))
        except TenantsFileError:
            continue  # refused, with the tenants file's own error: fine
        connection.flushall()
        with connection.pipeline() as pipe:
            grade_log.count_grade(pipe, "exam", "judge", "correct", tenant=tenant.name)
            pipe.execute()
        # a worker's view of the same tenant: the name as the job's JSON payload carries it
        payload_tenant = str(json.loads(json.dumps({"tenant": tenant.name}, default=str))["tenant"])
        lease = Lease(connection, "s36-typed", new_token("s36"), 10_000)
        lease.take(60)
        lease.publish("{}", payload_tenant, 60, grade_log.grade_count("exam", "judge", "correct",
                                                                        tenant=payload_tenant))
        assert window_totals(grade_log.window(connection, tenant=tenant.name)) == {("exam", "correct"): 2}, raw


# ------------------------------------------------------------------ real API processes

STATUS_NAMES = ("ops", "a|synthetic", "synthetic|correct", "x\ny|", "😀", "correct")


def _tenants_file(tmp: Path) -> tuple[Path, dict[str, str]]:
    keys, lines = {}, []
    for name in STATUS_NAMES:
        keys[name], digest = new_key()
        lines.append(f"[[tenant]]\nname = {json.dumps(name, ensure_ascii=False)}\nkey_sha256 = \"{digest}\"\n"
                     f"rate_per_second = 10000\nburst = 10000\noperator = {'true' if name == 'ops' else 'false'}\n")
    path = tmp / "tenants.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, keys


def _status(url: str, key: str) -> dict:
    r = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _status_counts(status: dict) -> Counter:
    return Counter({(split, outcome): n for split, row in status["grades"]["by_split"].items()
                    for outcome, n in row.items()})


def test_status_and_metrics_of_hostile_names_on_a_real_server(tmp_path: Path) -> None:
    from app.tasks.synthetic.bank import SyntheticBank

    bank = SyntheticBank()
    tenants, keys = _tenants_file(tmp_path)
    redis_server = RedisServer().start()
    try:
        env = {"SCALING_GRADER_REDIS_URL": redis_server.url, "SCALING_GRADER_TENANTS_FILE": str(tenants)}
        with running_server(env) as url:
            made: dict[str, Counter] = {name: Counter() for name in STATUS_NAMES}
            for n, name in enumerate(STATUS_NAMES):
                for i in range(n + 1):
                    task = f"synthetic/{40 + n}/{i}"
                    answer = ", ".join(bank.get(task).gold) if i % 2 == 0 else "12345 furlongs"
                    r = httpx.post(url + "/v1/grade", json={"task_id": task, "completion": f"Final answer: {answer}"},
                                   headers={"Authorization": f"Bearer {keys[name]}"}, timeout=60)
                    assert r.status_code == 200, r.text
                    made[name][r.json()["split"], r.json()["outcome"]] += 1
            everyone = sum(made.values(), Counter())
            until(lambda: _status_counts(_status(url, keys["ops"])) == everyone, 20, "every grade on the status page")
            for name in STATUS_NAMES[1:]:
                own = _status(url, keys[name])
                assert own["view"] == "tenant"
                assert _status_counts(own) == made[name], repr(name)
                page = httpx.get(url + "/", headers={"Authorization": f"Bearer {keys[name]}"}, timeout=30)
                assert page.status_code == 200, repr(name)
            metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {keys['ops']}"}, timeout=30)
            assert metrics.status_code == 200 and "scaling_grader_grades_total" in metrics.text
    finally:
        redis_server.close()
