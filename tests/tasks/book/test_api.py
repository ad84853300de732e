"""The book split through the real HTTP API: chapter filtering in both query forms, and public
task views that never carry gold or notes."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.slow
def test_chapters_filter_comma_separated(server: str, bank) -> None:
    r = httpx.get(f"{server}/v1/tasks", params={"split": "book", "n": 500, "chapters": "roofline,tpus"}, timeout=30)
    assert r.status_code == 200
    tasks = r.json()["tasks"]
    assert {t["chapter"] for t in tasks} == {"roofline", "tpus"}
    assert len(tasks) == sum(t.chapter in {"roofline", "tpus"} for t in bank.tasks())


@pytest.mark.slow
def test_chapters_filter_repeated_parameter(server: str, bank) -> None:
    params = [("split", "book"), ("n", "500"), ("chapters", "gpus"), ("chapters", "inference")]
    tasks = httpx.get(f"{server}/v1/tasks", params=params, timeout=30).json()["tasks"]
    assert sorted(t["id"] for t in tasks) == sorted(t.id for t in bank.tasks() if t.chapter in {"gpus", "inference"})


@pytest.mark.slow
def test_public_task_has_no_gold(server: str, bank) -> None:
    task = bank.get("book/transformers/q1")
    r = httpx.get(f"{server}/v1/tasks/book/transformers/q1", timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["prompt"] == task.prompt and body["tags"] == list(task.tags)
    assert "gold" not in body and "hidden" not in body
    assert task.hidden["note"] not in r.text


@pytest.mark.slow
def test_splits_lists_the_book(server: str, bank) -> None:
    splits = {s["name"]: s for s in httpx.get(f"{server}/v1/splits", timeout=30).json()["splits"]}
    assert splits["book"]["size"] == bank.size()
    assert splits["book"]["excluded"] == len(bank.exclusions)


@pytest.mark.slow
def test_grade_a_book_task_over_http(server: str) -> None:
    right = httpx.post(f"{server}/v1/grade", json={"task_id": "book/tpus/q1", "completion": "Final answer: 10.4 ms"},
                       timeout=30)
    assert right.status_code == 200, right.text
    assert right.json()["reward"] == 1.0 and right.json()["outcome"] == "correct"
    wrong = httpx.post(f"{server}/v1/grade", json={"task_id": "book/tpus/q1", "completion": "Final answer: 1 ms"},
                       timeout=30)
    assert wrong.json()["reward"] == 0.0 and wrong.json()["outcome"] == "incorrect"
