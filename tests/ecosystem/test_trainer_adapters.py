"""verl's compute_score and TRL reward functions, through a real server and in-process: the
shapes the trainers consume, and the same rewards either way."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.integrations.trl import make_async_reward_func, make_reward_func
from app.integrations.verl import compute_score
from tests.ecosystem.flaky import Script, flaky_proxy
from tests.ecosystem.oracle import gold, right, synthetic_tasks, wrong

VERL_KEYS = {"score", "scored", "acc", "outcome", "grading", "task_id", "extracted_answer", "explanation"}


def _ground_truths(task_id: str) -> list[object]:
    """Every form a ground truth may take: id, JSON reference string, decoded reference, list."""
    values = gold(task_id)
    return [task_id, json.dumps({"values": values}), {"values": values}, values, json.dumps({"task_id": task_id})]


@pytest.mark.parametrize("where", ["service", "in-process"])
def test_verl_compute_score_rewards_right_and_wrong(server_url: str, where: str, monkeypatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    extra = {"scaling_grader_url": server_url} if where == "service" else None
    for task in synthetic_tasks(4, seed=31):
        for truth in _ground_truths(task.id):
            good = compute_score("scaling-grader/synthetic", right(task.id), truth, extra)
            bad = compute_score("scaling-grader/synthetic", wrong(task.id), truth, extra)
            assert set(good) == set(bad) == VERL_KEYS  # verl needs the same keys for every sample
            assert (good["score"], good["acc"], good["outcome"]) == (1.0, True, "correct")
            assert (bad["score"], bad["acc"], bad["outcome"]) == (0.0, False, "incorrect")


def test_verl_reads_the_service_url_from_the_environment(server_url: str, monkeypatch) -> None:
    task = synthetic_tasks(1, seed=32)[0]
    script = Script()
    with flaky_proxy(server_url, script) as url:  # a proxy that counts: proves the variable is used
        monkeypatch.setenv("SCALING_GRADER_URL", url)
        assert compute_score("x", right(task.id), task.id)["score"] == 1.0
        assert compute_score("x", wrong(task.id), task.id)["score"] == 0.0
    assert script.seen == ["POST /v1/grade/batch"] * 2


@pytest.mark.parametrize("truth", ["", "{oops", "42", "synthetic/none"])
def test_verl_unusable_ground_truth_scores_zero_and_says_so(server_url: str, truth: str) -> None:
    task = synthetic_tasks(1, seed=33)[0]
    out = compute_score("x", right(task.id), truth, {"scaling_grader_url": server_url})
    assert set(out) == VERL_KEYS
    assert (out["score"], out["scored"], out["outcome"]) == (0.0, False, "invalid_request")


def _trl_batch(seed: int) -> tuple[list[str], list, list, list[float]]:
    tasks = synthetic_tasks(6, seed=seed)
    prompts = [t.prompt for t in tasks]
    plain = [right(t.id) if i % 3 else wrong(t.id) for i, t in enumerate(tasks)]
    expected = [1.0 if i % 3 else 0.0 for i in range(len(tasks))]
    return prompts, plain, [t.id for t in tasks], expected


@pytest.mark.parametrize("where", ["service", "in-process"])
def test_trl_reward_function_for_plain_and_conversational_completions(server_url: str, where: str,
                                                                      monkeypatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    prompts, completions, ids, expected = _trl_batch(seed=34)
    reward = make_reward_func(server_url if where == "service" else None)
    assert reward.__name__ == "scaling_grader"
    assert reward(prompts=prompts, completions=completions, task_id=ids, completion_ids=None) == expected
    conversational = [[{"role": "assistant", "content": c}] for c in completions]
    chat_prompts = [[{"role": "user", "content": p}] for p in prompts]
    assert reward(prompts=chat_prompts, completions=conversational, task_id=ids) == expected


def test_trl_unscored_items_are_none_and_labels_may_be_references(server_url: str) -> None:
    prompts, completions, ids, expected = _trl_batch(seed=35)
    labels = [json.dumps({"values": gold(i)}) for i in ids]
    labels[1] = "synthetic/missing"
    reward = make_reward_func(server_url, label_column="reference", name="hts")
    got = reward(prompts=prompts, completions=completions, reference=labels)
    assert got == [None if i == 1 else e for i, e in enumerate(expected)]
    with pytest.raises(KeyError, match="task_id"):
        make_reward_func(server_url)(prompts=prompts, completions=completions, reference=labels)


@pytest.mark.parametrize("where", ["service", "in-process"])
def test_trl_async_reward_function_matches_the_sync_one(server_url: str, where: str, monkeypatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    prompts, completions, ids, expected = _trl_batch(seed=36)
    url = server_url if where == "service" else None
    reward = make_async_reward_func(url)
    assert asyncio.run(reward(prompts=prompts, completions=completions, task_id=ids)) == expected
