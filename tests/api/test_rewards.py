"""/v1/rewards and OpenRLHF's /get_reward through a real server process: rewards in order, the
same as /v1/grade gives for the same items, unscored items marked, bad input refused briefly."""

from __future__ import annotations

import json
import random
import re

import httpx
import pytest

from app.settings import Settings
from tests.support.oracle import gold, right, synthetic_tasks, wrong

CHATML_USER = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def http(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        yield c


def _mixed_items(n: int, seed: int) -> list[tuple[str, str, float]]:
    """(task id, completion, reward it must get) with right and wrong answers shuffled."""
    rng = random.Random(seed)
    items = []
    for task in synthetic_tasks(n, seed=seed):
        make, expected = rng.choice([(right, 1.0), (wrong, 0.0)])
        items.append((task.id, make(task.id), expected))
    return items


def test_rewards_are_in_order_and_match_single_grades(http: httpx.Client) -> None:
    items = _mixed_items(20, seed=5)
    body = {"items": [{"task_id": t, "completion": c} for t, c, _ in items]}
    rewards = http.post("/v1/rewards", json=body).json()["rewards"]
    assert rewards == [expected for _, _, expected in items]
    singles = [http.post("/v1/grade", json=item).json()["reward"] for item in body["items"]]
    assert rewards == singles


def test_rewards_are_null_for_unscored_items_only(http: httpx.Client) -> None:
    task = synthetic_tasks(1, seed=8)[0]
    body = {"items": [
        {"task_id": task.id, "completion": right(task.id)},
        {"task_id": "synthetic/not-an-id", "completion": right(task.id)},
        {"reference": {"values": gold(task.id)}, "completion": wrong(task.id)},
    ]}
    batch = http.post("/v1/grade/batch", json=body).json()["results"]
    rewards = http.post("/v1/rewards", json=body).json()["rewards"]
    assert [r["outcome"] for r in batch] == ["correct", "invalid_request", "incorrect"]
    assert rewards == [1.0, None, 0.0]


def test_openrlhf_request_shape_returns_rewards_in_order(http: httpx.Client) -> None:
    items = _mixed_items(16, seed=9)
    tasks = {t.id: t for t in synthetic_tasks(16, seed=9)}
    prompts = [CHATML_USER.format(tasks[t].prompt) for t, _, _ in items]
    queries = [p + c + "<|im_end|>" for p, (_, c, _) in zip(prompts, items, strict=True)]
    # Half the labels as task ids, half as JSON inline references built from the same gold.
    labels = [t if i % 2 else json.dumps({"values": gold(t)}) for i, (t, _, _) in enumerate(items)]
    reply = http.post("/get_reward", json={"query": queries, "prompts": prompts, "labels": labels}).json()
    expected = [e for _, _, e in items]
    assert reply["rewards"] == expected and reply["scores"] == expected
    assert reply["extra_logs"]["scored"] == [1.0] * len(items)
    assert reply["extra_logs"]["correct"] == expected


def test_openrlhf_bad_label_costs_that_item_only(http: httpx.Client) -> None:
    task = synthetic_tasks(1, seed=12)[0]
    prompt = CHATML_USER.format(task.prompt)
    query = prompt + right(task.id) + "<|im_end|>"
    labels = [task.id, "{not json", "synthetic/unknown", json.dumps(gold(task.id))]
    reply = http.post("/get_reward", json={"query": [query] * 4, "prompts": [prompt] * 4, "labels": labels}).json()
    assert reply["rewards"] == [1.0, 0.0, 0.0, 1.0]
    assert reply["extra_logs"]["scored"] == [1.0, 0.0, 0.0, 1.0]


def test_openrlhf_without_prompts_uses_the_chat_template(http: httpx.Client) -> None:
    task = synthetic_tasks(1, seed=13)[0]
    query = CHATML_USER.format(task.prompt) + right(task.id) + "<|im_end|><|endoftext|>"
    reply = http.post("/get_reward", json={"query": [query], "labels": [task.id]}).json()
    assert reply["rewards"] == [1.0]


@pytest.mark.parametrize("body", [
    {"query": ["a", "b"], "prompts": ["a"], "labels": ["synthetic/0/0", "synthetic/0/1"]},
    {"query": ["a"], "labels": ["x", "y"]},
])
def test_openrlhf_misaligned_lists_leave_every_item_unscored(http: httpx.Client, body: dict) -> None:
    # Which label goes with which query cannot be known: no item gets a reward, and the reason
    # is in the flags (a 4xx would reach OpenRLHF as "no rewards" with no reason at all).
    r = http.post("/get_reward", json=body)
    assert r.status_code == 200
    n = len(body["query"])
    assert r.json()["rewards"] == [0.0] * n and r.json()["extra_logs"]["unscored_bad_label"] == [1.0] * n


def test_openrlhf_request_without_queries_is_refused(http: httpx.Client) -> None:
    r = http.post("/get_reward", json={"prompts": ["a"]})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"


def test_malformed_json_and_oversized_batches_are_refused_without_echo(http: httpx.Client) -> None:
    secret = "Final answer: 42 s do-not-echo"
    bad = http.post("/v1/rewards", content=b'{"items": [' + secret.encode(),
                    headers={"content-type": "application/json"})
    assert bad.status_code == 400 and secret not in bad.text
    limit = Settings().limits.max_grades_per_batch
    too_many = {"items": [{"task_id": "synthetic/0/0", "completion": "x"}] * (limit + 1)}
    refused = http.post("/v1/rewards", json=too_many)
    assert refused.status_code == 422 and str(limit) in refused.json()["detail"]


def test_openapi_documents_the_reward_routes_with_resolvable_schemas(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    for path in ("/v1/rewards", "/get_reward", "/v1/grade/labelled"):
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].startswith("#/components/schemas/")
    schemas = spec["components"]["schemas"]
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(spec))
    assert refs and all(name in schemas for name in refs)
    assert "labels" in schemas["GetRewardRequest"]["properties"]
