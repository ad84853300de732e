"""Body limits: a batch of the most items at the longest graded length is never refused for its
size (its over-long items are scored too_long), while every body stays under a hard cap, and the
other routes keep the small limit. Small limits here, so the bodies stay small."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.settings import BATCH_BODY_HARD_CAP, Limits
from tests.support.server import running_server

CHARS, ITEMS, SMALL = 1000, 8, 4096
LIMITS = Limits(max_completion_chars=CHARS, max_grades_per_batch=ITEMS, max_request_bytes=SMALL)


def test_the_batch_limit_holds_a_full_batch_and_is_capped() -> None:
    defaults = Limits()
    assert defaults.batch_request_bytes >= defaults.max_grades_per_batch * defaults.max_completion_chars
    huge = Limits(max_completion_chars=10**9, max_grades_per_batch=10**6)
    assert huge.batch_request_bytes == BATCH_BODY_HARD_CAP
    with pytest.raises(ValueError):
        Limits(max_batch_request_bytes=BATCH_BODY_HARD_CAP + 1)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    env = {"SCALING_GRADER_LIMITS__MAX_COMPLETION_CHARS": str(CHARS),
           "SCALING_GRADER_LIMITS__MAX_GRADES_PER_BATCH": str(ITEMS),
           "SCALING_GRADER_LIMITS__MAX_REQUEST_BYTES": str(SMALL)}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client


def test_a_full_batch_of_long_wrong_answers_is_scored_on_every_batch_route(client: httpx.Client) -> None:
    wrong = "x" * CHARS + " Final answer: 1e-30 s"  # over the graded length: too_long, 0
    items = [{"task_id": "synthetic/1/1", "completion": wrong}] * ITEMS
    assert len(str(items)) > SMALL  # the small limit would refuse it
    answer = client.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200 and answer.json()["rewards"] == [0.0] * ITEMS
    batch = client.post("/v1/grade/batch", json={"items": items})
    assert batch.status_code == 200 and {r["outcome"] for r in batch.json()["results"]} == {"too_long"}
    openrlhf = client.post("/get_reward", json={"query": [wrong] * ITEMS, "labels": ["synthetic/1/1"] * ITEMS})
    assert openrlhf.status_code == 200 and openrlhf.json()["rewards"] == [0.0] * ITEMS


def test_a_body_past_the_batch_limit_is_still_refused(client: httpx.Client) -> None:
    items = [{"task_id": "synthetic/1/1", "completion": "x" * (LIMITS.batch_request_bytes // 4)}] * 5
    for path in ("/v1/rewards", "/get_reward/some-key"):
        body = {"items": items} if path == "/v1/rewards" else {"query": [i["completion"] for i in items]}
        answer = client.post(path, json=body)
        assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large", path


def test_a_single_grade_keeps_the_small_limit(client: httpx.Client) -> None:
    answer = client.post("/v1/grade", json={"task_id": "synthetic/1/1", "completion": "x" * (SMALL + 1)})
    assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large"
