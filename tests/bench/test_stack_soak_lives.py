"""The stack soak compares a container's memory within one life: a worker that a fault killed
and started again is measured from its own warm state, never from its cold restart; and it counts
Redis's commands across the lives its restarts begin."""

from __future__ import annotations

from bench.bench_stack_soak import warm_since_last_start, whole_run_calls


def _sample(started: str, rss: int) -> dict[str, dict]:
    return {"w": {"started": started, "rss": rss}}


def test_the_warm_sample_is_of_the_life_the_end_saw() -> None:
    samples = [(0.0, _sample("A", 100)), (60.0, _sample("A", 150)), (120.0, _sample("B", 40)),
               (180.0, _sample("B", 90)), (240.0, _sample("B", 120)), (300.0, _sample("B", 125))]
    at, facts = warm_since_last_start("w", {"started": "B", "rss": 130}, samples, warmup=100.0) or (0, {})
    # the first life (A) and the cold start of the second (40) are passed over
    assert (at, facts["rss"]) == (240.0, 120)


def test_no_warm_sample_when_the_last_life_is_too_short() -> None:
    samples = [(0.0, _sample("A", 100)), (60.0, _sample("B", 40)), (90.0, _sample("B", 60))]
    assert warm_since_last_start("w", {"started": "B"}, samples, warmup=100.0) is None
    assert warm_since_last_start("other", {"started": "B"}, samples, warmup=0.0) is None


def test_redis_commands_are_summed_across_the_restarts_that_reset_its_counters() -> None:
    start = {"calls:get": 100, "calls:hset": 7}
    before_first_restart = {"calls:get": 160, "calls:hset": 9}  # the first life: 60 GETs, 2 HSETs since the start
    before_second_restart = {"calls:get": 30, "calls:eval": 4}  # a life counted from zero
    end = {"calls:get": 11, "calls:hset": 1}
    calls = whole_run_calls(start, [before_first_restart, before_second_restart], end)
    assert calls == {"get": 60 + 30 + 11, "hset": 2 + 1, "eval": 4}
    assert whole_run_calls(start, [], {"calls:get": 105, "calls:hset": 7}) == {"get": 5, "hset": 0}
