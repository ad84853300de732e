"""Exam and judge grading through a real server process and a real (loopback) OpenAI-compatible
judge server; the embedded job backend runs judge items off the event loop."""

from __future__ import annotations

import httpx
import pytest

from app.settings import Settings
from app.tasks.exam.bank import load_bank
from tests.fake_openai import FakeOpenAI
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # a real HTTP server per module: left out of `make test-fast`


@pytest.fixture(scope="module")
def api(judge_server):
    env = {"SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": f'["{judge_server.base_url}"]'}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def _judge_task_id() -> tuple[str, str]:
    bank = load_bank(Settings())
    task = next(t for t in bank.tasks() if t.grading == "judge" and t.chapter == "sharding")
    return task.id, task.gold


def test_exam_split_filters_by_chapter(api: httpx.Client) -> None:
    tasks = api.get("/v1/tasks", params={"split": "exam", "chapters": "sharding", "n": 50}).json()["tasks"]
    assert tasks and {t["chapter"] for t in tasks} == {"sharding"}
    assert {t["grading"] for t in tasks} <= {"numeric", "judge"}


def test_judge_item_graded_through_the_judge(api: httpx.Client, judge_server: FakeOpenAI) -> None:
    task_id, reference = _judge_task_id()
    judge = {"model": "judge-match", "base_url": judge_server.base_url}
    right = api.post("/v1/grade", json={"task_id": task_id, "completion": reference, "judge": judge}).json()
    assert right["outcome"] == "correct" and right["reward"] == 1.0 and right["grading"] == "judge"
    wrong = api.post("/v1/grade", json={"task_id": task_id, "completion": "Something else.", "judge": judge}).json()
    assert wrong["outcome"] == "incorrect" and wrong["reward"] == 0.0
    sent = judge_server.requests[-1].body
    assert sent["max_tokens"] == 256 and sent["chat_template_kwargs"] == {"enable_thinking": False}


def test_judge_fault_is_unscored(api: httpx.Client, judge_server: FakeOpenAI) -> None:
    task_id, reference = _judge_task_id()
    judge = {"model": "judge-401", "base_url": judge_server.base_url}
    r = api.post("/v1/grade", json={"task_id": task_id, "completion": reference, "judge": judge}).json()
    assert r["outcome"] == "judge_error" and r["reward"] == 0.0


def test_a_reply_that_is_no_verdict_scores_zero(api: httpx.Client, judge_server: FakeOpenAI) -> None:
    # A response can provoke a chatty non-verdict: that must not turn its zero into "unscored".
    task_id, reference = _judge_task_id()
    judge = {"model": "judge-garbage", "base_url": judge_server.base_url}
    r = api.post("/v1/grade", json={"task_id": task_id, "completion": reference, "judge": judge}).json()
    assert r["outcome"] == "no_verdict" and r["reward"] == 0.0


def test_judge_items_without_a_judge_are_refused_up_front(api: httpx.Client) -> None:
    task_id, reference = _judge_task_id()
    r = api.post("/v1/grade", json={"task_id": task_id, "completion": reference})
    assert r.status_code == 422 and r.json()["error"] == "judge_unavailable"
    batch = api.post("/v1/grade/batch", json={"items": [
        {"reference": {"values": ["1 s"]}, "completion": "Final answer: 1 s"},
        {"task_id": task_id, "completion": reference},
    ]})
    assert batch.status_code == 422 and batch.json()["error"] == "judge_unavailable"


def test_a_base_url_outside_the_allow_list_is_refused(api: httpx.Client) -> None:
    task_id, reference = _judge_task_id()
    judge = {"model": "judge-yes", "base_url": "http://10.0.0.1:8000/v1"}
    r = api.post("/v1/grade", json={"task_id": task_id, "completion": reference, "judge": judge})
    assert r.status_code == 422 and r.json()["error"] == "judge_unavailable"
