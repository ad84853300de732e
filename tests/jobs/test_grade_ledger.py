"""The grade ledger of Redis mode against a real Redis: an API process's counts go into the keys
the workers count in, survive Redis going away while they wait, are written once even when a
write is retried, and stay bounded however long Redis is away."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import redis

from app.grade_ledger import (
    KEEP_FAULTS,
    WINDOW_BUCKET_SECONDS,
    WINDOW_BUCKETS,
    MemoryLedger,
    bucket_start,
    counted_on_publish,
    use_ledger,
)
from app.jobs import grade_log
from app.jobs.redis_ledger import RedisLedger
from app.observability import record_grade
from app.redis_link import REDIS_ERRORS
from tests.support.grade_counts import window_totals
from tests.support.impl_jobs import until
from tests.support.redis_server import RedisServer

LABELS = [("synthetic", "numeric", "correct"), ("inline", "numeric", "incorrect"), ("exam", "judge", "judge_error")]


def _connection(server: RedisServer) -> redis.Redis:
    return redis.Redis(port=server.port, socket_timeout=2, socket_connect_timeout=1)


def _answered(check: Callable[[], object]) -> Callable[[], object]:
    """``check``, false while Redis does not answer (it is being restarted)."""

    def quietly() -> object:
        try:
            return check()
        except REDIS_ERRORS:
            return False

    return quietly


def test_inline_counts_land_in_the_workers_keys(redis_server: RedisServer) -> None:
    connection = _connection(redis_server)
    with connection.pipeline() as pipe:  # a worker's count, as its result script makes it
        grade_log.count_grade(pipe, "exam", "judge", "judge_error", tenant="a")
        pipe.execute()
    ledger = RedisLedger(connection, interval=0.05)
    now = time.time()
    for labels, tenant in ((LABELS[0], "a"), (LABELS[0], "b"), (LABELS[1], None), (LABELS[2], "a")):
        ledger.add(labels, tenant, now)
        if labels[2] == "judge_error":
            ledger.add_fault("judge_error", "exam/judge", tenant, now)
    # written by the thread within its interval, with no reader's help
    until(
        _answered(lambda: ledger.held() == 0 and sum(grade_log.totals(connection).values()) == 5),
        20,
        "the counts in Redis",
    )
    assert grade_log.totals(connection) == {LABELS[0]: 2, LABELS[1]: 1, LABELS[2]: 2}
    assert window_totals(grade_log.window(connection)) == {
        ("synthetic", "correct"): 2,
        ("inline", "incorrect"): 1,
        ("exam", "judge_error"): 2,
    }
    assert window_totals(grade_log.window(connection, tenant="a")) == {
        ("synthetic", "correct"): 1,
        ("exam", "judge_error"): 2,
    }
    assert window_totals(grade_log.window(connection, tenant="b")) == {("synthetic", "correct"): 1}
    assert [f["kind"] for f in grade_log.faults(connection, "a")] == ["judge_error"] * 2  # the worker's and ours
    assert grade_log.faults(connection, "b") == []
    # the ledger reads what it wrote, as the status page and /metrics do
    assert ledger.totals() == grade_log.totals(connection)
    ledger.close()


def test_counts_wait_through_a_redis_outage_and_are_written_once() -> None:
    server = RedisServer().start()
    try:
        connection = _connection(server)
        ledger = RedisLedger(connection, interval=0.05)
        made: dict = {}

        def grade(labels: tuple[str, str, str], tenant: str | None) -> None:
            ledger.add(labels, tenant, time.time())
            made[labels] = made.get(labels, 0) + 1

        for i in range(30):
            grade(LABELS[i % 3], "a")
        until(_answered(lambda: grade_log.totals(connection) == made), 20, "the counts in Redis")
        server.stop()
        started = time.monotonic()
        for i in range(300):  # grading goes on while Redis is away, at memory speed
            grade(LABELS[i % 3], "b" if i % 2 else None)
        assert time.monotonic() - started < 1.0
        with pytest.raises(REDIS_ERRORS):
            ledger.flush()  # a reader is told; the counts stay
        time.sleep(1.0)  # the thread has failed to write at least once
        assert ledger.held() == 300
        server.start()  # the same port and data (AOF): the thread's retry writes what waited
        until(_answered(lambda: ledger.held() == 0 and grade_log.totals(connection) == made), 20, "the counts in Redis")
        of_b = {(s, o): sum(1 for i in range(300) if i % 2 and LABELS[i % 3] == (s, g, o)) for s, g, o in LABELS}
        assert window_totals(grade_log.window(connection, tenant="b")) == of_b
        time.sleep(0.3)
        assert grade_log.totals(connection) == made  # and not again
        ledger.close()
    finally:
        server.close()


def test_counts_wait_while_redis_refuses_writes(redis_server: RedisServer) -> None:
    """Redis answers but refuses every write (out of memory): the writer is not stopped by the
    refusal, keeps the counts and writes them once Redis accepts writes again."""
    connection = _connection(redis_server)
    connection.config_set("maxmemory-policy", "noeviction")
    connection.config_set("maxmemory", 1)
    ledger = RedisLedger(connection, interval=0.05)
    try:
        for _ in range(9):
            ledger.add(LABELS[1], "a", time.time())
        with pytest.raises(redis.exceptions.ResponseError, match="maxmemory"):
            ledger.flush()
        time.sleep(0.5)  # the thread's writes are refused too
        assert ledger.held() == 9 and grade_log.totals(connection) == {}
    finally:
        connection.config_set("maxmemory", 0)
    until(lambda: ledger.held() == 0 and grade_log.totals(connection) == {LABELS[1]: 9}, 20, "the counts in Redis")
    ledger.close()


def test_a_retried_write_whose_answer_was_lost_counts_once(redis_server: RedisServer) -> None:
    """The script ran but its answer never came back (the connection broke after the command was
    sent): the ledger keeps the batch and sends it again; the second run must count nothing."""
    connection = _connection(redis_server)
    ledger = RedisLedger(connection, interval=60)  # no thread write during the test
    before = grade_log.totals(connection)
    for _ in range(7):
        ledger.add(LABELS[0], "a", time.time())
    batch = ledger._take()
    assert batch is not None
    args = [batch.batch, batch.number, 60]
    assert ledger._script(keys=batch.keys, args=args) == 1
    ledger._unsent = batch  # as after a write whose answer was lost
    ledger.flush()  # sends it again
    assert ledger._script(keys=batch.keys, args=args) == 0
    after = grade_log.totals(connection)
    assert after.get(LABELS[0], 0) - before.get(LABELS[0], 0) == 7
    ledger.close()


def test_what_waits_for_redis_stays_bounded() -> None:
    """An hour away: totals stay one number per label set, buckets the window's, faults the last
    twenty; the totals are all still there."""
    ledger = RedisLedger(redis.Redis(port=1, socket_connect_timeout=0.2), interval=3600)
    start = time.time() - 3600
    for second in range(0, 3600, 2):
        for labels in LABELS:
            ledger.add(labels, f"t{second % 3}", start + second)
        ledger.add_fault("judge_error", "exam/judge", "t0", start + second)
    window_buckets = WINDOW_BUCKETS + 1
    assert len(ledger._buckets) <= window_buckets * 4  # the deployment's and three tenants'
    assert {b for b, _ in ledger._buckets.values()} <= {
        bucket_start(start + 3600) - i * WINDOW_BUCKET_SECONDS for i in range(window_buckets)
    }
    assert all(len(entries) <= KEEP_FAULTS for entries in ledger._faults.values())
    assert ledger._totals == {"|".join(labels): 1800 for labels in LABELS}
    assert ledger.held() == 3 * 1800
    ledger.close()


def test_memory_ledger_keeps_tenants_apart() -> None:
    ledger = MemoryLedger()
    now = time.time()
    ledger.add(LABELS[0], "a", now)
    ledger.add(LABELS[2], "a", now)
    ledger.add_fault("judge_error", "exam/judge", "a", now)
    ledger.add(LABELS[1], "b", now)
    assert ledger.totals() == {LABELS[0]: 1, LABELS[1]: 1, LABELS[2]: 1}
    assert window_totals(ledger.window("b", now)) == {("inline", "incorrect"): 1}
    assert ledger.faults("b") == [] and ledger.faults("nobody") == [] and ledger.window("nobody", now) == {}
    assert [f["kind"] for f in ledger.faults("a")] == [f["kind"] for f in ledger.faults(None)] == ["judge_error"]
    assert json.dumps(ledger.faults(None))  # plain JSON for the status page


def test_a_grade_counted_with_its_result_write_is_not_counted_by_the_grading_code() -> None:
    """A worker's grade: record_grade hands its labels over instead of counting (the worker counts
    them with the result's write, app.jobs.leases); outside that block, it counts."""
    book = MemoryLedger()
    use_ledger(book)
    with counted_on_publish() as counted:
        record_grade("exam", "judge", "judge_error", 0.01, "a")
    assert counted == [("exam", "judge", "judge_error")]
    assert book.totals() == {} and book.faults(None) == [] and book.window("a", time.time()) == {}
    record_grade(None, "numeric", "correct", 0.01, "a")
    assert book.totals() == {("inline", "numeric", "correct"): 1}


def test_a_tenants_name_cannot_pass_its_grades_off_as_another_tenants(redis_server: RedisServer) -> None:
    """A bucket holds every tenant's fields side by side: names with the separator in them, or
    that look like another's field, still count as their own tenant's, and every grade counts
    once for the deployment."""
    connection = _connection(redis_server)
    names = ["a", "a|exam", "exam", "synthetic|correct", ""]
    with connection.pipeline() as pipe:
        for i, name in enumerate(names):
            for _ in range(i + 1):
                grade_log.count_grade(pipe, "exam", "judge", "correct", tenant=name or None)
        pipe.execute()
    assert window_totals(grade_log.window(connection)) == {("exam", "correct"): sum(range(1, len(names) + 1))}
    for i, name in enumerate(names[:-1]):
        assert window_totals(grade_log.window(connection, tenant=name)) == {("exam", "correct"): i + 1}, name
    # the bucket made with its TTL
    keys = connection.keys(grade_log.bucket_key(bucket_start(time.time())).rsplit(":", 1)[0] + ":*")
    assert keys and all(0 < connection.ttl(k) <= WINDOW_BUCKET_SECONDS * (WINDOW_BUCKETS + 1) for k in keys)
