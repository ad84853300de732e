"""verl's compute_score and TRL reward functions through a real server, its URL given as an
argument or read from $SCALING_GRADER_URL: the shapes the trainers consume, the same rewards either
way, and a clear error (never a silent zero) with neither."""

from __future__ import annotations

import asyncio
import json

import pytest

from scaling_book.grading import NoServiceURL
from scaling_book.trl import make_async_reward_func, make_reward_func
from scaling_book.verl import compute_score, compute_score_batch
from tests.support.flaky import Script, flaky_proxy
from tests.support.oracle import gold, right, synthetic_tasks, wrong

VERL_KEYS = {"score", "scored", "acc", "outcome", "grading", "task_id", "extracted_answer", "explanation"}


def _ground_truths(task_id: str) -> list[object]:
    """Every form a ground truth may take: id, JSON reference string, decoded reference, list."""
    values = gold(task_id)
    return [task_id, json.dumps({"values": values}), {"values": values}, values, json.dumps({"task_id": task_id})]


def _url_given(where: str, server_url: str, monkeypatch) -> str | None:
    """The URL to pass as an argument: the server's, or None with the server in the environment."""
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    if where == "environment":
        monkeypatch.setenv("SCALING_GRADER_URL", server_url)
        return None
    return server_url


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_verl_compute_score_rewards_right_and_wrong(server_url: str, where: str, monkeypatch) -> None:
    url = _url_given(where, server_url, monkeypatch)
    extra = {"scaling_grader_url": url} if url else None
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
    assert script.seen == ["POST /v1/grade/labelled"] * 2


@pytest.mark.parametrize("truth", ["", "{oops", "forty-two", "synthetic/none", True, None])
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


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_trl_reward_function_for_plain_and_conversational_completions(server_url: str, where: str,
                                                                      monkeypatch) -> None:
    prompts, completions, ids, expected = _trl_batch(seed=34)
    reward = make_reward_func(_url_given(where, server_url, monkeypatch))
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


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_trl_async_reward_function_matches_the_sync_one(server_url: str, where: str, monkeypatch) -> None:
    prompts, completions, ids, expected = _trl_batch(seed=36)
    reward = make_async_reward_func(_url_given(where, server_url, monkeypatch))
    assert asyncio.run(reward(prompts=prompts, completions=completions, task_id=ids)) == expected


def test_no_service_url_is_an_error_naming_the_variable_never_a_reward(monkeypatch) -> None:
    # The package has no in-process mode: without a service, a trainer must hear so at once
    # rather than train on rewards nobody computed.
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    task = synthetic_tasks(1, seed=37)[0]
    attempts = [
        lambda: compute_score("x", right(task.id), task.id, None),
        lambda: compute_score_batch(["x"], [right(task.id)], [task.id], [None]),
        lambda: make_reward_func()(prompts=["p"], completions=[right(task.id)], task_id=[task.id]),
        lambda: asyncio.run(make_async_reward_func()(prompts=["p"], completions=[right(task.id)], task_id=[task.id])),
    ]
    for attempt in attempts:
        with pytest.raises(NoServiceURL, match="SCALING_GRADER_URL"):
            attempt()


def test_verl_ignores_keywords_it_does_not_use(server_url: str) -> None:
    # verl 0.9.1's reward loop adds reward_router_address / reward_model_tokenizer when a reward
    # model router runs, and custom_reward_function.reward_kwargs; extra_info gains num_turns and
    # rollout_reward_scores.
    task = synthetic_tasks(1, seed=37)[0]
    extra = {"scaling_grader_url": server_url, "num_turns": None, "rollout_reward_scores": {}}
    out = compute_score(data_source="x", solution_str=right(task.id), ground_truth=task.id, extra_info=extra,
                        reward_router_address="127.0.0.1:1", reward_model_tokenizer=object(), anything=1)
    assert out["score"] == 1.0 and set(out) == VERL_KEYS
    # the service URL may come from reward_kwargs as well
    via_kwargs = compute_score(data_source="x", solution_str=wrong(task.id), ground_truth=task.id,
                               extra_info=None, scaling_grader_url=server_url)
    assert via_kwargs["outcome"] == "incorrect"


def test_verl_batch_function_sends_one_request_per_batch(server_url: str) -> None:
    import numpy as np

    tasks = synthetic_tasks(8, seed=38)
    solutions = [right(t.id) if i % 2 else wrong(t.id) for i, t in enumerate(tasks)]
    # verl's BatchRewardManager (0.9.1, workers/reward_manager/batch.py): numpy arrays for the
    # data sources and extra infos, ground truths as stored (a list decoded from parquet is an array)
    truths = [t.id if i % 3 else np.array(gold(t.id), dtype=object) for i, t in enumerate(tasks)]
    extras = np.array([{"rollout_reward_scores": {}} for _ in tasks], dtype=object)
    script = Script()
    with flaky_proxy(server_url, script) as url:
        batch = compute_score_batch(data_sources=np.array(["scaling-book"] * len(tasks), dtype=object),
                                    solution_strs=solutions, ground_truths=truths, extra_infos=extras,
                                    scaling_grader_url=url)
    assert script.seen == ["POST /v1/grade/labelled"]
    singles = [compute_score("x", s, truth, {"scaling_grader_url": server_url})
               for s, truth in zip(solutions, truths, strict=True)]
    assert batch == singles
    assert [b["score"] for b in batch] == [1.0 if i % 2 else 0.0 for i in range(len(tasks))]


def test_judge_items_without_a_judge_raise_rather_than_score(server_url: str) -> None:
    from app.settings import get_settings
    from app.tasks.registry import get_bank
    from scaling_book.results import JudgeUnavailable

    judged = next(t for t in get_bank("book", get_settings()).batch(seed=0, n=200) if t.grading == "judge")
    numeric = synthetic_tasks(1, seed=39)[0]
    with pytest.raises(JudgeUnavailable, match="judge"):
        compute_score("x", "An explanation.", judged.id, {"scaling_grader_url": server_url})
    with pytest.raises(JudgeUnavailable):
        compute_score_batch(data_sources=["x", "x"], solution_strs=["An explanation.", right(numeric.id)],
                            ground_truths=[judged.id, numeric.id], extra_infos=[None, None],
                            scaling_grader_url=server_url)
    with pytest.raises(JudgeUnavailable):
        make_reward_func(server_url)(prompts=["p"], completions=["An explanation."], task_id=[judged.id])
