"""The verifiers environment (installed through the test extra, so never skipped): it loads,
carries no answers, scores reference completions 1.0 and perturbed ones 0.0 (in-process and
through a real service), and runs full rollouts against the fake OpenAI server."""

from __future__ import annotations

import asyncio
import os

import pytest
import verifiers as vf

from scaling_book.results import GradeResult
from scaling_book.verifiers_env import STATE_KEY, load_environment
from tests.support.oracle import gold, right, wrong
from tests.support.policy import PolicyFake

pytestmark = pytest.mark.slow  # real workers, servers or sandboxes: left out of `make test-fast`


def _score(env, row: dict, text: str) -> tuple[float, dict, dict]:
    state = vf.State.for_task(row)
    state["completion"] = [{"role": "assistant", "content": text}]
    asyncio.run(env.rubric.score_rollout(state))
    return state["reward"], state["metrics"], state[STATE_KEY]


@pytest.mark.parametrize("where", ["in-process", "service"])
def test_environment_scores_reference_completions_one(server_url: str, where: str, monkeypatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)
    url = server_url if where == "service" else None
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
    with pytest.raises(Exception, match="no-such-split"):
        load_environment(split="no-such-split")
    with pytest.raises(ValueError, match="no tasks"):
        load_environment(split="synthetic", chapters="not-a-chapter", num_synthetic_examples=2)


@pytest.mark.parametrize(("judge_model", "reward", "scored"), [
    # a non-verdict is a scored 0 (the response may provoke it); an endpoint fault stays unscored
    ("judge-yes", 1.0, 1.0), ("judge-no", 0.0, 1.0), ("judge-garbage", 0.0, 1.0), ("judge-401", 0.0, 0.0),
])
def test_judge_items_go_to_the_judge_given(judge_model: str, reward: float, scored: float) -> None:
    fake = PolicyFake().start()
    try:
        env = load_environment(split="exam", chapters="roofline", judge_model=judge_model,
                               judge_base_url=fake.base_url)
        judged = [r for r in env.get_eval_dataset().to_list() if r["info"]["grading"] == "judge"][:2]
        assert judged
        for row in judged:
            got, metrics, result = _score(env, row, "Because the arithmetic intensity is below the ridge point.")
            assert (got, metrics["scored"]) == (reward, scored), result["explanation"]
        assert {r.body["model"] for r in fake.requests} == {judge_model}
    finally:
        fake.stop()


def test_judge_defaults_to_the_openai_environment_variables(monkeypatch) -> None:
    fake = PolicyFake().start()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-judge-from-env")
        env = load_environment(split="exam", chapters="roofline", judge_model="judge-yes")
        row = next(r for r in env.get_eval_dataset().to_list() if r["info"]["grading"] == "judge")
        assert _score(env, row, "Because the arithmetic intensity is below the ridge point.")[0] == 1.0
        [call] = fake.requests
        assert call.headers["authorization"] == "Bearer sk-judge-from-env"
        assert call.body["max_tokens"] == 256
        assert call.body["chat_template_kwargs"] == {"enable_thinking": False}
    finally:
        fake.stop()


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
