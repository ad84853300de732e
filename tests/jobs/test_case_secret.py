"""One reward per completion whoever grades it: every worker of a deployment draws hidden cases
from the same case secret, with none configured by hand (app.jobs.case_secret)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import time

import httpx
import pytest
from pydantic import SecretStr

from app.graders.impl_cases import case_seed, draw_cases
from app.grading.models import completion_text
from app.jobs.case_secret import KEY, deployment_secret, forget_known_secret, with_deployment_secret
from app.settings import ImplSettings, Settings, get_settings
from app.tasks.impl.exercises import BY_NAME
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, collect, completion
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

# Right only where the chip's FLOPs-to-bandwidth ratio is small: how many hidden cases it passes
# depends on which cases were drawn, so on the case secret.
HALF_RIGHT_SOURCE = (
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math\n"
    "    if peak_flops / hbm_bandwidth < 600:\n"
    "        return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
    "    return 1\n"
)
HALF_RIGHT = completion(HALF_RIGHT_SOURCE)


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    """Each test is a deployment of its own: this process has not read any secret yet."""
    forget_known_secret()
    yield
    forget_known_secret()


def _fraction_passed(secret: str) -> float:
    """The reward the half-right completion earns under a secret, computed here without a sandbox
    (the oracle the test below is checked against)."""
    namespace: dict = {}
    exec(HALF_RIGHT_SOURCE, namespace)  # the test's own code
    settings = Settings(impl=ImplSettings(case_secret=SecretStr(secret)))
    exercise = BY_NAME[EXERCISE]
    seed = case_seed(settings, exercise.task_id, completion_text(HALF_RIGHT))  # of the text graded
    cases = draw_cases(exercise, seed, settings)
    return sum(namespace["critical_batch_size"](*c.args) == c.expected for c in cases) / len(cases)


def test_the_half_right_completion_scores_differently_under_different_secrets() -> None:
    # What the deployment-wide secret prevents: with a secret per worker, rewards would differ.
    assert len({_fraction_passed(os.urandom(16).hex()) for _ in range(12)}) > 1


def test_the_first_secret_stored_is_the_one_every_caller_gets(redis_server) -> None:
    connection = redis_server.client()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        secrets = set(pool.map(lambda _: deployment_secret(redis_server.client()), range(32)))
    assert len(secrets) == 1
    stored = connection.get(KEY)
    assert stored is not None and secrets == {stored.decode()} and len(stored) == 64


def test_a_configured_secret_wins_and_redis_is_not_touched(redis_server) -> None:
    connection = redis_server.client()
    configured = Settings(impl=ImplSettings(case_secret=SecretStr("operator-secret")))
    assert with_deployment_secret(configured, connection) is configured
    assert connection.get(KEY) is None
    shared = with_deployment_secret(Settings(), connection)
    assert shared.impl.case_secret is not None
    assert shared.impl.case_secret.get_secret_value() == connection.get(KEY).decode()


@pytest.mark.slow
def test_two_workers_without_a_configured_secret_give_the_same_reward(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    env.pop("SCALING_GRADER_IMPL__CASE_SECRET", None)
    assert "SCALING_GRADER_IMPL__CASE_SECRET" not in os.environ
    names = ("grader-a", "grader-b")
    connection = redis_server.client()
    # The deployment's secret as the first worker would store it (SET NX, tested above), drawn
    # until the completion is really half right under it: under some draws it passes every case,
    # and equal rewards of 1.0 would show nothing.
    secret = next(s for s in (os.urandom(32).hex() for _ in range(200)) if 0 < _fraction_passed(s) < 1)
    assert connection.set(KEY, secret, nx=True)
    workers = [start_worker(redis_server.url, name, FAST_QUEUE) for name in names]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(connection.exists(f"sg:worker:{n}") for n in names):
            time.sleep(0.2)
        with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
            job_ids = []
            for i in range(10):
                r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": HALF_RIGHT,
                                                   "wait": 0, "request_id": f"same-{i}"})
                assert r.status_code == 202, r.text
                job_ids.append(r.json()["job_id"])
            results = collect(client, job_ids, timeout=240)
    finally:
        for worker in workers:
            stop_worker(worker)
    # (RQ drops a job's records once it succeeded: the workers' own counts say who ran them, written
    # as a lane goes idle or stops)
    graded_by = {n: int(connection.hget(f"rq:worker:{n}", "successful_job_count") or 0) for n in names}
    assert len(results) == len(job_ids)
    assert sum(graded_by.values()) == len(job_ids) and all(graded_by.values()), graded_by  # both workers graded some
    rewards = {body["result"]["reward"] for body in results.values()}
    assert connection.get(KEY).decode() == secret  # no worker drew a secret of its own
    expected = _fraction_passed(secret)
    assert rewards == {expected}, (rewards, graded_by)


def test_replay_uses_the_secret_stored_in_redis(redis_server, monkeypatch, capsys) -> None:
    from tests.graders.test_impl_cases import run_cli

    monkeypatch.setenv("SCALING_GRADER_REDIS_URL", redis_server.url)
    monkeypatch.delenv("SCALING_GRADER_IMPL__CASE_SECRET", raising=False)
    get_settings.cache_clear()
    try:
        assert run_cli(["impl", "replay", "--task", "impl/torus_stats", "--seed", "0" * 32]) == 2  # none yet
        assert "no case secret" in capsys.readouterr().err
        secret = deployment_secret(redis_server.client())
        shared = Settings(impl=ImplSettings(case_secret=SecretStr(secret)))
        seed = case_seed(shared, "impl/torus_stats", "some completion")
        assert run_cli(["impl", "replay", "--task", "impl/torus_stats", "--seed", seed]) == 0
        printed = json.loads(capsys.readouterr().out)
        drawn = draw_cases(BY_NAME["torus_stats"], seed, shared)
        assert [p["expected"] for p in printed] == [c.expected for c in drawn]
    finally:
        get_settings.cache_clear()


def test_a_process_that_read_the_secret_puts_it_back_when_redis_loses_it(redis_server) -> None:
    connection = redis_server.client()
    first = deployment_secret(connection)
    connection.flushall()  # a restart without persistence, a fresh volume
    # A caller that never read it (a second process would, racing with SET NX) cannot win the
    # race against our restore here, so the restored value is the one every caller then reads.
    assert deployment_secret(connection) == first
    assert connection.get(KEY).decode() == first
    forget_known_secret()  # another process, started after the restore
    assert deployment_secret(connection) == first


def test_a_process_follows_a_secret_another_stored_first_after_the_loss(redis_server) -> None:
    connection = redis_server.client()
    mine = deployment_secret(connection)
    connection.flushall()
    assert connection.set(KEY, "b" * 64, nx=True)  # a process that never saw the old one won the race
    # Workers must agree with each other above all: this one follows Redis rather than keep its own.
    assert deployment_secret(connection) == "b" * 64 != mine


def test_an_empty_configured_secret_counts_as_none(redis_server) -> None:
    # compose passes ${CASE_SECRET:-} as an empty string when none was generated
    connection = redis_server.client()
    shared = with_deployment_secret(Settings(impl=ImplSettings(case_secret=SecretStr(""))), connection)
    assert shared.impl.case_secret is not None
    assert shared.impl.case_secret.get_secret_value() == connection.get(KEY).decode() != ""
