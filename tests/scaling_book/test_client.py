"""The httpx clients against the real service (directly, and behind a proxy that fails on
purpose): batching keeps order, retries follow the server's hints, refusals are not retried."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from contextlib import contextmanager

import httpx
import pytest

from scaling_book.client import AsyncGraderClient, GraderClient, GraderError, RetryPolicy, retry_after_seconds
from tests.support.flaky import Script, flaky_proxy
from tests.support.oracle import right, synthetic_tasks, wrong

FAST = RetryPolicy(max_retries=3, backoff=0.01, max_backoff=0.05)


def _items(n: int, seed: int) -> tuple[list[dict], list[float]]:
    rng = random.Random(seed)
    items, expected = [], []
    for task in synthetic_tasks(n, seed=seed):
        make, reward = rng.choice([(right, 1.0), (wrong, 0.0)])
        items.append({"task_id": task.id, "completion": make(task.id)})
        expected.append(reward)
    return items, expected


@pytest.mark.slow
def test_batches_are_split_into_chunks_and_keep_order(server_url: str) -> None:
    items, expected = _items(23, seed=21)
    script = Script()
    with flaky_proxy(server_url, script) as url, GraderClient(url, batch_size=5) as client:
        results = client.grade_batch(items)
        rewards = client.rewards(items)
    assert [r.reward for r in results] == expected and rewards == expected
    assert [r.task_id for r in results] == [i["task_id"] for i in items]
    assert script.seen.count("POST /v1/grade/batch") == 5 and script.seen.count("POST /v1/rewards") == 5


def test_async_client_sends_chunks_concurrently_and_keeps_order(server_url: str) -> None:
    items, expected = _items(17, seed=22)

    async def go() -> tuple[list, list]:
        async with AsyncGraderClient(server_url, batch_size=4, concurrency=3) as client:
            return await client.grade_batch(items), await client.rewards(items)

    results, rewards = asyncio.run(go())
    assert [r.reward for r in results] == expected and rewards == expected


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503])
def test_retries_on_busy_statuses_then_succeeds(server_url: str, status: int) -> None:
    items, expected = _items(3, seed=23)
    script = Script(failures=[(status, "0"), (status, "0")])
    with flaky_proxy(server_url, script) as url, GraderClient(url, retry=FAST) as client:
        assert client.rewards(items) == expected
    assert len(script.seen) == 3  # two refusals, then the real answer


def test_async_client_retries_too(server_url: str) -> None:
    items, expected = _items(3, seed=24)
    script = Script(failures=[(503, None), (429, "0")])

    async def go() -> list:
        async with AsyncGraderClient(url, retry=FAST) as client:
            return await client.rewards(items)

    with flaky_proxy(server_url, script) as url:
        assert asyncio.run(go()) == expected
    assert len(script.seen) == 3


def test_retries_stop_after_the_budget_with_the_last_status(server_url: str) -> None:
    script = Script(failures=[(429, "0")] * 10)
    with flaky_proxy(server_url, script) as url, GraderClient(url, retry=FAST) as client, \
            pytest.raises(GraderError) as caught:
        client.rewards(_items(1, seed=25)[0])
    assert caught.value.status == 429 and len(script.seen) == FAST.max_retries + 1


def test_refusals_are_not_retried(server_url: str) -> None:
    script = Script()
    with flaky_proxy(server_url, script) as url, GraderClient(url, retry=FAST) as client, \
            pytest.raises(GraderError) as caught:
        client.grade(None, "Final answer: 1 s")  # neither task_id nor reference
    assert caught.value.status == 422 and caught.value.error == "invalid_request" and len(script.seen) == 1


@pytest.mark.slow
def test_a_stalled_request_times_out_and_is_retried(server_url: str) -> None:
    items, expected = _items(2, seed=26)
    # The timeout leaves a loaded machine room for the request that is not stalled (with 0.5 s,
    # four test workers on two cores once made it time out too); the stall is well past it.
    script = Script(stall_seconds=6.0, stalls=1)
    with flaky_proxy(server_url, script) as url, GraderClient(url, retry=FAST, timeout=2.0) as client:
        assert client.rewards(items) == expected
    assert len(script.seen) == 2


def test_retry_after_header_wins_over_backoff() -> None:
    policy = RetryPolicy(backoff=100.0, max_backoff=100.0, max_retry_after=30.0)
    rng = random.Random(0)
    hinted = httpx.Response(429, headers={"retry-after": "7"})
    assert 7.0 <= policy.delay(0, hinted, rng) <= 7.7  # what the server asked, plus a little jitter
    assert policy.delay(0, httpx.Response(503, headers={"retry-after": "3600"}), rng) == policy.max_retry_after
    soon = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 <= retry_after_seconds(soon) <= 20
    assert retry_after_seconds("soon-ish") is None


def test_backoff_grows_exponentially_with_full_jitter() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=4.0)
    rng = random.Random(1)
    for attempt in range(6):
        ceiling = min(policy.max_backoff, policy.backoff * 2**attempt)
        delays = [policy.delay(attempt, None, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > 0.8 * ceiling  # jitter spans the whole window, not a fixed delay


def test_the_retry_deadline_bounds_the_whole_call() -> None:
    # Nothing listens on this port: every attempt fails to connect, and the deadline (not a
    # retry count) ends the call, close to when it says.
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = GraderClient(f"http://127.0.0.1:{port}", retry_deadline=1.5, seed=1)
    start = time.monotonic()
    with pytest.raises(GraderError) as caught:
        client.tasks("synthetic", n=1)
    elapsed = time.monotonic() - start
    assert caught.value.status is None and 1.5 <= elapsed < 6.0
    assert RetryPolicy().deadline == 120.0 and client.retry.deadline == 1.5


@pytest.mark.slow
def test_every_call_rides_out_a_twenty_second_restart() -> None:
    """A service stopped for 20 s in the middle of a run: every call made before, during and
    after the outage succeeds (idempotent calls are retried until the 60 s deadline)."""
    import threading
    import time

    from tests.support.server import free_port

    port = free_port()
    tasks = synthetic_tasks(4, seed=72)
    items = [{"task_id": t.id, "completion": right(t.id)} for t in tasks]
    outcomes: list[tuple[str, object]] = []
    lock = threading.Lock()

    def caller(kind: str, stop: threading.Event) -> None:
        sync = GraderClient(f"http://127.0.0.1:{port}", timeout=10.0, seed=2)
        while not stop.is_set():
            try:
                got = sync.rewards(items) if kind == "rewards" else len(sync.tasks("synthetic", n=2))
            except GraderError as failed:
                got = failed
            with lock:
                outcomes.append((kind, got))
            time.sleep(0.2)

    async def async_calls(stop: threading.Event) -> None:
        async with AsyncGraderClient(f"http://127.0.0.1:{port}", timeout=10.0, seed=3) as client:
            while not stop.is_set():
                try:
                    got = len(await client.tasks("synthetic", n=2))
                except GraderError as failed:
                    got = failed
                with lock:
                    outcomes.append(("async_tasks", got))
                await asyncio.sleep(0.2)

    stop = threading.Event()
    threads = [threading.Thread(target=caller, args=(k, stop)) for k in ("rewards", "tasks")]
    threads.append(threading.Thread(target=lambda: asyncio.run(async_calls(stop))))
    with _server_on(port):
        for t in threads:
            t.start()
        time.sleep(2)
    # the service is down now; calls keep being made and must wait it out
    down_since = len(outcomes)
    time.sleep(20)
    with _server_on(port):
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(timeout=90)
    assert not any(t.is_alive() for t in threads)
    failures = [o for o in outcomes if isinstance(o[1], GraderError)]
    assert not failures, failures[:3]
    assert len(outcomes) > down_since + 3  # calls were made across the outage
    assert all(got == [1.0] * 4 for kind, got in outcomes if kind == "rewards")
    assert all(got == 2 for kind, got in outcomes if kind != "rewards")
    assert {kind for kind, _ in outcomes} == {"rewards", "tasks", "async_tasks"}


@contextmanager
def _server_on(port: int):
    import subprocess
    import sys

    from tests.support.server import ROOT, stop_process, wait_until_up

    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                "--log-level", "warning"], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until_up(f"http://127.0.0.1:{port}", process)
        yield
    finally:
        stop_process(process)
