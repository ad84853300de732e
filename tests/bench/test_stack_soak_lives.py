"""The stack soak compares a container's memory within one life: a worker that a fault killed
and started again is measured from its own warm state, never from its cold restart."""

from __future__ import annotations

from bench.bench_stack_soak import warm_since_last_start


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
