"""The verifiers environment (installed through the test extra, so never skipped): it loads,
carries no answers, scores reference completions 1.0 and perturbed ones 0.0 through a real service
(its URL an argument or $SCALING_GRADER_URL), and runs full rollouts against the fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator

import pytest
import verifiers as vf

from scaling_book.client import GraderError
from scaling_book.results import GradeResult
from scaling_book.verifiers_env import STATE_KEY, load_environment
from tests.support.judge_asks import ASKS_PER_CORRECT
from tests.support.oracle import gold, right, wrong
from tests.support.policy import PolicyFake
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # real workers, servers or sandboxes: left out of `make test-fast`
SERVICE_JUDGE_KEY = "sk-the-operators-judge-key"


def _score(env, row: dict, text: str) -> tuple[float, dict, dict]:
    state = vf.State.for_task(row)
    state["completion"] = [{"role": "assistant", "content": text}]
    asyncio.run(env.rubric.score_rollout(state))
    return state["reward"], state["metrics"], state[STATE_KEY]


@pytest.fixture(autouse=True)
def _service(server_url: str, monkeypatch) -> None:
    """Every environment here grades through the real server named by $SCALING_GRADER_URL."""
    monkeypatch.setenv("SCALING_GRADER_URL", server_url)


@pytest.mark.parametrize("where", ["environment", "argument"])
def test_environment_scores_reference_completions_one(server_url: str, where: str) -> None:
    url = server_url if where == "argument" else None
    env = load_environment(split="synthetic", num_synthetic_examples=6, seed=51, service_url=url)
    assert isinstance(env, vf.SingleTurnEnv)
    rows = env.get_eval_dataset().to_list()
    assert len(rows) == 6
    for row in rows:
        task_id = row["answer"]
        assert row["info"]["task_id"] == task_id and row["prompt"][-1]["role"] == "user"
        assert not any(value in str(row["prompt"]) for value in gold(task_id))  # no answer in the prompt
        reward, metrics, result = _score(env, row, right(task_id))
        assert reward == 1.0 and metrics["scored"] == 1.0
        assert GradeResult.from_json(result).task_id == task_id
        reward, metrics, _ = _score(env, row, wrong(task_id))
        assert reward == 0.0 and metrics["scored"] == 1.0


def test_chapter_filter_and_tolerance_reach_the_grader() -> None:
    env = load_environment(split="synthetic", chapters="roofline", num_synthetic_examples=4, seed=52,
                           tolerance=0.6)
    rows = env.get_eval_dataset().to_list()
    assert {r["info"]["chapter"] for r in rows} == {"roofline"}
    # wrong() pushes the first value up by half: outside the 2% default, inside a 60% tolerance,
    # which reaches the grader but is not applied to a task (it would make grades an oracle)
    for r in rows:
        reward, _, result = _score(env, r, wrong(r["answer"]))
        assert reward == 0.0 and GradeResult.from_json(result).details["tolerance_not_applied"] is True


def test_full_rollouts_against_an_openai_compatible_server(monkeypatch) -> None:
    env = load_environment(split="synthetic", num_synthetic_examples=4, seed=53)
    rows = env.get_eval_dataset().to_list()
    answers = {r["prompt"][-1]["content"]: (right if i % 2 else wrong)(r["answer"]) for i, r in enumerate(rows)}
    fake = PolicyFake(answers).start()
    try:
        monkeypatch.setenv("FAKE_POLICY_KEY", "sk-test")
        config = vf.ClientConfig(api_base_url=fake.base_url, api_key_var="FAKE_POLICY_KEY", max_retries=0)
        outputs = env.evaluate_sync(config, "policy", num_examples=4, rollouts_per_example=1)["outputs"]
    finally:
        fake.stop()
    by_id = {o["answer"]: o["reward"] for o in outputs}
    assert by_id == {r["answer"]: (1.0 if i % 2 else 0.0) for i, r in enumerate(rows)}
    assert len(fake.requests) == 4 and os.environ["FAKE_POLICY_KEY"] not in str(outputs)


def test_unknown_split_and_empty_filters_are_refused() -> None:
    # The service names the splits it knows, never repeating what it was sent.
    with pytest.raises(GraderError, match="unknown split; known: synthetic") as refused:
        load_environment(split="no-such-split")
    assert refused.value.status == 404
    with pytest.raises(ValueError, match="no tasks"):
        load_environment(split="synthetic", chapters="not-a-chapter", num_synthetic_examples=2)


@pytest.fixture(scope="module")
def judge() -> Iterator[PolicyFake]:
    fake = PolicyFake().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def judging_service(judge: PolicyFake) -> Iterator[str]:
    """A real server whose operator allows the loopback judge and holds its key."""
    env = {"SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([judge.base_url]),
           "SCALING_GRADER_JUDGE__API_KEY_ENV": "SERVICE_JUDGE_KEY", "SERVICE_JUDGE_KEY": SERVICE_JUDGE_KEY}
    with running_server(env) as url:
        yield url


@pytest.mark.parametrize(("judge_model", "reward", "scored"), [
    # a non-verdict is a scored 0 (the response may provoke it); an endpoint fault stays unscored
    ("judge-yes", 1.0, 1.0), ("judge-no", 0.0, 1.0), ("judge-garbage", 0.0, 1.0), ("judge-401", 0.0, 0.0),
])
def test_judge_items_go_to_the_judge_given(judge: PolicyFake, judging_service: str, judge_model: str,
                                           reward: float, scored: float) -> None:
    judge.requests.clear()
    env = load_environment(split="exam", chapters="roofline", judge_model=judge_model,
                           judge_base_url=judge.base_url, service_url=judging_service)
    judged = [r for r in env.get_eval_dataset().to_list() if r["info"]["grading"] == "judge"][:2]
    assert judged
    for row in judged:
        got, metrics, result = _score(env, row, "Because the arithmetic intensity is below the ridge point.")
        assert (got, metrics["scored"]) == (reward, scored), result["explanation"]
    assert {r.body["model"] for r in judge.requests} == {judge_model}


def test_the_service_judges_with_its_own_key_never_the_trainers(judge: PolicyFake, judging_service: str,
                                                                  monkeypatch) -> None:
    # A trainer's OpenAI key (and judge_api_key_var naming it) stays in the trainer: the judge
    # is asked by the service, with the operator's key and judge settings.
    judge.requests.clear()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-trainers-own")
    env = load_environment(split="exam", chapters="roofline", judge_model="judge-yes", judge_base_url=judge.base_url,
                           judge_api_key_var="OPENAI_API_KEY", service_url=judging_service)
    row = next(r for r in env.get_eval_dataset().to_list() if r["info"]["grading"] == "judge")
    assert _score(env, row, "Because the arithmetic intensity is below the ridge point.")[0] == 1.0
    assert len(judge.requests) == ASKS_PER_CORRECT  # a verdict of correct, and its confirmation
    for call in judge.requests:
        assert call.headers["authorization"] == f"Bearer {SERVICE_JUDGE_KEY}"
        assert "sk-the-trainers-own" not in json.dumps([call.headers, call.body])
        assert call.body["max_tokens"] == 256
        assert call.body["chat_template_kwargs"] == {"enable_thinking": False}


def test_judge_model_is_required_for_selections_with_judge_items() -> None:
    with pytest.raises(ValueError, match="judge_model"):
        load_environment(split="exam", chapters="roofline")
    # a selection without judge items needs none
    assert load_environment(split="synthetic", num_synthetic_examples=2) is not None


def test_env_id_and_args_rebuild_the_same_environment() -> None:
    args = {"split": "synthetic", "chapters": ["roofline"], "num_synthetic_examples": 3, "seed": 54,
            "tolerance": 0.05, "judge_model": None, "judge_base_url": None, "judge_api_key_var": None,
            "service_url": None, "service_api_key_var": None, "service_timeout": None, "service_deadline": None,
            "service_headers": None, "num_examples": None, "system_prompt": None}
    env = load_environment(**args)
    assert env.env_id == "scaling-book" and env.env_args == args
    # what verifiers 0.3.1's env server worker does: vf.load_environment(env_id, **env_args)
    again = vf.load_environment(env.env_id, **env.env_args)
    assert again.get_eval_dataset().to_list() == env.get_eval_dataset().to_list()
    assert again.env_args == args
