"""verl 0.9's batch path: its reward loop awaits ``compute_score`` once per sample, all of a
worker's samples at once, when the function is a coroutine. ``compute_score_async`` gathers
those calls into one request per (URL, options, key) and gives each call its own sample's
dict, the same as ``compute_score``'s; the old batch function refuses per-sample keywords
instead of returning an empty list. (verl's own reward loop drives it in
tests/trainers/test_verl_reward_loop.py.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from scaling_book import verl
from scaling_book.verl import compute_score, compute_score_async, compute_score_batch
from tests.support.flaky import Script, flaky_proxy
from tests.support.oracle import gold, right, synthetic_tasks, wrong


async def _as_verl_calls(calls: list[dict[str, object]]) -> list[dict[str, object]]:
    """As verl's RewardLoopWorker.compute_score_batch: one task per sample, gathered."""
    return list(await asyncio.gather(*(asyncio.create_task(compute_score_async(**c)) for c in calls)))


def _calls(n: int, seed: int, **kwargs: object) -> tuple[list[dict[str, object]], list[float]]:
    tasks = synthetic_tasks(n, seed=seed)
    calls = [{"data_source": "scaling-book", "solution_str": right(t.id) if i % 2 else wrong(t.id),
              "ground_truth": t.id if i % 3 else json.dumps({"values": gold(t.id)}),
              "extra_info": {"index": i}, **kwargs} for i, t in enumerate(tasks)]
    return calls, [1.0 if i % 2 else 0.0 for i in range(n)]


def test_concurrent_calls_go_out_as_one_request_with_per_sample_answers(server_url: str) -> None:
    script = Script()
    with flaky_proxy(server_url, script) as url:
        calls, expected = _calls(24, seed=91, scaling_grader_url=url)
        out = asyncio.run(_as_verl_calls(calls))
    assert script.seen == ["POST /v1/grade/labelled"]
    assert [o["score"] for o in out] == expected
    singles = [compute_score(**{**c, "scaling_grader_url": server_url}) for c in calls]
    assert out == singles


def test_calls_with_different_settings_are_never_mixed(server_url: str) -> None:
    script = Script()
    with flaky_proxy(server_url, script) as url:
        loose, _ = _calls(4, seed=92, scaling_grader_url=url, tolerance=0.9)
        strict, expected = _calls(4, seed=92, scaling_grader_url=url)
        out = asyncio.run(_as_verl_calls(loose + strict))
    assert sorted(script.seen) == ["POST /v1/grade/labelled"] * 2
    assert [o["score"] for o in out[4:]] == expected
    # each group graded with its own options: as the per-sample function grades them
    assert out[:4] == [compute_score(**{**c, "scaling_grader_url": server_url}) for c in loose]
    assert out[0]["score"] == 1.0 and expected[0] == 0.0  # an inline reference 1.5x off: inside 90% only


def test_a_burst_larger_than_the_batch_cap_is_split(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verl, "MAX_BATCH", 5)
    script = Script()
    with flaky_proxy(server_url, script) as url:
        calls, expected = _calls(12, seed=93, scaling_grader_url=url)
        out = asyncio.run(_as_verl_calls(calls))
    assert len(script.seen) == 3  # 5 + 5 + 2
    assert [o["score"] for o in out] == expected


def test_a_failed_request_fails_every_call_it_carried() -> None:
    calls, _ = _calls(3, seed=94, scaling_grader_url="http://127.0.0.1:9", deadline=0.3)

    async def run() -> list[object]:
        return list(await asyncio.gather(*(compute_score_async(**c) for c in calls), return_exceptions=True))

    outcomes = asyncio.run(run())
    assert len(outcomes) == 3 and all(type(o).__name__ == "GraderError" for o in outcomes)


def test_the_batch_function_refuses_per_sample_calls() -> None:
    with pytest.raises(TypeError, match="compute_score_async"):
        compute_score_batch(data_source="x", solution_str="Final answer: 1", ground_truth="synthetic/1/1",
                            extra_info={})


def test_verl_sees_a_coroutine_function() -> None:
    import inspect

    assert inspect.iscoroutinefunction(compute_score_async)
    assert not inspect.iscoroutinefunction(compute_score)
