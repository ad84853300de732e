"""One table of completions through every entry point: /v1/grade, /v1/grade/batch, /v1/rewards,
OpenRLHF's /get_reward, /v1/grade/labelled, the verl and TRL helpers (through the server) and the
in-process grading the eval command uses. Each gives every row the same reward, and a wrong answer
stays a scored 0 whatever it makes the service do (too long, struck through, sent by a chat
template with BOS/EOS tokens). Expected rewards come from the bank's own gold (tests/support)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from app.integrations.grading import grade_labelled_locally
from app.settings import Settings
from app.tasks.registry import get_bank
from scaling_book.trl import make_reward_func
from scaling_book.verl import URL_KEY, compute_score_batch
from tests.support.book_mirror import mirror_path
from tests.support.oracle import gold, right, synthetic_tasks, wrong
from tests.support.server import running_server

pytestmark = pytest.mark.slow
LLAMA2 = "<s>[INST] {} [/INST]"


def _struck(task_id: str, shown_right: bool) -> str:
    """A final answer with one value struck through (retracted) and the other standing: the
    standing one decides, however the text reaches the service."""
    good, bad = ", ".join(gold(task_id)), wrong(task_id).rsplit("Final answer: ", 1)[1]
    struck, standing = (bad, good) if shown_right else (good, bad)
    return f"Working.\nFinal answer: <s>{struck}</s> {standing}"


@pytest.fixture(scope="module")
def table(judge_server) -> list[tuple[str, str, float]]:
    """(task id, completion, the reward every entry point must give)."""
    settings = Settings(book_mirror=mirror_path())
    synthetic = synthetic_tasks(2, seed=29)
    exam = get_bank("exam", settings)
    exam_numeric = next(t for t in exam.batch(seed=0, n=exam.size() or 0) if t.grading == "numeric")
    exam_judge = next(t for t in exam.batch(seed=0, n=exam.size() or 0) if t.grading == "judge")
    too_long = wrong(synthetic[1].id) + "\n" + "padding " * 30_000  # past max_completion_chars
    return [
        (synthetic[0].id, right(synthetic[0].id), 1.0),
        (synthetic[0].id, wrong(synthetic[0].id), 0.0),
        (synthetic[1].id, _struck(synthetic[1].id, shown_right=True), 1.0),
        (synthetic[1].id, _struck(synthetic[1].id, shown_right=False), 0.0),
        (synthetic[1].id, too_long, 0.0),
        (exam_numeric.id, right(exam_numeric.id), 1.0),
        (exam_numeric.id, wrong(exam_numeric.id), 0.0),
        (exam_judge.id, str(exam_judge.gold), 1.0),
        (exam_judge.id, "I am not sure; something about bandwidth.", 0.0),
    ]


@pytest.fixture(scope="module")
def judge_env(judge_server) -> dict[str, str]:
    return {"SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([judge_server.base_url]),
            "SCALING_GRADER_JUDGE__DEFAULT_MODEL": "judge-match",
            "SCALING_GRADER_JUDGE__DEFAULT_BASE_URL": judge_server.base_url}


@pytest.fixture(scope="module")
def url(judge_env):
    with running_server(judge_env) as base:
        yield base


def test_the_table_is_what_it_claims(table) -> None:
    assert len(table[4][1]) > Settings().limits.max_completion_chars  # really over the limit
    assert {r for *_, r in table} == {0.0, 1.0}


def test_every_entry_point_gives_every_row_the_same_reward(url, table, judge_env) -> None:
    ids = [t for t, _, _ in table]
    completions = [c for _, c, _ in table]
    expected = [r for *_, r in table]
    got: dict[str, list[float | None]] = {}
    with httpx.Client(base_url=url, timeout=120) as http:
        items = [{"task_id": t, "completion": c} for t, c in zip(ids, completions, strict=True)]
        got["/v1/grade"] = [http.post("/v1/grade", json=item).json()["reward"] for item in items]
        batch = http.post("/v1/grade/batch", json={"items": items}).json()["results"]
        got["/v1/grade/batch"] = [r["reward"] for r in batch]
        got["/v1/rewards"] = http.post("/v1/rewards", json={"items": items}).json()["rewards"]
        prompts = [LLAMA2.format(f"Solve {t}.") for t in ids]
        # the trainer decodes prompt and response together, BOS and EOS kept
        queries = [p + " " + c + "</s>" for p, c in zip(prompts, completions, strict=True)]
        reply = http.post("/get_reward", json={"query": queries, "prompts": prompts, "labels": ids}).json()
        assert reply["extra_logs"]["scored"] == [1.0] * len(table)  # none dropped: wrong stays 0
        got["/get_reward"] = reply["rewards"]
        got["/v1/grade/labelled"] = [r["reward"] for r in http.post(
            "/v1/grade/labelled", json={"items": [{"label": t, "completion": c} for t, c in
                                                  zip(ids, completions, strict=True)]}).json()["results"]]
    got["verl compute_score_batch"] = [s["score"] for s in compute_score_batch(
        solution_strs=completions, ground_truths=ids, **{URL_KEY: url})]
    got["TRL reward function"] = make_reward_func(url)(completions=completions, task_id=ids)
    overrides = {"book_mirror": str(mirror_path()), "judge": {
        "allowed_base_urls": json.loads(judge_env["SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS"]),
        "default_model": "judge-match", "default_base_url": judge_env["SCALING_GRADER_JUDGE__DEFAULT_BASE_URL"]}}
    got["in-process (eval)"] = [r.reward for r in asyncio.run(grade_labelled_locally(ids, completions, overrides))]
    wrong_points = {where: rewards for where, rewards in got.items() if rewards != expected}
    assert not wrong_points, (expected, wrong_points)


def test_an_over_long_completion_is_a_scored_zero_that_says_why(url, table) -> None:
    task_id, completion, _ = table[4]
    with httpx.Client(base_url=url, timeout=120) as http:
        result = http.post("/v1/grade", json={"task_id": task_id, "completion": completion})
    assert result.status_code == 200
    body = result.json()
    assert (body["outcome"], body["reward"]) == ("too_long", 0.0) and "padding" not in result.text
